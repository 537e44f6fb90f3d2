use serde_json::json;

use super::*;

const T0: &str = "2024-01-01T00:00:00Z";
const T1: &str = "2024-01-02T00:00:00Z";

fn config(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    })
}

/// A stored object: what the server adds on create.
fn stored(mut object: Value) -> Value {
    object["metadata"]["uid"] = json!("u-1");
    object["metadata"]["resourceVersion"] = json!("7");
    object["metadata"]["creationTimestamp"] = json!(T0);
    object
}

fn entry<'a>(object: &'a Value, manager: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

fn without_managed(object: &Value) -> Value {
    let mut object = object.clone();
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    object
}

#[test]
fn apply_creates_with_an_apply_entry_in_kube_format() {
    let applied = config(json!({"updateMode": "manual", "steps": [{"name": "a", "image": "x"}]}));
    let created = server_side_apply(None, &applied, "kubectl", false, T0).unwrap();
    assert_eq!(without_managed(&created), applied);
    assert_eq!(
        created["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "example.com/v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {
                "f:updateMode": {},
                "f:steps": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {}}},
            }},
        }])
    );
}

#[test]
fn reapplying_without_a_field_removes_it() {
    let first = server_side_apply(
        None,
        &config(json!({"a": 1, "b": {"c": 2}, "keep": true})),
        "kubectl",
        false,
        T0,
    )
    .unwrap();
    let second = server_side_apply(
        Some(&stored(first)),
        &config(json!({"keep": true})),
        "kubectl",
        false,
        T1,
    )
    .unwrap();
    assert_eq!(second["spec"], json!({"keep": true}));
    assert_eq!(
        entry(&second, "kubectl").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:keep": {}}})
    );
    assert_eq!(second["metadata"]["uid"], "u-1", "server fields survive");
}

#[test]
fn dropping_a_whole_section_removes_it() {
    let first =
        server_side_apply(None, &config(json!({"a": {"b": 1}})), "kubectl", false, T0).unwrap();
    let mut applied = config(json!({}));
    applied.as_object_mut().unwrap().remove("spec");
    let second = server_side_apply(Some(&stored(first)), &applied, "kubectl", false, T1).unwrap();
    assert!(second.get("spec").is_none(), "{second}");
    assert!(second["metadata"].get("managedFields").is_none());
}

#[test]
fn fields_another_manager_owns_are_not_removed() {
    let first =
        server_side_apply(None, &config(json!({"a": 1, "b": 2})), "kubectl", false, T0).unwrap();
    let other = server_side_apply(
        Some(&stored(first)),
        &config(json!({"b": 2})),
        "helm",
        false,
        T0,
    )
    .unwrap();
    let second = server_side_apply(
        Some(&stored(other)),
        &config(json!({})),
        "kubectl",
        false,
        T1,
    )
    .unwrap();
    assert_eq!(second["spec"], json!({"b": 2}));
}

#[test]
fn changing_a_field_another_manager_updated_is_a_conflict_like_kube() {
    let mut created = stored(config(json!({"updateMode": "auto"})));
    record_update(
        None,
        &mut created,
        "kubectl-client-side-apply",
        "Update",
        T0,
    );
    let conflict = server_side_apply(
        Some(&created),
        &config(json!({"updateMode": "manual"})),
        "kubectl",
        false,
        T1,
    )
    .unwrap_err();
    assert_eq!(
        conflict.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using example.com/v1: .spec.updateMode"
    );
    let err = conflict.into_api_error(Subject::default());
    assert_eq!(err.code().as_u16(), 409);
    assert!(err.to_string().ends_with(
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using example.com/v1: .spec.updateMode"
    ));
}

