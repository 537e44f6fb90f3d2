//! The Kubernetes wire conventions, checked request by request on both stores.

use std::time::Duration;

use futures::StreamExt as _;
use outpost_e2e::{Backend, ControlPlane, on_both_backends};
use serde_json::{Value, json};

on_both_backends!(
    bad_input_gets_the_right_status_and_nothing_is_stored,
    tokens_authenticate_and_groups_authorize,
    discovery_openapi_version_and_metrics,
    generation_status_and_optimistic_concurrency,
    patch_types,
    tables_for_lists_and_watches,
    watch_protocol,
    paged_lists,
);

const INSTALLS: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/installs";
const JSON: (&str, &str) = ("content-type", "application/json");

fn install(name: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": name, "labels": {"ring": "1"}},
        "spec": {"app": "shopfront", "approvalMode": "prompt",
                 "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"}},
    })
}

async fn create(cp: &ControlPlane, object: &Value) -> Value {
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            INSTALLS,
            &[JSON],
            object.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json
}

async fn count_installs(cp: &ControlPlane) -> usize {
    let reply = cp
        .raw(Some(&cp.admin_token), "GET", INSTALLS, &[], "")
        .await;
    reply.json["items"]
        .as_array()
        .map(Vec::len)
        .unwrap_or_default()
}

