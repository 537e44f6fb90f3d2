use super::*;
use crate::{Install, Plan};
use serde_json::{Value, json};

/// An object's members, in order.
type Members = Vec<(&'static str, Value)>;

/// A Plan as a fleet run stores it, managed fields included: its members other than
/// `metadata`, and its metadata's.
fn plan_members() -> (Members, Members) {
    let metadata = vec![
        ("creationTimestamp", json!("2026-11-27T14:10:33Z")),
        ("generation", json!(1)),
        ("labels", json!({"outpost.dev/install": "i00000"})),
        (
            "managedFields",
            json!([{
                "apiVersion": "outpost.dev/v1alpha1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:outpost.dev/install": {}}},
                             "f:spec": {".": {}, "f:install": {}, "f:operation": {}},
                             "f:status": {".": {}, "f:phase": {}, "f:outputs": {".": {}, "f:ok": {}}}},
                "manager": "outpost-controllers", "operation": "Update",
                "time": "2026-11-27T14:10:33Z"
            }]),
        ),
        ("name", json!("i00000-deploy-c0-d5060d46eb")),
        ("namespace", json!("bench")),
        (
            "ownerReferences",
            json!([{"apiVersion": "outpost.dev/v1alpha1", "controller": true, "kind": "Install",
                    "name": "i00000", "uid": "fd07abb4-fd5e-4aae-9b8c-4d70bd869fc5"}]),
        ),
        ("resourceVersion", json!("50")),
        ("uid", json!("67e074f8-a2cc-4dc7-b969-06b65fc4de64")),
    ];
    let object = vec![
        ("apiVersion", json!("outpost.dev/v1alpha1")),
        ("kind", json!("Plan")),
        (
            "spec",
            json!({
                "contentHash": "sha256:addcebd75cac705e55f9e23062b9fb0fed5d134c26ffc242733ec6944444567f",
                "desiredState": {"app": "fleet", "type": "kubernetes_manifest",
                                 "manifest": {"content": "kind: ConfigMap\n", "namespace": "app"}},
                "entity": {"kind": "component", "name": "c0"},
                "install": "i00000", "operation": "deploy", "reason": "converge"
            }),
        ),
        (
            "status",
            json!({
                "phase": "Succeeded", "claimedBy": "bench-runner-i00000",
                // A map of the user's own: a `managedFields` key in it is data.
                "outputs": {"ok": true, "managedFields": [{"manager": "kept"}],
                            "metadata": {"managedFields": "kept too"}}
            }),
        ),
    ];
    (object, metadata)
}

