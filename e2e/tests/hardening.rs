//! What a careless or hostile client gets: kube-apiserver's limits (request body,
//! stored object, JSON patch work, nesting depth), names that match the URL and are
//! DNS names, and an append-only audit log. Each refusal is checked for its status
//! code, its `Status` body, and that the store is unchanged afterwards.

use std::time::Instant;

use outpost_testing::job_plans::{audit_event_body, audit_event_hash};
use outpost_testing::{Backend, ControlPlane, Reply, manifests, on_both_backends};
use serde_json::{Value, json};

on_both_backends!(
    limits_refuse_and_leave_the_store_unchanged,
    names_match_the_url_and_are_dns_names,
    the_audit_log_is_append_only,
);

const API: &str = "/apis/outpost.dev/v1alpha1/namespaces/default";
const JSON: [(&str, &str); 1] = [("content-type", "application/json")];
const MERGE: [(&str, &str); 1] = [("content-type", "application/merge-patch+json")];
const JSON_PATCH: [(&str, &str); 1] = [("content-type", "application/json-patch+json")];
const APPLY: [(&str, &str); 1] = [("content-type", "application/apply-patch+yaml")];

async fn get(cp: &ControlPlane, path: &str) -> Reply {
    cp.raw(Some(&cp.admin_token), "GET", path, &[], "").await
}

