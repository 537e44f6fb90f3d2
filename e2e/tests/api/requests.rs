//! Bad input, authentication and authorization, discovery, OpenAPI and metrics.

use super::*;

on_both_backends!(
    bad_input_gets_the_right_status_and_nothing_is_stored,
    tokens_authenticate_and_groups_authorize,
    discovery_openapi_version_and_metrics
);

async fn bad_input_gets_the_right_status_and_nothing_is_stored(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    let strict = format!("{INSTALLS}?fieldValidation=Strict");

    let mut unknown = install("unknown-field");
    unknown["spec"]["colour"] = json!("blue");
    let reply = cp
        .raw(admin, "POST", &strict, &[JSON], unknown.to_string())
        .await;
    reply.assert_status(400, "BadRequest", "");
    assert!(
        reply.json["message"]
            .as_str()
            .unwrap()
            .contains(r#"strict decoding error: unknown field "spec.colour""#),
        "{}",
        reply.text
    );

    let mut wrong_type = install("wrong-type");
    wrong_type["spec"]["cloud"]["region"] = json!(5);
    let reply = cp
        .raw(admin, "POST", INSTALLS, &[JSON], wrong_type.to_string())
        .await;
    reply.assert_status(422, "Invalid", "");
    let causes = reply.json["details"]["causes"].as_array().expect("causes");
    assert!(
        causes.iter().any(|c| c["field"] == "spec.cloud.region"),
        "{}",
        reply.text
    );

    let reply = cp
        .raw(
            admin,
            "POST",
            INSTALLS,
            &[JSON],
            install("Bad_Name").to_string(),
        )
        .await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert_eq!(reply.json["details"]["causes"][0]["field"], "metadata.name");
    assert!(
        reply.json["message"]
            .as_str()
            .unwrap()
            .starts_with(r#"Install.outpost.dev "Bad_Name" is invalid"#),
        "{}",
        reply.text
    );

    let mut bad_value = install("bad-mode");
    bad_value["spec"]["approvalMode"] = json!("sometimes");
    let reply = cp
        .raw(admin, "POST", INSTALLS, &[JSON], bad_value.to_string())
        .await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(reply.text.contains("spec.approvalMode"), "{}", reply.text);

    let reply = cp
        .raw(admin, "POST", INSTALLS, &[JSON], "{\"kind\": ")
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.json["kind"], "Status");

    let reply = cp
        .raw(
            admin,
            "POST",
            INSTALLS,
            &[("content-type", "application/yaml")],
            "kind: [unclosed",
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text);

    let mut huge = install("huge");
    huge["metadata"]["annotations"] = json!({"big": "x".repeat(2 * 1024 * 1024)});
    let reply = cp
        .raw(admin, "POST", INSTALLS, &[JSON], huge.to_string())
        .await;
    reply.assert_status(413, "RequestEntityTooLarge", "");

    let reply = cp
        .patch(
            &format!("{INSTALLS}/x"),
            "application/strategic-merge-patch+json",
            "{}",
        )
        .await;
    assert_eq!(reply.status, 415, "{}", reply.text);

    assert_eq!(count_installs(&cp).await, 0, "nothing was stored");

    // Duplicate create: 409 AlreadyExists; missing: 404 NotFound.
    create(&cp, &install("once")).await;
    let reply = cp
        .raw(
            admin,
            "POST",
            INSTALLS,
            &[JSON],
            install("once").to_string(),
        )
        .await;
    reply.assert_status(409, "AlreadyExists", "");
    assert_eq!(
        reply.json["message"],
        r#"installs.outpost.dev "once" already exists"#
    );
    let reply = cp
        .raw(admin, "GET", &format!("{INSTALLS}/nope"), &[], "")
        .await;
    assert_eq!(
        (reply.status, reply.json["message"].as_str()),
        (404, Some(r#"installs.outpost.dev "nope" not found"#))
    );
}

async fn tokens_authenticate_and_groups_authorize(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let reply = cp.raw(None, "GET", INSTALLS, &[], "").await;
    reply.assert_status(401, "Unauthorized", "");
    let reply = cp.raw(Some("not-a-token"), "GET", INSTALLS, &[], "").await;
    assert_eq!(reply.status, 401);
    for open in ["/healthz", "/readyz", "/livez", "/version"] {
        assert_eq!(
            cp.raw(None, "GET", open, &[], "").await.status,
            200,
            "{open}"
        );
    }
    create(&cp, &install("a")).await;
    let viewer = Some(cp.viewer_token.as_str());
    assert_eq!(
        cp.raw(viewer, "GET", &format!("{INSTALLS}/a"), &[], "")
            .await
            .status,
        200
    );
    let reply = cp
        .raw(viewer, "DELETE", &format!("{INSTALLS}/a"), &[], "")
        .await;
    reply.assert_status(403, "Forbidden", "");
    assert_eq!(
        reply.json["message"],
        r#"installs.outpost.dev "a" is forbidden: User "viewer" cannot delete resource "installs" in API group "outpost.dev" in the namespace "default""#
    );
    let nobody = Some(cp.nobody_token.as_str());
    let reply = cp.raw(nobody, "GET", INSTALLS, &[], "").await;
    assert_eq!(reply.status, 403);
    assert!(
        reply.json["message"]
            .as_str()
            .unwrap()
            .contains(r#"User "nobody" cannot list resource "installs""#)
    );
    // kubectl as a viewer: reads work, writes are refused with the server's message.
    let kubectl = cp.kubectl_as(&cp.viewer_token);
    assert!(kubectl.ok(&["get", "installs"]).contains('a'));
    let denied = kubectl.run(&["delete", "install", "a"]);
    assert!(
        !denied.ok && denied.stderr.contains("forbidden"),
        "{denied:?}"
    );
}

async fn discovery_openapi_version_and_metrics(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    let version = cp.raw(None, "GET", "/version", &[], "").await;
    assert_eq!(version.json["major"], "1");
    let groups = cp.raw(admin, "GET", "/apis", &[], "").await;
    assert_eq!(groups.json["kind"], "APIGroupList");
    let names: Vec<&str> = groups.json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(
        names.contains(&"outpost.dev") && names.contains(&"coordination.k8s.io"),
        "{names:?}"
    );
    let resources = cp
        .raw(admin, "GET", "/apis/outpost.dev/v1alpha1", &[], "")
        .await;
    let plans = resources.json["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "plans")
        .unwrap()
        .clone();
    assert_eq!(plans["shortNames"], json!(["pl"]));
    assert!(plans["verbs"].as_array().unwrap().contains(&json!("watch")));
    assert!(
        resources.json["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "plans/status")
    );
    let aggregated = cp
        .raw(
            admin,
            "GET",
            "/apis",
            &[(
                "accept",
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            )],
            "",
        )
        .await;
    assert!(
        aggregated.content_type.contains("as=APIGroupDiscoveryList"),
        "{}",
        aggregated.content_type
    );
    assert_eq!(aggregated.json["kind"], "APIGroupDiscoveryList");
    let outpost = aggregated.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "outpost.dev")
        .expect("outpost.dev listed");
    assert_eq!(
        outpost["versions"][0]["resources"][0]["responseKind"]["group"],
        "outpost.dev"
    );

    let index = cp.raw(admin, "GET", "/openapi/v3", &[], "").await;
    let url = index.json["paths"]["apis/outpost.dev/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .expect("group listed")
        .to_owned();
    let document = cp.raw(admin, "GET", &url, &[], "").await;
    assert_eq!(document.status, 200);
    let text = document.text;
    assert!(
        text.contains("x-kubernetes-group-version-kind"),
        "GVK extension present"
    );
    assert!(text.contains("fieldValidation"), "fieldValidation declared");

    let metrics = cp.raw(admin, "GET", "/metrics", &[], "").await;
    assert!(
        metrics
            .text
            .contains(r#"apiserver_request_total{verb="get",resource="",code="200"}"#),
        "{}",
        metrics.text
    );
    assert!(
        metrics
            .text
            .contains("apiserver_request_duration_seconds_bucket")
    );
    assert!(
        metrics
            .text
            .contains("apiserver_store_request_duration_seconds")
    );
}

/// `/readyz` asks the store: it turns 503 (naming the store) once etcd is gone, while
/// `/livez` stays 200, so a replica cut off from etcd leaves its Service and is not
/// restarted. The Helm chart's readiness probe is this endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_store() {
    let mut cp = ControlPlane::start(Backend::Etcd).await;
    let ready = cp.raw(None, "GET", "/readyz", &[], "").await;
    assert_eq!((ready.status, ready.text.as_str()), (200, "ok"));

    cp.stop_etcd();
    let down = outpost_testing::eventually(20, "/readyz to fail without etcd", async || {
        let reply = cp.raw(None, "GET", "/readyz", &[], "").await;
        (reply.status != 200).then_some(reply)
    })
    .await;
    assert_eq!(down.status, 503, "{}", down.text);
    assert!(down.text.contains("[-]store failed"), "{}", down.text);
    assert_eq!(cp.raw(None, "GET", "/livez", &[], "").await.status, 200);
}