async fn bad_input_gets_the_right_status_and_nothing_is_stored(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    let strict = format!("{INSTALLS}?fieldValidation=Strict");

    let mut unknown = install("unknown-field");
    unknown["spec"]["colour"] = json!("blue");
    let reply = cp
        .raw(admin, "POST", &strict, &[JSON], unknown.to_string())
        .await;
    assert_eq!(
        (reply.status, reply.json["reason"].as_str()),
        (400, Some("BadRequest")),
        "{}",
        reply.text
    );
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
    assert_eq!(
        (reply.status, reply.json["reason"].as_str()),
        (422, Some("Invalid")),
        "{}",
        reply.text
    );
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
    assert_eq!(
        (reply.status, reply.json["reason"].as_str()),
        (413, Some("RequestEntityTooLarge")),
        "{}",
        reply.text
    );

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
    assert_eq!(
        (reply.status, reply.json["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
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
    assert_eq!(
        (reply.status, reply.json["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
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
    assert_eq!(
        (reply.status, reply.json["reason"].as_str()),
        (403, Some("Forbidden"))
    );
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
            .contains("outpost_store_request_duration_seconds")
    );
}

async fn generation_status_and_optimistic_concurrency(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    let path = format!("{INSTALLS}/gen");
    let mut created = install("gen");
    created["status"] = json!({"phase": "Active"});
    let created = create(&cp, &created).await;
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(
        created.get("status").is_none(),
        "status is set through /status only"
    );
    assert!(
        created["metadata"]["uid"].is_string()
            && created["metadata"]["creationTimestamp"].is_string()
    );

    let mut relabel = created.clone();
    relabel["metadata"]["labels"]["ring"] = json!("2");
    let relabeled = cp
        .raw(admin, "PUT", &path, &[JSON], relabel.to_string())
        .await;
    assert_eq!(relabeled.status, 200, "{}", relabeled.text);
    assert_eq!(
        relabeled.json["metadata"]["generation"], 1,
        "metadata changes keep the generation"
    );

    // A stale resourceVersion conflicts, with Kubernetes' message.
    let reply = cp
        .raw(admin, "PUT", &path, &[JSON], relabel.to_string())
        .await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    assert_eq!(
        reply.json["message"],
        r#"Operation cannot be fulfilled on installs.outpost.dev "gen": the object has been modified; please apply your changes to the latest version and try again"#
    );

    let mut respec = relabeled.json.clone();
    respec["spec"]["approvalMode"] = json!("approve-all");
    let respecced = cp
        .raw(admin, "PUT", &path, &[JSON], respec.to_string())
        .await;
    assert_eq!(respecced.json["metadata"]["generation"], 2);

    let mut status = respecced.json.clone();
    status["status"] = json!({"phase": "Active"});
    status["spec"]["approvalMode"] = json!("prompt");
    let reply = cp
        .raw(
            admin,
            "PUT",
            &format!("{path}/status"),
            &[JSON],
            status.to_string(),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["status"]["phase"], "Active");
    assert_eq!(
        reply.json["spec"]["approvalMode"], "approve-all",
        "/status ignores spec"
    );
    assert_eq!(reply.json["metadata"]["generation"], 2);
    let rv: i64 = reply.json["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rv > respecced.json["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
    );
}

async fn patch_types(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let path = format!("{INSTALLS}/p");
    create(&cp, &install("p")).await;
    let merge = cp
        .patch(
            &path,
            "application/merge-patch+json",
            r#"{"spec":{"approvalMode":"approve-all"}}"#,
        )
        .await;
    assert_eq!(
        (merge.status, merge.json["spec"]["approvalMode"].as_str()),
        (200, Some("approve-all")),
        "{}",
        merge.text
    );
    // kube-rs adds finalizers with a `test` of a missing path against null.
    let json_patch = r#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["x/y"]}]"#;
    let reply = cp
        .patch(&path, "application/json-patch+json", json_patch)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["metadata"]["finalizers"], json!(["x/y"]));
    // Patches without a resourceVersion are unconditional: racing ones are all applied
    // (the server retries a lost race), as kube-apiserver does.
    let racing = (0..16).map(|i| {
        let body = json!({"metadata": {"labels": {format!("k{i}"): "v"}}}).to_string();
        let path = &path;
        let cp = &cp;
        async move { cp.patch(path, "application/merge-patch+json", body).await }
    });
    for reply in futures::future::join_all(racing).await {
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let raced = cp.raw(Some(&cp.admin_token), "GET", &path, &[], "").await;
    let labels = raced.json["metadata"]["labels"].as_object().unwrap();
    assert!(
        (0..16).all(|i| labels.contains_key(&format!("k{i}"))),
        "{labels:?}"
    );
    // One naming an old resourceVersion is conditional on it.
    let stale = json!({"metadata": {"resourceVersion": merge.json["metadata"]["resourceVersion"]},
                       "spec": {"approvalMode": "prompt"}});
    let reply = cp
        .patch(&path, "application/merge-patch+json", stale.to_string())
        .await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    let failing = r#"[{"op":"test","path":"/spec/app","value":"other"}]"#;
    let reply = cp
        .patch(&path, "application/json-patch+json", failing)
        .await;
    assert_eq!(reply.status, 422, "{}", reply.text);

    let apply = "apiVersion: outpost.dev/v1alpha1\nkind: Install\nmetadata:\n  name: p\nspec:\n  app: shopfront\n  approvalMode: prompt\n  cloud:\n    provider: aws\n    accountId: \"123456789012\"\n    region: us-east-1\n";
    let conflict = cp
        .patch(
            &format!("{path}?fieldManager=tool"),
            "application/apply-patch+yaml",
            apply,
        )
        .await;
    assert_eq!(
        conflict.status, 409,
        "a field another manager set conflicts: {}",
        conflict.text
    );
    let forced = cp
        .patch(
            &format!("{path}?fieldManager=tool&force=true"),
            "application/apply-patch+yaml",
            apply,
        )
        .await;
    assert_eq!(forced.status, 200, "{}", forced.text);
    assert_eq!(forced.json["spec"]["cloud"]["region"], "us-east-1");
    let managers: Vec<&str> = forced.json["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"tool"), "{managers:?}");
    // Apply creates when absent.
    let created = cp
        .patch(
            &format!("{INSTALLS}/fresh?fieldManager=tool"),
            "application/apply-patch+yaml",
            apply.replace("name: p", "name: fresh"),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
}

async fn tables_for_lists_and_watches(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    create(&cp, &install("t")).await;
    let accept = (
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    );
    let table = cp
        .raw(Some(&cp.admin_token), "GET", INSTALLS, &[accept], "")
        .await;
    assert_eq!(table.json["kind"], "Table", "{}", table.text);
    let columns: Vec<&str> = table.json["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns.first(), Some(&"Name"));
    assert!(
        columns.contains(&"Age") && columns.contains(&"App"),
        "{columns:?}"
    );
    assert_eq!(table.json["rows"][0]["cells"][0], "t");
    let (status, mut lines) = cp
        .stream_lines(&format!("{INSTALLS}?watch=true"), &[accept])
        .await;
    assert_eq!(status, 200);
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert_eq!(first["object"]["rows"][0]["cells"][0], "t");
}

async fn next_event(lines: &mut (impl futures::Stream<Item = Value> + Unpin)) -> Value {
    tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream is open")
}

async fn watch_protocol(backend: Backend) {
    let mut cp = ControlPlane::start(backend).await;
    let first = create(&cp, &install("w1")).await;
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // From a revision: only later changes; bookmarks when allowed (every second here).
    let (status, mut lines) = cp
        .stream_lines(
            &format!("{INSTALLS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true"),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    create(&cp, &install("w2")).await;
    let added = next_event(&mut lines).await;
    assert_eq!(
        (
            added["type"].as_str(),
            added["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("w2"))
    );
    let bookmark = next_event(&mut lines).await;
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Install");
    assert!(bookmark["object"]["metadata"]["resourceVersion"].is_string());

    // Streaming lists: every object, then the initial-events-end bookmark.
    let (_, mut lines) = cp
        .stream_lines(&format!("{INSTALLS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"), &[])
        .await;
    let mut names = vec![];
    loop {
        let event = next_event(&mut lines).await;
        if event["type"] == "BOOKMARK" {
            assert_eq!(
                event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
                "true"
            );
            break;
        }
        names.push(
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(names, ["w1", "w2"]);

    // The server ends a watch after timeoutSeconds.
    let (_, mut lines) = cp
        .stream_lines(
            &format!("{INSTALLS}?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
            &[],
        )
        .await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while lines.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream closed after timeoutSeconds");

    // After a restart the history is gone: a 410 inside a 200 stream.
    cp.restart().await;
    let (status, mut lines) = cp
        .stream_lines(&format!("{INSTALLS}?watch=true&resourceVersion={rv}"), &[])
        .await;
    assert_eq!(status, 200);
    let error = next_event(&mut lines).await;
    assert_eq!(error["type"], "ERROR");
    assert_eq!(
        (
            error["object"]["code"].as_i64(),
            error["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
}

async fn paged_lists(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    for i in 0..7 {
        create(&cp, &install(&format!("page-{i}"))).await;
    }
    let mut names = Vec::new();
    let mut path = format!("{INSTALLS}?limit=3");
    let mut revisions = Vec::new();
    loop {
        let page = cp.raw(admin, "GET", &path, &[], "").await;
        assert_eq!(page.status, 200, "{}", page.text);
        assert!(page.json["items"].as_array().unwrap().len() <= 3);
        revisions.push(page.json["metadata"]["resourceVersion"].clone());
        names.extend(
            page.json["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()),
        );
        if names.len() == 3 {
            create(&cp, &install("page-9-late")).await; // not in this paged read
        }
        match page.json["metadata"]["continue"].as_str() {
            Some(token) => path = format!("{INSTALLS}?limit=3&continue={token}"),
            None => break,
        }
    }
    assert_eq!(
        names,
        (0..7).map(|i| format!("page-{i}")).collect::<Vec<_>>()
    );
    assert!(
        revisions.windows(2).all(|w| w[0] == w[1]),
        "every page at one revision: {revisions:?}"
    );
    let selected = cp
        .raw(
            admin,
            "GET",
            &format!("{INSTALLS}?labelSelector=ring%3D1&limit=100"),
            &[],
            "",
        )
        .await;
    assert_eq!(selected.json["items"].as_array().unwrap().len(), 8);

    // A paged read whose revision was compacted: 410 with a fresh token that continues.
    let first = cp
        .raw(admin, "GET", &format!("{INSTALLS}?limit=3"), &[], "")
        .await;
    let token = first.json["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 0..70 {
        create(&cp, &install(&format!("zz-{i:02}"))).await;
    }
    if let Some(endpoint) = cp.etcd_endpoint() {
        use outpost_apiserver::storage::Store as _;
        let etcd = outpost_apiserver::storage::EtcdStore::connect(&[endpoint.to_owned()])
            .await
            .unwrap();
        etcd.compact(etcd.current_revision().await.unwrap())
            .await
            .unwrap();
    }
    let expired = cp
        .raw(
            admin,
            "GET",
            &format!("{INSTALLS}?limit=3&continue={token}"),
            &[],
            "",
        )
        .await;
    assert_eq!(
        (expired.status, expired.json["reason"].as_str()),
        (410, Some("Expired")),
        "{}",
        expired.text
    );
    let fresh = expired.json["metadata"]["continue"]
        .as_str()
        .expect("a fresh continue token")
        .to_owned();
    let resumed = cp
        .raw(
            admin,
            "GET",
            &format!("{INSTALLS}?limit=3&continue={fresh}"),
            &[],
            "",
        )
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(
        resumed.json["items"][0]["metadata"]["name"], "page-3",
        "continues after the first page's last key"
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
    let down = outpost_e2e::eventually(20, "/readyz to fail without etcd", async || {
        let reply = cp.raw(None, "GET", "/readyz", &[], "").await;
        (reply.status != 200).then_some(reply)
    })
    .await;
    assert_eq!(down.status, 503, "{}", down.text);
    assert!(down.text.contains("[-]store failed"), "{}", down.text);
    assert_eq!(cp.raw(None, "GET", "/livez", &[], "").await.status, 200);
}
