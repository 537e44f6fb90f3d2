//! Runner tokens: minted per install by an admin (`POST .../installs/NAME/token`,
//! `outpost token`), stored only as a hash, rotated by minting again; a runner token
//! reaches only its own install's objects (403 elsewhere, with kube-apiserver's message).

use outpost_testing::job_plans::{audit_event_body, audit_event_hash, plan_body};
use outpost_testing::{Backend, ControlPlane, Reply, manifests, on_both_backends};
use serde_json::{Value, json};

on_both_backends!(runner_tokens_reach_only_their_install);

const API: &str = "/apis/outpost.dev/v1alpha1/namespaces/default";

fn drift_report(name: &str, install: &str) -> Vec<u8> {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "DriftReport",
        "metadata": {"name": name, "labels": {"outpost.dev/install": install}},
        "spec": {
            "install": install,
            "entity": {"kind": "component", "name": "web"},
            "inSync": true,
            "observedAt": "2025-01-15T10:00:00Z",
            "diff": [],
        },
    })
    .to_string()
    .into_bytes()
}

/// The audit event `<install>-<sequence>`, linked to the one before it as a runner
/// ships them.
fn audit_event(install: &str, sequence: u64) -> Vec<u8> {
    let previous = sequence
        .checked_sub(1)
        .map(|before| audit_event_hash(install, before));
    let name = format!("{install}-{sequence}");
    audit_event_body(install, sequence, previous.as_deref(), &name).into_bytes()
}

const JSON: [(&str, &str); 1] = [("content-type", "application/json")];
const MERGE: [(&str, &str); 1] = [("content-type", "application/merge-patch+json")];

fn expect(reply: &Reply, status: u16, what: &str) {
    assert_eq!(reply.status, status, "{what}: {}", reply.text);
}