#[test]
fn applying_the_same_value_shares_ownership() {
    let mut created = stored(config(json!({"updateMode": "auto"})));
    record_update(None, &mut created, "kubectl-create", "Update", T0);
    let applied = server_side_apply(
        Some(&created),
        &config(json!({"updateMode": "auto"})),
        "kubectl",
        false,
        T1,
    )
    .unwrap();
    for manager in ["kubectl", "kubectl-create"] {
        let fields = &entry(&applied, manager).unwrap()["fieldsV1"];
        assert!(
            fields["f:spec"].get("f:updateMode").is_some(),
            "{manager}: {fields}"
        );
    }
}

#[test]
fn force_takes_ownership_over() {
    let mut created = stored(config(json!({"updateMode": "auto", "other": 1})));
    record_update(None, &mut created, "kubectl-edit", "Update", T0);
    let applied = server_side_apply(
        Some(&created),
        &config(json!({"updateMode": "manual"})),
        "kubectl",
        true,
        T1,
    )
    .unwrap();
    assert_eq!(applied["spec"]["updateMode"], "manual");
    assert_eq!(
        entry(&applied, "kubectl-edit").unwrap()["fieldsV1"],
        json!({"f:spec": {".": {}, "f:other": {}}})
    );
    assert_eq!(
        entry(&applied, "kubectl").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:updateMode": {}}})
    );
    // Entries are ordered Apply before Update, as kube sorts them.
    assert_eq!(
        applied["metadata"]["managedFields"][0]["operation"],
        "Apply"
    );
}

#[test]
fn several_conflicts_are_listed_by_manager() {
    let mut created = stored(config(json!({"a": 1, "b": 1, "c": 1})));
    record_update(None, &mut created, "zeta", "Update", T0);
    let mut edited = created.clone();
    edited["spec"]["c"] = json!(2);
    record_update(Some(&created), &mut edited, "alpha", "Update", T1);
    let conflict = server_side_apply(
        Some(&edited),
        &config(json!({"a": 9, "b": 9, "c": 9})),
        "kubectl",
        false,
        T1,
    )
    .unwrap_err();
    assert_eq!(conflict.conflicts.len(), 3);
    assert_eq!(
        conflict.to_string(),
        "Apply failed with 3 conflicts: conflicts with \"alpha\" using example.com/v1:\n- .spec.c\nconflicts with \"zeta\" using example.com/v1:\n- .spec.a\n- .spec.b"
    );
}

#[test]
fn lists_of_named_objects_merge_by_name() {
    let mut created = stored(config(json!({"steps": [{"name": "a", "image": "x"}]})));
    record_update(None, &mut created, "kubectl-create", "Update", T0);
    let added = server_side_apply(
        Some(&created),
        &config(json!({"steps": [{"name": "b", "image": "y"}]})),
        "kubectl",
        false,
        T1,
    )
    .unwrap();
    assert_eq!(
        added["spec"]["steps"],
        json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}])
    );
    let dropped = server_side_apply(
        Some(&stored(added)),
        &config(json!({"steps": []})),
        "kubectl",
        false,
        T1,
    )
    .unwrap();
    assert_eq!(
        dropped["spec"]["steps"],
        json!([{"name": "a", "image": "x"}])
    );
}

#[test]
fn other_lists_are_replaced_atomically() {
    let first = server_side_apply(
        None,
        &config(json!({"args": ["a", "b"]})),
        "kubectl",
        false,
        T0,
    )
    .unwrap();
    let second = server_side_apply(
        Some(&stored(first)),
        &config(json!({"args": ["c"]})),
        "kubectl",
        false,
        T1,
    )
    .unwrap();
    assert_eq!(second["spec"]["args"], json!(["c"]));
}

#[test]
fn first_apply_to_an_untracked_object_conflicts_with_before_first_apply() {
    let untracked = stored(config(json!({"updateMode": "auto"})));
    let conflict = server_side_apply(
        Some(&untracked),
        &config(json!({"updateMode": "manual"})),
        "kubectl",
        false,
        T1,
    )
    .unwrap_err();
    assert_eq!(conflict.conflicts[0].manager.name, "before-first-apply");
}

