//! Generation, status, optimistic concurrency and every patch type.

use super::*;

on_both_backends!(
    generation_status_and_optimistic_concurrency,
    patch_types,
    malformed_managed_fields_are_never_stored
);

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
    let conflict = apply_as(&cp, &format!("{path}?fieldManager=tool"), apply).await;
    assert_eq!(
        conflict.status, 409,
        "a field another manager set conflicts: {}",
        conflict.text
    );
    let forced = apply_as(&cp, &format!("{path}?fieldManager=tool&force=true"), apply).await;
    assert_eq!(forced.status, 200, "{}", forced.text);
    assert_eq!(forced.json["spec"]["cloud"]["region"], "us-east-1");
    assert!(
        managers(&forced.json).contains(&("tool".to_owned(), "Apply".to_owned())),
        "{}",
        forced.text
    );
    // Apply creates when absent ...
    let fresh = format!("{INSTALLS}/fresh");
    let fresh_apply = apply.replace("name: p", "name: fresh");
    let created = apply_as(&cp, &format!("{fresh}?fieldManager=tool"), &fresh_apply).await;
    assert_eq!(created.status, 201, "{}", created.text);
    // ... and records the applier as kube does: one `Apply` entry, not an `Update` that
    // would own every field and make the applier's next apply conflict with itself.
    let applied = [("tool".to_owned(), "Apply".to_owned())];
    assert_eq!(managers(&created.json), applied, "{}", created.text);
    let stored = cp.raw(Some(&cp.admin_token), "GET", &fresh, &[], "").await;
    assert_eq!(managers(&stored.json), applied, "{}", stored.text);
    // Its next apply changes a field it owns without force, and drops one it no longer
    // applies.
    let labelled = fresh_apply.replace("name: fresh\n", "name: fresh\n  labels:\n    tier: gold\n");
    let reply = apply_as(&cp, &format!("{fresh}?fieldManager=tool"), &labelled).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["metadata"]["labels"]["tier"], "gold");
    let moved = fresh_apply.replace("us-east-1", "eu-north-1");
    let reply = apply_as(&cp, &format!("{fresh}?fieldManager=tool"), &moved).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["spec"]["cloud"]["region"], "eu-north-1");
    assert!(
        reply.json["metadata"]["labels"].get("tier").is_none(),
        "a label the applier dropped is removed: {}",
        reply.text
    );
    assert_eq!(managers(&reply.json), applied, "{}", reply.text);
    // Another manager still conflicts with it.
    let other = apply_as(&cp, &format!("{fresh}?fieldManager=other"), &fresh_apply).await;
    assert_eq!(other.status, 409, "{}", other.text);
    assert!(
        other.text.contains(r#"with \"tool\": .spec.cloud.region"#),
        "{}",
        other.text
    );
    // A dry-run apply that would create answers the same record and stores nothing.
    let dry = apply_as(
        &cp,
        &format!("{INSTALLS}/dry?fieldManager=tool&dryRun=All"),
        &apply.replace("name: p", "name: dry"),
    )
    .await;
    assert_eq!(dry.status, 201, "{}", dry.text);
    assert_eq!(managers(&dry.json), applied, "{}", dry.text);
    let absent = cp
        .raw(
            Some(&cp.admin_token),
            "GET",
            &format!("{INSTALLS}/dry"),
            &[],
            "",
        )
        .await;
    assert_eq!(absent.status, 404, "{}", absent.text);
}

/// A server-side apply of `body` (YAML) to `path` (its query names the manager), as admin.
async fn apply_as(cp: &ControlPlane, path: &str, body: &str) -> outpost_testing::Reply {
    cp.patch(path, "application/apply-patch+yaml", body.to_owned())
        .await
}

/// `(manager, operation)` of each of `object`'s `managedFields` entries, each checked to
/// be a field set with a timestamp.
fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("managedFields is a list: {object}"))
        .iter()
        .map(|m| {
            assert!(m["fieldsV1"].is_object(), "{m}");
            assert!(m["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{m}");
            let s = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
            (s("manager"), s("operation"))
        })
        .collect()
}

/// `managedFields` a request sends are checked as the typed decode always checked them,
/// though it now passes over them (`outpost_api::Lean`): ill-typed entries are refused with
/// nothing stored (a `time` that is not a timestamp, stored, would break every client
/// decoding the object), and well-typed entries that are not `FieldsV1` field sets are not
/// the record: the stored one is the server's own, never what was sent.
async fn malformed_managed_fields_are_never_stored(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    let creator = [("creator".to_owned(), "Update".to_owned())];
    let create_as_creator = async |object: &Value| {
        cp.raw(
            admin,
            "POST",
            &format!("{INSTALLS}?fieldManager=creator"),
            &[JSON],
            object.to_string(),
        )
        .await
    };
    for (i, garbage) in [
        json!(5),
        json!("entries"),
        json!([{"manager": 5, "operation": "Update"}]),
        json!([{"manager": "forged", "operation": "Update", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {}}, "time": "yesterday"}]),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("bad{i}");
        let mut object = install(&name);
        object["metadata"]["managedFields"] = garbage.clone();
        let reply = create_as_creator(&object).await;
        assert_eq!(reply.status, 422, "{garbage}: {}", reply.text);
        let absent = cp
            .raw(admin, "GET", &format!("{INSTALLS}/{name}"), &[], "")
            .await;
        assert_eq!(absent.status, 404, "{garbage}: {}", absent.text);
        // Nor over an existing object.
        let path = format!("{INSTALLS}/kept{i}");
        let mut object = install(&format!("kept{i}"));
        let reply = create_as_creator(&object).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        let before = cp.raw(admin, "GET", &path, &[], "").await;
        object = before.json.clone();
        object["metadata"]["managedFields"] = garbage.clone();
        object["spec"]["approvalMode"] = json!("approve-all");
        let reply = cp
            .raw(admin, "PUT", &path, &[JSON], object.to_string())
            .await;
        assert_eq!(reply.status, 422, "{garbage}: {}", reply.text);
        let after = cp.raw(admin, "GET", &path, &[], "").await;
        assert_eq!(after.json, before.json, "{garbage}: nothing stored");
        assert_eq!(managers(&after.json), creator);
    }
    // Well-typed, but no field set: taken, and not the record.
    let ignored = json!([{"manager": "forged", "operation": "Update", "fieldsV1": 1,
                          "time": "2026-01-01T00:00:00Z"}]);
    let mut object = install("ignored");
    object["metadata"]["managedFields"] = ignored.clone();
    let reply = create_as_creator(&object).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let stored = cp
        .raw(admin, "GET", &format!("{INSTALLS}/ignored"), &[], "")
        .await;
    assert_eq!(managers(&stored.json), creator, "{}", stored.text);
}
