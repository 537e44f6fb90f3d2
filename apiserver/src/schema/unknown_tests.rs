use serde_json::{Value, json};

use super::{prune, strict_decoding_message, unknown_fields};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "name": {"type": "string"},
                "inputs": {"type": "array", "items": {
                    "type": "object", "properties": {"name": {"type": "string"}}
                }},
                "variables": {"type": "object", "additionalProperties": {
                    "type": "object", "properties": {"value": {"type": "string"}}
                }},
                "labels": {"type": "object", "additionalProperties": true},
                "document": {"x-kubernetes-preserve-unknown-fields": true},
                "outputs": {"type": "object",
                            "additionalProperties": {"x-kubernetes-preserve-unknown-fields": true}},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"known": {"type": "object", "properties": {}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "properties": {"spec": {"type": "object"}}},
                "choice": {"type": "object", "oneOf": [
                    {"properties": {"a": {"type": "string"}}},
                    {"properties": {"b": {"type": "string"}}}
                ]},
                "empty": {}
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }
    })
}

#[test]
fn a_known_object_has_no_unknown_fields_and_survives_pruning() {
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"}, "annotations": {},
                     "finalizers": ["f"], "ownerReferences": [{"any": 1}], "uid": "u",
                     "resourceVersion": "1", "generation": 1, "creationTimestamp": null,
                     "managedFields": [], "generateName": "a-", "selfLink": "",
                     "deletionTimestamp": null, "deletionGracePeriodSeconds": 0},
        "spec": {"name": "x", "inputs": [{"name": "i"}], "variables": {"k": {"value": "v"}},
                 "labels": {"free": {"form": 1}}, "document": {"Version": [1, {"a": 2}]},
                 "open": {"anything": 1}, "choice": {"a": "x", "b": "y"},
                 "outputs": {"steps": [{"name": "s", "exitCode": 0}], "n": 1},
                 "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                              "spec": {}}},
        "status": {"phase": "Ready"}
    });
    assert_eq!(unknown_fields(&schema(), &object), Vec::<String>::new());
    let mut pruned = object.clone();
    prune(&schema(), &mut pruned);
    assert_eq!(pruned, object);
}

#[test]
fn unknown_fields_are_found_at_every_depth() {
    let object = json!({
        "kind": "Widget", "extra": true,
        "metadata": {"name": "a", "bogus": 1},
        "spec": {"foo": 1, "inputs": [{"name": "a"}, {"name": "b", "bar": 2}],
                 "variables": {"domain": {"value": "v", "secret": true}},
                 "open": {"known": {"nested": 1}},
                 "template": {"metadata": {"name": "p", "zzz": 1}, "other": 1},
                 "empty": {"gone": 1}},
        "status": {"phase": "x", "reason": "y"}
    });
    assert_eq!(
        unknown_fields(&schema(), &object),
        [
            "extra",
            "metadata.bogus",
            "spec.empty.gone",
            "spec.foo",
            "spec.inputs[1].bar",
            "spec.open.known.nested",
            "spec.template.metadata.zzz",
            "spec.template.other",
            "spec.variables.domain.secret",
            "status.reason",
        ]
    );
}

#[test]
fn prune_drops_exactly_the_unknown_fields() {
    let mut object = json!({
        "apiVersion": "v", "kind": "Widget",
        "metadata": {"name": "a", "bogus": 1},
        "spec": {"name": "n", "foo": 1, "inputs": [{"name": "b", "bar": 2}],
                 "document": {"keep": {"all": 1}}},
        "status": {"reason": "y"}
    });
    prune(&schema(), &mut object);
    assert_eq!(
        object,
        json!({
            "apiVersion": "v", "kind": "Widget",
            "metadata": {"name": "a"},
            "spec": {"name": "n", "inputs": [{"name": "b"}], "document": {"keep": {"all": 1}}},
            "status": {}
        })
    );
    assert_eq!(unknown_fields(&schema(), &object), Vec::<String>::new());
}

#[test]
fn an_array_without_items_schema_keeps_scalars_and_drops_object_fields() {
    let schema = json!({"type": "object", "properties": {"list": {"type": "array"}}});
    let mut object = json!({"list": [1, "a", {"x": 1}]});
    assert_eq!(unknown_fields(&schema, &object), ["list[2].x"]);
    prune(&schema, &mut object);
    assert_eq!(object, json!({"list": [1, "a", {}]}));
}