#[test]
fn noop_reapply_keeps_the_time() {
    let first = server_side_apply(None, &config(json!({"a": 1})), "kubectl", false, T0).unwrap();
    let again =
        server_side_apply(Some(&first), &config(json!({"a": 1})), "kubectl", false, T1).unwrap();
    assert_eq!(again, first);
}

#[test]
fn record_update_on_create_owns_every_field() {
    let mut created = stored(config(json!({"a": 1})));
    created["metadata"]["labels"] = json!({"app": "web"});
    record_update(None, &mut created, "kubectl-create", "Update", T0);
    assert_eq!(
        created["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "example.com/v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {".": {}, "f:a": {}},
            },
        }])
    );
}

#[test]
fn record_update_moves_changed_fields_to_the_updater() {
    let applied =
        server_side_apply(None, &config(json!({"a": 1, "b": 1})), "kubectl", false, T0).unwrap();
    let live = stored(applied);
    let mut edited = live.clone();
    edited["spec"]["a"] = json!(2);
    record_update(Some(&live), &mut edited, "kubectl-edit", "Update", T1);
    assert_eq!(
        entry(&edited, "kubectl").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:b": {}}})
    );
    assert_eq!(
        entry(&edited, "kubectl-edit").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:a": {}}})
    );
    assert_eq!(entry(&edited, "kubectl-edit").unwrap()["time"], T1);
    // The applier's value changed under it: re-applying the old value conflicts.
    let conflict = server_side_apply(
        Some(&edited),
        &config(json!({"a": 1, "b": 1})),
        "kubectl",
        false,
        T1,
    )
    .unwrap_err();
    assert_eq!(conflict.conflicts[0].field.to_string(), ".spec.a");
}

#[test]
fn record_update_leaves_untracked_objects_untracked_and_honours_reset() {
    let live = stored(config(json!({"a": 1})));
    let mut edited = live.clone();
    edited["spec"]["a"] = json!(2);
    record_update(Some(&live), &mut edited, "kubectl-edit", "Update", T1);
    assert!(edited["metadata"].get("managedFields").is_none());

    let mut tracked = live.clone();
    record_update(None, &mut tracked, "kubectl-create", "Update", T0);
    let mut reset = tracked.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    record_update(Some(&tracked), &mut reset, "kubectl-edit", "Update", T1);
    assert!(reset["metadata"].get("managedFields").is_none());
}

#[test]
fn removed_fields_leave_every_owner() {
    let mut created = stored(config(json!({"a": 1, "b": 1})));
    record_update(None, &mut created, "kubectl-create", "Update", T0);
    let mut edited = created.clone();
    edited["spec"].as_object_mut().unwrap().remove("a");
    record_update(Some(&created), &mut edited, "kubectl-edit", "Update", T1);
    assert_eq!(
        entry(&edited, "kubectl-create").unwrap()["fieldsV1"],
        json!({"f:spec": {".": {}, "f:b": {}}})
    );
    assert!(
        entry(&edited, "kubectl-edit").is_none(),
        "removing owns nothing"
    );
}

#[test]
fn managed_fields_sent_that_do_not_decode_leave_the_live_ones() {
    let mut created = stored(config(json!({"a": 1, "b": 1})));
    record_update(None, &mut created, "kubectl-create", "Update", T0);
    let mut edited = created.clone();
    edited["spec"]["a"] = json!(2);
    edited["metadata"]["managedFields"] = json!([{"manager": "", "fieldsV1": "not a tree"}]);
    record_update(Some(&created), &mut edited, "kubectl-edit", "Update", T1);
    assert_eq!(
        entry(&edited, "kubectl-create").unwrap()["fieldsV1"],
        json!({"f:spec": {".": {}, "f:b": {}}})
    );
    assert_eq!(
        entry(&edited, "kubectl-edit").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:a": {}}})
    );
}