async fn admin(
    cp: &ControlPlane,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Reply {
    cp.raw(Some(&cp.admin_token), method, path, headers, body)
        .await
}

async fn limits_refuse_and_leave_the_store_unchanged(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let acme = format!("{API}/installs/acme");
    let before = get(&cp, &acme).await;
    assert_eq!(before.status, 200, "{}", before.text);
    let unchanged = async || {
        let now = get(&cp, &acme).await;
        assert_eq!(now.status, 200, "{}", now.text);
        assert_eq!(now.json, before.json, "the install is unchanged");
    };

    // A request body over 3 MiB: 413 before anything is decoded.
    let body =
        json!({"spec": {"inputs": {"extra_labels": "x".repeat(3 * 1024 * 1024)}}}).to_string();
    let reply = admin(&cp, "PATCH", &acme, &MERGE, body).await;
    reply.assert_status(
        413,
        "RequestEntityTooLarge",
        "Request entity too large: limit is 3145728",
    );
    unchanged().await;

    // Under 3 MiB of request, over 1.5 MiB of object: 413 naming the object, whether
    // merged, applied or put.
    let big = "x".repeat(2 * 1024 * 1024);
    let too_large = "installs.outpost.dev \"acme\" is too large: ";
    let reply = admin(
        &cp,
        "PATCH",
        &acme,
        &MERGE,
        json!({"spec": {"inputs": {"extra_labels": big}}}).to_string(),
    )
    .await;
    reply.assert_status(413, "RequestEntityTooLarge", too_large);
    assert!(
        reply.json["message"]
            .as_str()
            .unwrap()
            .ends_with("bytes, the limit is 1572864 bytes"),
        "{}",
        reply.text
    );
    assert_eq!(reply.json["details"]["name"], "acme");
    let applied = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Install", "metadata": {"name": "acme"},
                         "spec": {"inputs": {"extra_labels": big}}});
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{acme}?fieldManager=t&force=true"),
        &APPLY,
        applied.to_string(),
    )
    .await;
    reply.assert_status(413, "RequestEntityTooLarge", too_large);
    let mut put = before.json.clone();
    put["spec"]["inputs"]["extra_labels"] = json!(big);
    let reply = admin(&cp, "PUT", &acme, &JSON, put.to_string()).await;
    reply.assert_status(413, "RequestEntityTooLarge", too_large);
    unchanged().await;
    // An apply that would create a too large object creates nothing.
    let mut spec = before.json["spec"].clone();
    spec["inputs"]["extra_labels"] = json!(big);
    let huge = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
                      "metadata": {"name": "huge"}, "spec": spec});
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{API}/installs/huge?fieldManager=t"),
        &APPLY,
        huge.to_string(),
    )
    .await;
    reply.assert_status(
        413,
        "RequestEntityTooLarge",
        "installs.outpost.dev \"huge\" is too large: ",
    );
    assert_eq!(get(&cp, &format!("{API}/installs/huge")).await.status, 404);

    // A 7 KiB JSON patch whose copies double a map: stopped at 3 MiB copied (422), not
    // stored at 16 MiB.
    let mut ops =
        vec![json!({"op": "add", "path": "/spec/inputs/m", "value": {"k0": "x".repeat(1024)}})];
    ops.extend((1..=24).map(
        |i| json!({"op": "copy", "from": "/spec/inputs/m", "path": format!("/spec/inputs/m/k{i}")}),
    ));
    let body = serde_json::to_vec(&ops).unwrap();
    assert!(body.len() < 8 * 1024, "{} bytes", body.len());
    let started = Instant::now();
    let reply = admin(&cp, "PATCH", &acme, &JSON_PATCH, body).await;
    eprintln!("doubling JSON patch refused in {:?}", started.elapsed());
    reply.assert_status(422, "Invalid", "Install.outpost.dev \"acme\" is invalid: ");
    let cause = &reply.json["details"]["causes"][0];
    assert!(
        cause["message"]
            .as_str()
            .unwrap()
            .starts_with("Unable to complete the copy, the accumulated size increase of copy is "),
        "{}",
        reply.text
    );
    unchanged().await;

    // Nesting deeper than the limit (100): refused before the write, so the object can
    // still be read and deleted.
    let mut deep = json!(1);
    for _ in 0..120 {
        deep = json!({"a": deep});
    }
    let ops = json!([{"op": "add", "path": "/spec/inputs/deep", "value": deep}]);
    let reply = admin(&cp, "PATCH", &acme, &JSON_PATCH, ops.to_string()).await;
    reply.assert_status(422, "Invalid", "Install.outpost.dev \"acme\" is invalid: ");
    assert_eq!(
        reply.json["details"]["causes"][0]["field"], "spec.inputs.deep",
        "{}",
        reply.text
    );
    assert_eq!(
        reply.json["details"]["causes"][0]["reason"], "FieldValueTooLong",
        "{}",
        reply.text
    );
    // Deeper still, one path step at a time: each operation stays under the decoder's
    // limit, their sum would not.
    let mut path = String::from("/spec/inputs/d");
    let mut ops = vec![json!({"op": "add", "path": path, "value": {}})];
    for _ in 0..130 {
        path.push_str("/d");
        ops.push(json!({"op": "add", "path": path, "value": {}}));
    }
    let reply = admin(
        &cp,
        "PATCH",
        &acme,
        &JSON_PATCH,
        serde_json::to_vec(&ops).unwrap(),
    )
    .await;
    reply.assert_status(422, "Invalid", "Install.outpost.dev \"acme\" is invalid: ");
    unchanged().await;

    // More than 10,000 JSON patch operations: 413 with kube's message.
    let ops = vec![json!({"op": "test", "path": "/kind", "value": "Install"}); 10_001];
    let reply = admin(
        &cp,
        "PATCH",
        &acme,
        &JSON_PATCH,
        serde_json::to_vec(&ops).unwrap(),
    )
    .await;
    reply.assert_status(
        413,
        "RequestEntityTooLarge",
        "The allowed maximum operations in a JSON patch is 10000, got 10001",
    );
    unchanged().await;
    let reply = admin(&cp, "DELETE", &acme, &[], "").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

fn policy(name: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": name},
        "spec": {"inputs": ["terraform"], "module": format!("package outpost.{name}\n\ndeny contains \"x\" if input.bad\n")},
    })
}