async fn runner_tokens_reach_only_their_install(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let admin = Some(cp.admin_token.as_str());
    for (install, suffix) in [("acme", "a"), ("globex", "b")] {
        let plans = format!("{API}/plans");
        expect(
            &cp.raw(
                admin,
                "POST",
                &plans,
                &JSON,
                plan_body(&format!("plan-{suffix}"), install),
            )
            .await,
            201,
            "admin creates a plan",
        );
        let reports = format!("{API}/driftreports");
        expect(
            &cp.raw(
                admin,
                "POST",
                &reports,
                &JSON,
                drift_report(&format!("drift-{suffix}"), install),
            )
            .await,
            201,
            "admin creates a drift report",
        );
    }

    // Only admins mint; the answer is a RunnerToken; the Install keeps only the hash.
    let viewer = Some(cp.viewer_token.as_str());
    expect(
        &cp.raw(
            viewer,
            "POST",
            &format!("{API}/installs/acme/token"),
            &JSON,
            "{}",
        )
        .await,
        403,
        "a viewer mints",
    );
    let minted = cp
        .raw(
            admin,
            "POST",
            &format!("{API}/installs/acme/token"),
            &JSON,
            "{}",
        )
        .await;
    expect(&minted, 201, "the admin mints");
    assert_eq!(minted.json["kind"], "RunnerToken");
    let old_a = minted.json["token"].as_str().unwrap().to_owned();
    assert!(old_a.starts_with("opr_default_acme_"), "{old_a}");
    let token_a = cp.mint_runner_token("default/acme"); // rotates
    let token_b = cp.mint_runner_token("default/globex");
    // Only a runner token appends to its install's audit log (admins cannot).
    for (token, install) in [(&token_a, "acme"), (&token_b, "globex")] {
        expect(
            &cp.raw(
                Some(token),
                "POST",
                &format!("{API}/auditevents"),
                &JSON,
                audit_event(install, 0),
            )
            .await,
            201,
            "a runner creates its first audit event",
        );
    }
    let install = cp
        .raw(admin, "GET", &format!("{API}/installs/acme"), &[], "")
        .await;
    let hash = install.json["status"]["runnerTokenHash"].as_str().unwrap();
    assert_eq!(hash.len(), 64);
    assert!(
        !install.text.contains(&token_a),
        "the token itself is never stored"
    );

    // A rotated token and a forged one are unauthenticated.
    let old = Some(old_a.as_str());
    expect(
        &cp.raw(old, "GET", &format!("{API}/installs/acme"), &[], "")
            .await,
        401,
        "the rotated token",
    );
    let forged = format!("{}x", &token_a[..token_a.len() - 1]);
    expect(
        &cp.raw(
            Some(&forged),
            "GET",
            &format!("{API}/installs/acme"),
            &[],
            "",
        )
        .await,
        401,
        "a forged token",
    );

    let b = Some(token_b.as_str());
    // Install B's token on install A's objects: 403, kube-apiserver's message.
    let denied = cp
        .raw(b, "GET", &format!("{API}/plans/plan-a"), &[], "")
        .await;
    expect(&denied, 403, "B gets A's plan");
    assert_eq!(denied.json["reason"], "Forbidden");
    assert!(
        denied.json["message"].as_str().unwrap().starts_with(
            "plans.outpost.dev \"plan-a\" is forbidden: User \"system:runner:default:globex\" cannot get resource \"plans\" in API group \"outpost.dev\" in the namespace \"default\""
        ),
        "{}",
        denied.text
    );
    for (path, what) in [
        (
            format!("{API}/plans?labelSelector=outpost.dev%2Finstall%3Dacme"),
            "B lists A's plans",
        ),
        (
            format!("{API}/plans?fieldSelector=spec.install%3Dacme"),
            "B lists A's plans by field",
        ),
        (format!("{API}/plans"), "B lists every plan"),
        (
            format!("{API}/plans?watch=true&labelSelector=outpost.dev%2Finstall%3Dacme"),
            "B watches A's plans",
        ),
        (format!("{API}/plans?watch=true"), "B watches every plan"),
        (format!("{API}/installs/acme"), "B gets install A"),
        (format!("{API}/installs"), "B lists installs"),
        (
            format!("{API}/driftreports/drift-a"),
            "B gets A's drift report",
        ),
        (
            format!("{API}/driftreports?labelSelector=outpost.dev%2Finstall%3Dacme"),
            "B lists A's drift reports",
        ),
        (
            format!("{API}/auditevents/acme-0"),
            "B gets A's audit event",
        ),
        (
            format!("{API}/auditevents?labelSelector=outpost.dev%2Finstall%3Dacme"),
            "B lists A's audit events",
        ),
        (format!("{API}/installstacks"), "B lists install stacks"),
        (
            "/apis/outpost.dev/v1alpha1/namespaces/other/apps".to_owned(),
            "B reads another namespace",
        ),
    ] {
        expect(&cp.raw(b, "GET", &path, &[], "").await, 403, what);
    }
    expect(
        &cp.raw(
            b,
            "PATCH",
            &format!("{API}/plans/plan-a/status"),
            &MERGE,
            r#"{"status":{"message":"x"}}"#,
        )
        .await,
        403,
        "B patches A's plan status",
    );
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/auditevents"),
            &JSON,
            audit_event("acme", 1),
        )
        .await,
        403,
        "B creates an audit event for A",
    );
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/driftreports"),
            &JSON,
            drift_report("forged", "acme"),
        )
        .await,
        403,
        "B creates a drift report for A",
    );
    // Mislabelled: spec says B, label says A (it would show in A's label selections).
    let mut mislabelled: Value =
        serde_json::from_slice(&drift_report("mislabelled", "globex")).unwrap();
    mislabelled["metadata"]["labels"]["outpost.dev/install"] = json!("acme");
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/driftreports"),
            &JSON,
            mislabelled.to_string(),
        )
        .await,
        403,
        "B creates a mislabelled drift report",
    );

    // Install B's token on its own objects: allowed.
    for (path, what) in [
        (format!("{API}/plans/plan-b"), "B gets its plan"),
        (
            format!("{API}/plans/plan-b/status"),
            "B gets its plan's status",
        ),
        (
            format!("{API}/plans?labelSelector=outpost.dev%2Finstall%3Dglobex"),
            "B lists its plans",
        ),
        (
            format!("{API}/plans?fieldSelector=spec.install%3Dglobex"),
            "B lists its plans by field",
        ),
        (
            format!(
                "{API}/plans?watch=true&timeoutSeconds=1&labelSelector=outpost.dev%2Finstall%3Dglobex"
            ),
            "B watches its plans",
        ),
        (format!("{API}/installs/globex"), "B gets its install"),
        (
            format!("{API}/installs?fieldSelector=metadata.name%3Dglobex"),
            "B lists its install",
        ),
        (format!("{API}/apps"), "B lists apps"),
        (format!("{API}/components"), "B lists components"),
        (
            format!("{API}/driftreports/drift-b"),
            "B gets its drift report",
        ),
        (
            format!("{API}/auditevents?labelSelector=outpost.dev%2Finstall%3Dglobex"),
            "B lists its audit events",
        ),
    ] {
        expect(&cp.raw(b, "GET", &path, &[], "").await, 200, what);
    }
    let listed = cp
        .raw(
            b,
            "GET",
            &format!("{API}/plans?labelSelector=outpost.dev%2Finstall%3Dglobex"),
            &[],
            "",
        )
        .await;
    assert_eq!(listed.item_names(), ["plan-b"]);
    // The same selections read from the store (a read at an exact revision, as every
    // page after a list's first is): B's own plan only, A's still refused; the admin
    // pages through both.
    let revision = listed.json["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list's resourceVersion")
        .to_owned();
    let exact = |query: &str| {
        format!("{API}/plans?{query}&resourceVersionMatch=Exact&resourceVersion={revision}&limit=1")
    };
    let from_store = cp
        .raw(
            b,
            "GET",
            &exact("labelSelector=outpost.dev%2Finstall%3Dglobex"),
            &[],
            "",
        )
        .await;
    expect(&from_store, 200, "B lists its plans from the store");
    assert_eq!(from_store.item_names(), ["plan-b"]);
    expect(
        &cp.raw(
            b,
            "GET",
            &exact("labelSelector=outpost.dev%2Finstall%3Dacme"),
            &[],
            "",
        )
        .await,
        403,
        "B lists A's plans from the store",
    );
    let first = cp.raw(admin, "GET", &exact("watch=false"), &[], "").await;
    expect(&first, 200, "the admin lists plans from the store");
    assert_eq!(first.item_names(), ["plan-a"]);
    let token = first.json["metadata"]["continue"]
        .as_str()
        .expect("a continue token after the first of two plans");
    let second = cp
        .raw(
            admin,
            "GET",
            &format!("{API}/plans?limit=1&continue={token}"),
            &[],
            "",
        )
        .await;
    expect(&second, 200, "the admin's next page");
    assert_eq!(second.item_names(), ["plan-b"]);
    // A consistent list's next pages are read from what the cache kept at its revision
    // (every Plan of the namespace, not only those the first page's reader could see):
    // each page applies its own reader's access and selectors, whoever made the token.
    let first = cp
        .raw(admin, "GET", &format!("{API}/plans?limit=1"), &[], "")
        .await;
    expect(&first, 200, "the admin's consistent list");
    assert_eq!(first.item_names(), ["plan-a"]);
    let token = first.json["metadata"]["continue"]
        .as_str()
        .expect("a continue token after the first of two plans")
        .to_owned();
    let a = Some(token_a.as_str());
    let by_b = "labelSelector=outpost.dev%2Finstall%3Dglobex";
    let by_a = "labelSelector=outpost.dev%2Finstall%3Dacme";
    for (who, query, status, names, what) in [
        (admin, "", 200, vec!["plan-b"], "the admin's next page"),
        (viewer, "", 200, vec!["plan-b"], "a viewer continues"),
        (
            b,
            by_b,
            200,
            vec!["plan-b"],
            "B continues with its own selection",
        ),
        (a, by_a, 200, vec![], "A continues with its own selection"),
        (b, by_a, 403, vec![], "B continues with A's selection"),
        (b, "", 403, vec![], "B continues with no selection"),
        (None, "", 401, vec![], "no token continues"),
        (
            Some("opr_default_globex_forged"),
            by_b,
            401,
            vec![],
            "a forged token",
        ),
    ] {
        let page = cp
            .raw(
                who,
                "GET",
                &format!("{API}/plans?limit=1&continue={token}&{query}"),
                &[],
                "",
            )
            .await;
        expect(&page, status, what);
        if status == 200 {
            assert_eq!(page.item_names(), names, "{what}");
            assert_eq!(
                page.json["metadata"]["resourceVersion"], first.json["metadata"]["resourceVersion"],
                "{what}: read at the first page's revision"
            );
        }
    }
    let watched = cp
        .raw(
            b,
            "GET",
            &format!("{API}/plans?watch=true&timeoutSeconds=1&fieldSelector=spec.install%3Dglobex"),
            &[],
            "",
        )
        .await;
    assert!(
        watched.text.contains("plan-b") && !watched.text.contains("plan-a"),
        "{}",
        watched.text
    );

    // Its own plan's status, not its spec.
    let patched = cp
        .raw(
            b,
            "PATCH",
            &format!("{API}/plans/plan-b/status"),
            &MERGE,
            r#"{"status":{"message":"claimed by the runner"}}"#,
        )
        .await;
    expect(&patched, 200, "B patches its plan's status");
    assert_eq!(patched.json["status"]["message"], "claimed by the runner");
    expect(
        &cp.raw(
            b,
            "PATCH",
            &format!("{API}/plans/plan-b"),
            &MERGE,
            r#"{"spec":{"reason":"x"}}"#,
        )
        .await,
        403,
        "B patches its plan's spec",
    );
    expect(
        &cp.raw(b, "DELETE", &format!("{API}/plans/plan-b"), &[], "")
            .await,
        403,
        "B deletes its plan",
    );

    // Its own reports and its own Runner; audit events are append-only.
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/auditevents"),
            &JSON,
            audit_event("globex", 1),
        )
        .await,
        201,
        "B creates its audit event",
    );
    expect(
        &cp.raw(b, "DELETE", &format!("{API}/auditevents/globex-1"), &[], "")
            .await,
        403,
        "B deletes its audit event",
    );
    expect(
        &cp.raw(
            b,
            "PATCH",
            &format!("{API}/auditevents/globex-1"),
            &MERGE,
            r#"{"spec":{"signature":"eA=="}}"#,
        )
        .await,
        403,
        "B edits its audit event",
    );
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/driftreports"),
            &JSON,
            drift_report("drift-b2", "globex"),
        )
        .await,
        201,
        "B creates its drift report",
    );
    let runner = json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Runner",
        "metadata": {"name": "globex"},
        "spec": {
            "install": "globex",
            "version": "0.1.0",
            "publicKey": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        },
    });
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/runners"),
            &JSON,
            runner.to_string(),
        )
        .await,
        201,
        "B creates its Runner",
    );
    let heartbeat = r#"{"status":{"lastHeartbeat":"2025-01-15T10:00:00Z"}}"#;
    expect(
        &cp.raw(
            b,
            "PATCH",
            &format!("{API}/runners/globex/status"),
            &MERGE,
            heartbeat,
        )
        .await,
        200,
        "B heartbeats",
    );
    let mut other = runner.clone();
    other["metadata"]["name"] = json!("acme");
    expect(
        &cp.raw(
            b,
            "POST",
            &format!("{API}/runners"),
            &JSON,
            other.to_string(),
        )
        .await,
        403,
        "B creates A's Runner",
    );

    // Its own install's InstallStack: read it and report on it in its status, nothing
    // more.
    for install in ["acme", "globex"] {
        let stack = json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "InstallStack",
            "metadata": {"name": install, "labels": {"outpost.dev/install": install}},
            "spec": {"install": install, "version": "v1", "template": {"Resources": {}}},
        });
        expect(
            &cp.raw(
                admin,
                "POST",
                &format!("{API}/installstacks"),
                &JSON,
                stack.to_string(),
            )
            .await,
            201,
            "admin creates an install stack",
        );
    }
    let stacks = format!("{API}/installstacks");
    let report = r#"{"status":{"enabledRoles":["globex-provision"]}}"#;
    for (method, path, body, status, what) in [
        (
            "GET",
            format!("{stacks}/globex"),
            "",
            200,
            "B gets its InstallStack",
        ),
        (
            "PATCH",
            format!("{stacks}/globex/status"),
            report,
            200,
            "B reports on its InstallStack",
        ),
        (
            "PATCH",
            format!("{stacks}/acme/status"),
            report,
            403,
            "B reports on A's InstallStack",
        ),
        (
            "GET",
            format!("{stacks}/acme"),
            "",
            403,
            "B gets A's InstallStack",
        ),
        (
            "PATCH",
            format!("{stacks}/globex"),
            r#"{"spec":{"version":"v2"}}"#,
            403,
            "B patches its InstallStack's spec",
        ),
        (
            "DELETE",
            format!("{stacks}/globex"),
            "",
            403,
            "B deletes its InstallStack",
        ),
        ("GET", stacks.clone(), "", 403, "B lists InstallStacks"),
    ] {
        let headers: &[(&str, &str)] = if method == "PATCH" { &MERGE } else { &[] };
        expect(&cp.raw(b, method, &path, headers, body).await, status, what);
    }
    let reported = cp
        .raw(admin, "GET", &format!("{stacks}/globex"), &[], "")
        .await;
    assert_eq!(
        reported.json["status"]["enabledRoles"],
        json!(["globex-provision"]),
        "{}",
        reported.text
    );

    // Token A still works for A, and is refused on B.
    let a = Some(token_a.as_str());
    expect(
        &cp.raw(a, "GET", &format!("{API}/plans/plan-a"), &[], "")
            .await,
        200,
        "A gets its plan",
    );
    expect(
        &cp.raw(a, "GET", &format!("{API}/plans/plan-b"), &[], "")
            .await,
        403,
        "A gets B's plan",
    );
}