#[test]
fn strict_message_matches_kube_apiserver() {
    assert_eq!(
        strict_decoding_message(&["spec.foo".into(), "spec.bar".into()]),
        r#"strict decoding error: unknown field "spec.foo", unknown field "spec.bar""#
    );
    assert_eq!(strict_decoding_message(&[]), "");
}

#[test]
fn real_crd_schemas_know_their_own_fields() {
    let schema = &crate::testing::widget_schema();
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"},
        "spec": {"tenant": "t",
                 "settings": [{"name": "d", "type": "json", "default": {"x": [1]}, "typo": 1}],
                 "source": {"url": "s", "type": "git", "variables": {"a": "b"}}}
    });
    assert_eq!(unknown_fields(schema, &object), ["spec.settings[0].typo"]);
}

#[test]
fn arrays_of_objects_in_preserved_values_are_kept_whole() {
    // A `BTreeMap<String, serde_json::Value>` (a widget's outputs): its values' schema
    // preserves unknown fields and declares no `items`.
    let schema = json!({
        "type": "object",
        "properties": {"status": {"type": "object", "properties": {
            "outputs": {"type": "object", "additionalProperties": {
                "x-kubernetes-preserve-unknown-fields": true
            }}
        }}}
    });
    let object = json!({"status": {"outputs": {
        "steps": [{"name": "migrate", "exitCode": 0, "nested": [{"a": [1, {"b": 2}]}]}],
        "refs": [["x", {"kind": "ConfigMap"}]],
        "plain": {"k": [{"v": 1}]}
    }}});
    assert_eq!(unknown_fields(&schema, &object), Vec::<String>::new());
    let mut pruned = object.clone();
    prune(&schema, &mut pruned);
    assert_eq!(pruned, object);
}

#[test]
fn finding_unknown_fields_reports_what_pruning_drops_in_the_same_order() {
    // `unknown_fields` walks without copying; `prune` drops as it goes. Both must see the
    // same fields in the same order: random objects that mostly follow `schema()` or a
    // real CRD's schema (known fields, maps, lists, embedded and preserved values) and
    // stray from it now and then.
    let schemas = [schema(), crate::testing::widget_schema()];
    let names = [
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "labels",
        "foo",
        "typo",
        "uid",
    ];
    // A fixed xorshift sequence: the same objects on every run.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    fn random(
        next: &mut dyn FnMut(usize) -> usize,
        schema: Option<&Value>,
        names: &[&str],
        depth: usize,
    ) -> Value {
        let declared = |k: &str| schema.and_then(|s| s.get(k));
        let shape = match declared("type").and_then(Value::as_str) {
            _ if depth == 0 => next(3),
            Some("object") if next(5) > 0 => 4,
            Some("array") if next(5) > 0 => 3,
            _ => next(5),
        };
        match shape {
            0 => Value::from(next(10)),
            1 => Value::from(names[next(names.len())]),
            2 => Value::Null,
            3 => Value::Array(
                (0..next(4))
                    .map(|_| random(next, declared("items"), names, depth - 1))
                    .collect(),
            ),
            _ => {
                let properties: Vec<(&String, &Value)> = declared("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.iter().collect())
                    .unwrap_or_default();
                let additional = declared("additionalProperties").filter(|a| a.is_object());
                Value::Object(
                    (0..next(5))
                        .map(|_| match next(3) {
                            0 if !properties.is_empty() => {
                                let (name, sub) = properties[next(properties.len())];
                                (name.clone(), random(next, Some(sub), names, depth - 1))
                            }
                            1 if additional.is_some() => {
                                let name = format!("k{}", next(3));
                                (name, random(next, additional, names, depth - 1))
                            }
                            _ => {
                                let name = names[next(names.len())].to_owned();
                                (name, random(next, None, names, depth - 1))
                            }
                        })
                        .collect(),
                )
            }
        }
    }
    let mut reported = 0;
    for case in 0..4_000 {
        let schema = &schemas[case % schemas.len()];
        let object = random(&mut next, Some(schema), &names, 7);
        let found = unknown_fields(schema, &object);
        let mut dropped = Vec::new();
        super::prune_resource(schema, &mut object.clone(), "", &mut dropped);
        assert_eq!(found, dropped, "{object}");
        reported += usize::from(!found.is_empty());
    }
    // The cases are not all trivially empty.
    assert!(reported > 1_000, "only {reported} cases had unknown fields");
}