async fn names_match_the_url_and_are_dns_names(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let policies = format!("{API}/policies");
    let mismatch = "the name of the object (pb) does not match the name on the URL (pa)";

    // Server-side apply to policies/pa naming pb: 400, nothing created.
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{policies}/pa?fieldManager=t"),
        &APPLY,
        policy("pb").to_string(),
    )
    .await;
    reply.assert_status(400, "BadRequest", mismatch);
    for name in ["pa", "pb"] {
        assert_eq!(
            get(&cp, &format!("{policies}/{name}")).await.status,
            404,
            "{name}"
        );
    }

    // Created properly, then renamed by PUT, merge patch, JSON patch and apply: 400 each.
    let created = admin(&cp, "POST", &policies, &JSON, policy("pa").to_string()).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let pa = format!("{policies}/pa");
    let before = get(&cp, &pa).await.json;
    let mut renamed = before.clone();
    renamed["metadata"]["name"] = json!("pb");
    let reply = admin(&cp, "PUT", &pa, &JSON, renamed.to_string()).await;
    reply.assert_status(400, "BadRequest", mismatch);
    let reply = admin(&cp, "PATCH", &pa, &MERGE, r#"{"metadata":{"name":"pb"}}"#).await;
    reply.assert_status(400, "BadRequest", mismatch);
    let reply = admin(
        &cp,
        "PATCH",
        &pa,
        &JSON_PATCH,
        r#"[{"op":"replace","path":"/metadata/name","value":"pb"}]"#,
    )
    .await;
    reply.assert_status(400, "BadRequest", mismatch);
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{pa}?fieldManager=t"),
        &APPLY,
        policy("pb").to_string(),
    )
    .await;
    reply.assert_status(400, "BadRequest", mismatch);
    // And moved to another namespace by PUT.
    let mut moved = before.clone();
    moved["metadata"]["namespace"] = json!("other");
    let reply = admin(&cp, "PUT", &pa, &JSON, moved.to_string()).await;
    reply.assert_status(
        400,
        "BadRequest",
        "the namespace of the object (other) does not match the namespace on the URL (default)",
    );
    assert_eq!(get(&cp, &pa).await.json, before, "pa is unchanged");
    assert_eq!(get(&cp, &format!("{policies}/pb")).await.status, 404);

    // Namespaces are DNS-1123 labels: 422 on create and on apply-create.
    let bad_ns = "/apis/outpost.dev/v1alpha1/namespaces/Bad_NS/policies";
    let reply = admin(&cp, "POST", bad_ns, &JSON, policy("pc").to_string()).await;
    reply.assert_status(
        422,
        "Invalid",
        "Policy.outpost.dev \"pc\" is invalid: metadata.namespace: Invalid value: \"Bad_NS\": a lowercase RFC 1123 label",
    );
    assert_eq!(
        reply.json["details"]["causes"][0]["field"],
        "metadata.namespace"
    );
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{bad_ns}/pc?fieldManager=t"),
        &APPLY,
        policy("pc").to_string(),
    )
    .await;
    reply.assert_status(
        422,
        "Invalid",
        "Policy.outpost.dev \"pc\" is invalid: metadata.namespace",
    );
    let listed = get(&cp, bad_ns).await;
    assert_eq!(listed.json["items"], json!([]), "{}", listed.text);

    // Names are DNS-1123 subdomains on create and on apply-create alike.
    let reply = admin(
        &cp,
        "POST",
        &policies,
        &JSON,
        policy("Bad_Name").to_string(),
    )
    .await;
    reply.assert_status(
        422,
        "Invalid",
        "Policy.outpost.dev \"Bad_Name\" is invalid: metadata.name",
    );
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{policies}/Bad_Name?fieldManager=t"),
        &APPLY,
        policy("Bad_Name").to_string(),
    )
    .await;
    reply.assert_status(
        422,
        "Invalid",
        "Policy.outpost.dev \"Bad_Name\" is invalid: metadata.name",
    );
    let listed = get(&cp, &policies).await;
    assert_eq!(listed.item_names(), ["pa"]);
}