/// JSON text of an object with these members in this order.
fn text(members: &[(&str, String)]) -> String {
    let members: Vec<String> = members
        .iter()
        .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// The Plan's text with `metadata` at `at` among the object's members and the metadata's
/// members rotated by `rotate` (so `managedFields` is first, last or between).
fn plan_text(at: usize, rotate: usize) -> String {
    let (object, mut metadata) = plan_members();
    metadata.rotate_left(rotate);
    let metadata: Vec<(&str, String)> = metadata.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let mut members: Vec<(&str, String)> =
        object.iter().map(|(k, v)| (*k, v.to_string())).collect();
    members.insert(at, ("metadata", text(&metadata)));
    text(&members)
}

/// What a full decode gives with the managed fields taken out afterwards.
fn trimmed<K: kube::Resource + serde::de::DeserializeOwned>(json: &str) -> K {
    let mut object: K = serde_json::from_str(json).expect("decodes");
    object.meta_mut().managed_fields = None;
    object
}

#[test]
fn a_lean_decode_is_the_full_decode_without_managed_fields_wherever_they_stand() {
    let members = plan_members().0.len() + 1;
    let metadata = plan_members().1.len();
    for at in 0..members {
        for rotate in 0..metadata {
            let json = plan_text(at, rotate);
            let full: Plan = serde_json::from_str(&json).expect("decodes");
            assert!(
                full.metadata.managed_fields.is_some(),
                "the fixture has them"
            );
            let lean: Lean<Plan> = serde_json::from_str(&json).expect("decodes lean");
            assert_eq!(
                lean.0,
                trimmed::<Plan>(&json),
                "metadata at {at}, rotated {rotate}"
            );
            // Data that only looks like metadata is kept.
            let outputs = &lean.0.status.as_ref().expect("status").outputs;
            assert_eq!(outputs["managedFields"], json!([{"manager": "kept"}]));
            assert_eq!(outputs["metadata"], json!({"managedFields": "kept too"}));
        }
    }
}

#[test]
fn escaped_keys_are_read_as_what_they_spell() {
    let json = plan_text(2, 0)
        .replacen("\"metadata\"", "\"meta\\u0064ata\"", 1)
        .replacen("\"managedFields\"", "\"managed\\u0046ields\"", 1);
    assert!(json.contains("managed\\u0046ields") && json.contains("meta\\u0064ata"));
    let lean: Lean<Plan> = serde_json::from_str(&json).expect("decodes lean");
    assert_eq!(lean.0, trimmed::<Plan>(&json));
    assert_eq!(
        lean.0.metadata.name.as_deref(),
        Some("i00000-deploy-c0-d5060d46eb")
    );
}

#[test]
fn lists_and_watch_events_decode_lean_items() {
    let plan = plan_text(2, 3);
    let list = format!(
        r#"{{"apiVersion":"outpost.dev/v1alpha1","kind":"PlanList","metadata":{{"resourceVersion":"51"}},"items":[{plan},{plan}]}}"#
    );
    let lean: kube::core::ObjectList<Lean<Plan>> = serde_json::from_str(&list).expect("list");
    assert_eq!(lean.items.len(), 2);
    assert!(lean.items.iter().all(|p| p.0 == trimmed::<Plan>(&plan)));

    let event = format!(r#"{{"type":"MODIFIED","object":{plan}}}"#);
    match serde_json::from_str::<kube::core::WatchEvent<Lean<Plan>>>(&event).expect("event") {
        kube::core::WatchEvent::Modified(lean) => assert_eq!(lean.0, trimmed::<Plan>(&plan)),
        other => panic!("a modification, got {other:?}"),
    }
}

#[test]
fn bad_input_fails_as_the_full_decode_fails() {
    let cases = [
        plan_text(2, 0).replace(r#""name":"i00000-deploy-c0-d5060d46eb""#, r#""name":7"#),
        plan_text(2, 0).replace(r#""phase":"Succeeded""#, r#""phase":"Sideways""#),
        plan_text(2, 0).replace(r#""generation":1"#, r#""generation":"one""#),
        plan_text(2, 0).replace(r#""manager":"outpost-controllers""#, r#""manager":"#),
        r#"{"apiVersion":"outpost.dev/v1alpha1","kind":"Plan","metadata":[]}"#.to_owned(),
        "[]".to_owned(),
        "{".to_owned(),
    ];
    for json in cases {
        let full = serde_json::from_str::<Plan>(&json).expect_err("bad input");
        let lean = serde_json::from_str::<Lean<Plan>>(&json).expect_err("bad input");
        assert_eq!(lean.to_string(), full.to_string(), "{json}");
    }
}

#[test]
fn a_lean_object_encodes_as_the_object() {
    let json = plan_text(2, 0);
    let lean: Lean<Plan> = serde_json::from_str(&json).expect("decodes lean");
    assert_eq!(
        serde_json::to_value(&lean).expect("encodes"),
        serde_json::to_value(&lean.0).expect("encodes")
    );
    assert!(
        serde_json::to_value(&lean).expect("encodes")["metadata"]
            .get("managedFields")
            .is_none(),
        "a PUT of it sends none, so the server keeps the stored ones"
    );
}

#[test]
fn other_kinds_decode_lean_too() {
    let json = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": "acme", "namespace": "vendor",
                     "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"app": "shopfront", "inputs": {"managedFields": "an input value"},
                 "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"}}
    })
    .to_string();
    let lean: Lean<Install> = serde_json::from_str(&json).expect("decodes lean");
    assert_eq!(lean.0, trimmed::<Install>(&json));
    assert_eq!(lean.0.spec.inputs["managedFields"], json!("an input value"));
    assert_eq!(
        <Lean<Install> as kube::Resource>::plural(&()),
        <Install as kube::Resource>::plural(&())
    );
}