/// A Plan's managed fields as (manager, operation, fields) triples, in order.
fn managers(plan: &Value) -> Vec<(Value, Value, Value)> {
    plan["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].clone(),
                e["operation"].clone(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

/// `PUT plans/NAME/status` as `token`: `plan` as read, its status message set, its
/// managed fields left out (as a runner decodes and sends them, `outpost_api::Lean`)
/// or replaced by `managed`.
async fn put_status(
    cp: &ControlPlane,
    token: &str,
    plan: &Value,
    managed: Option<Value>,
    message: &str,
) -> Reply {
    let mut body = plan.clone();
    let metadata = body["metadata"].as_object_mut().unwrap();
    metadata.remove("managedFields");
    if let Some(managed) = managed {
        metadata.insert("managedFields".into(), managed);
    }
    body["status"]["message"] = json!(message);
    let name = plan["metadata"]["name"].as_str().unwrap();
    cp.raw(
        Some(token),
        "PUT",
        &format!("{API}/plans/{name}/status"),
        &JSON,
        body.to_string(),
    )
    .await
}

/// The runner sends its status writes without managed fields (it decodes none): they
/// are kept, and record the write. What a status write sends as managed fields is not
/// taken, from anyone (kube's rule for subresources): a runner can neither forge an
/// entry (say, that the vendor set a field) nor clear the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_neither_drop_nor_take_managed_fields() {
    let cp = ControlPlane::start(Backend::Embedded).await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let admin = Some(cp.admin_token.as_str());
    for (name, install) in [("plan-a", "acme"), ("plan-b", "globex")] {
        let created = cp
            .raw(
                admin,
                "POST",
                &format!("{API}/plans"),
                &JSON,
                plan_body(name, install),
            )
            .await;
        expect(&created, 201, "admin creates a plan");
    }
    let token_a = cp.mint_runner_token("default/acme");
    let token_b = cp.mint_runner_token("default/globex");
    let read = async || {
        cp.raw(admin, "GET", &format!("{API}/plans/plan-a"), &[], "")
            .await
            .json
    };
    let created = read().await;
    let owned_by_creator = managers(&created);
    assert!(
        owned_by_creator
            .iter()
            .any(|(_, _, fields)| fields.pointer("/f:spec/f:install").is_some()),
        "{created}"
    );

    // Refused writers store nothing.
    let forged = json!([{"manager": "vendor-admin", "operation": "Update",
                         "apiVersion": "outpost.dev/v1alpha1", "fieldsType": "FieldsV1",
                         "fieldsV1": {"f:status": {"f:message": {}}}}]);
    for (token, what) in [
        (cp.viewer_token.as_str(), "a viewer"),
        (cp.approver_token.as_str(), "an approver"),
        (token_b.as_str(), "another install's runner"),
    ] {
        for managed in [None, Some(forged.clone())] {
            let reply = put_status(&cp, token, &created, managed, "x").await;
            expect(&reply, 403, what);
        }
        assert_eq!(read().await, created, "{what}: nothing stored");
    }

    // This install's runner, sending none: the creator's entries stay, the message is
    // recorded as written.
    let reply = put_status(&cp, &token_a, &created, None, "claimed").await;
    expect(&reply, 200, "the runner writes its plan's status");
    let written = read().await;
    assert_eq!(written["status"]["message"], "claimed");
    let after = managers(&written);
    for (manager, operation, fields) in &owned_by_creator {
        assert!(
            after.iter().any(|(m, o, f)| m == manager
                && o == operation
                && f.get("f:spec") == fields.get("f:spec")),
            "the creator's {manager} entry is kept: {written}"
        );
    }
    assert!(
        after
            .iter()
            .any(|(_, _, fields)| fields.pointer("/f:status/f:message").is_some()),
        "{written}"
    );

    // Forged or cleared managed fields: the write goes through, the record is the
    // server's.
    for (managed, message) in [(forged.clone(), "forged"), (json!([{}]), "cleared")] {
        let reply = put_status(&cp, &token_a, &read().await, Some(managed), message).await;
        expect(&reply, 200, message);
        let stored = read().await;
        assert_eq!(stored["status"]["message"], message);
        assert_eq!(managers(&stored), after, "{message}: {stored}");
    }
    // An admin's status write is no different.
    let reply = put_status(
        &cp,
        &cp.admin_token,
        &read().await,
        Some(json!([{}])),
        "admin",
    )
    .await;
    expect(&reply, 200, "admin");
    let stored = read().await;
    assert_eq!(stored["status"]["message"], "admin");
    assert!(
        managers(&stored)
            .iter()
            .any(|(_, _, fields)| fields.pointer("/f:spec/f:install").is_some()),
        "{stored}"
    );
}