async fn the_audit_log_is_append_only(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let events = format!("{API}/auditevents");
    let acme = cp.mint_runner_token("default/acme");
    let globex = cp.mint_runner_token("default/globex");
    let (acme, globex) = (Some(acme.as_str()), Some(globex.as_str()));
    let listed = async || get(&cp, &events).await.json["items"].clone();
    let append = async |token, body: String| cp.raw(token, "POST", &events, &JSON, body).await;

    // Admins cannot write the log: only the runner token of the install appends to it.
    let admin_token = Some(cp.admin_token.as_str());
    let reply = append(admin_token, audit_event_body("acme", 0, None, "acme-0")).await;
    reply.assert_status(
        403,
        "Forbidden",
        "auditevents.outpost.dev is forbidden: User \"admin\" cannot create resource \"auditevents\"",
    );
    assert!(
        reply.json["message"]
            .as_str()
            .unwrap()
            .ends_with("only the runner token of install \"acme\" may append to its audit log"),
        "{}",
        reply.text
    );
    assert_eq!(listed().await, json!([]));

    let reply = append(acme, audit_event_body("acme", 0, None, "acme-0")).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let first = audit_event_hash("acme", 0);
    // Another install's token, for acme's chain: 403; acme's token for globex's: 403.
    let reply = append(globex, audit_event_body("acme", 1, Some(&first), "acme-1")).await;
    reply.assert_status(
        403,
        "Forbidden",
        "auditevents.outpost.dev is forbidden: User \"system:runner:default:globex\"",
    );
    let reply = append(acme, audit_event_body("globex", 0, None, "globex-0")).await;
    reply.assert_status(
        403,
        "Forbidden",
        "auditevents.outpost.dev is forbidden: User \"system:runner:default:acme\"",
    );
    // Out of sequence: a gap, a wrong link, a taken sequence, a name that is not
    // <install>-<sequence>.
    let reply = append(acme, audit_event_body("acme", 5, Some(&first), "acme-5")).await;
    reply.assert_status(
        409,
        "Conflict",
        "Operation cannot be fulfilled on auditevents.outpost.dev \"acme-5\": sequence 5 is not the next of install \"acme\"'s audit log: event acme-4 is not stored",
    );
    let wrong = audit_event_hash("other", 0);
    let reply = append(acme, audit_event_body("acme", 1, Some(&wrong), "acme-1")).await;
    reply.assert_status(
        409,
        "Conflict",
        "Operation cannot be fulfilled on auditevents.outpost.dev \"acme-1\": spec.previousHash",
    );
    let mut again: Value =
        serde_json::from_str(&audit_event_body("acme", 0, None, "acme-0")).unwrap();
    again["spec"]["type"] = json!("apply");
    let reply = append(acme, again.to_string()).await;
    reply.assert_status(
        409,
        "AlreadyExists",
        "auditevents.outpost.dev \"acme-0\" already exists",
    );
    let reply = append(acme, audit_event_body("acme", 1, Some(&first), "renamed")).await;
    reply.assert_status(
        422,
        "Invalid",
        "AuditEvent.outpost.dev \"renamed\" is invalid: metadata.name",
    );
    let names = |items: &Value| -> Vec<String> {
        items
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(&listed().await),
        ["acme-0"],
        "nothing else was stored"
    );
    // The next link is appended.
    let reply = append(acme, audit_event_body("acme", 1, Some(&first), "acme-1")).await;
    assert_eq!(reply.status, 201, "{}", reply.text);

    // Nobody changes or deletes an event, admins included: 405, the log unchanged.
    let before = listed().await;
    let one = format!("{events}/acme-0");
    let stored = get(&cp, &one).await.json;
    let append_only = "auditevents.outpost.dev \"acme-0\" cannot be changed or deleted: the audit log is append-only";
    let reply = admin(&cp, "DELETE", &one, &[], "").await;
    reply.assert_status(405, "MethodNotAllowed", append_only);
    let reply = admin(&cp, "PATCH", &one, &MERGE, r#"{"spec":{"type":"apply"}}"#).await;
    reply.assert_status(405, "MethodNotAllowed", append_only);
    let reply = admin(
        &cp,
        "PATCH",
        &one,
        &JSON_PATCH,
        r#"[{"op":"remove","path":"/spec/signature"}]"#,
    )
    .await;
    reply.assert_status(405, "MethodNotAllowed", append_only);
    let reply = admin(
        &cp,
        "PATCH",
        &format!("{one}?fieldManager=t&force=true"),
        &APPLY,
        audit_event_body("acme", 0, None, "acme-0"),
    )
    .await;
    reply.assert_status(405, "MethodNotAllowed", append_only);
    let mut put = stored.clone();
    put["spec"]["type"] = json!("apply");
    let reply = admin(&cp, "PUT", &one, &JSON, put.to_string()).await;
    reply.assert_status(405, "MethodNotAllowed", append_only);
    let reply = admin(&cp, "DELETE", &events, &[], "").await;
    reply.assert_status(
        405,
        "MethodNotAllowed",
        "auditevents.outpost.dev \"\" cannot be changed or deleted: the audit log is append-only",
    );
    // Viewers and runners are stopped earlier, by authorization.
    let viewer = Some(cp.viewer_token.as_str());
    assert_eq!(cp.raw(viewer, "DELETE", &one, &[], "").await.status, 403);
    assert_eq!(cp.raw(acme, "DELETE", &one, &[], "").await.status, 403);
    assert_eq!(
        cp.raw(acme, "PATCH", &one, &MERGE, r#"{"spec":{"type":"apply"}}"#)
            .await
            .status,
        403
    );
    assert_eq!(get(&cp, &one).await.json, stored, "acme-0 is unchanged");
    assert_eq!(listed().await, before, "the log is unchanged");
}
