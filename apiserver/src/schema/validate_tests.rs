use crate::status::FieldErrorKind;
use serde_json::{Value, json};

use super::validate;

/// `field: message` of every error, the way a user reads them.
fn messages(schema: &Value, object: &Value) -> Vec<String> {
    validate(schema, object)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn spec_schema(spec_properties: Value) -> Value {
    json!({
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": {"type": "object", "properties": spec_properties}}
    })
}

#[test]
fn type_mismatch_reports_the_found_type_like_kubernetes() {
    let schema = spec_schema(json!({"replicas": {"type": "integer"}}));
    let errors = validate(&schema, &json!({"spec": {"replicas": "abc"}}));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, FieldErrorKind::Invalid);
    assert_eq!(
        errors[0].to_string(),
        r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
    );
}

#[test]
fn integer_rejects_fractions_but_accepts_integral_floats() {
    let schema = spec_schema(json!({"replicas": {"type": "integer"}}));
    assert_eq!(
        messages(&schema, &json!({"spec": {"replicas": 1.5}})),
        [
            r#"spec.replicas: Invalid value: "number": spec.replicas in body must be of type integer: "number""#
        ]
    );
    assert!(validate(&schema, &json!({"spec": {"replicas": 2.0}})).is_empty());
    assert!(validate(&schema, &json!({"spec": {"replicas": -3}})).is_empty());
}

#[test]
fn every_scalar_type_is_checked() {
    let schema = spec_schema(json!({
        "s": {"type": "string"}, "n": {"type": "number"}, "b": {"type": "boolean"},
        "o": {"type": "object"}, "a": {"type": "array"}
    }));
    let good = json!({"spec": {"s": "x", "n": 1.5, "b": true, "o": {}, "a": []}});
    assert!(validate(&schema, &good).is_empty());
    let bad = json!({"spec": {"s": 1, "n": "1", "b": "true", "o": [], "a": {}}});
    let fields: Vec<String> = validate(&schema, &bad)
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(fields, ["spec.a", "spec.b", "spec.n", "spec.o", "spec.s"]);
}

#[test]
fn null_is_accepted_only_when_nullable() {
    let schema = spec_schema(json!({
        "a": {"type": "string", "nullable": true},
        "b": {"type": "string"},
        "c": {"x-kubernetes-preserve-unknown-fields": true}
    }));
    assert_eq!(
        messages(&schema, &json!({"spec": {"a": null, "b": null, "c": null}})),
        [r#"spec.b: Invalid value: "null": spec.b in body must be of type string: "null""#]
    );
}

#[test]
fn required_fields_are_reported_at_their_path() {
    let schema = spec_schema(json!({
        "inputs": {"type": "array", "items": {
            "type": "object", "required": ["name", "type"],
            "properties": {"name": {"type": "string"}, "type": {"type": "string"}}
        }}
    }));
    let object = json!({"spec": {"inputs": [{"name": "a", "type": "string"}, {"type": "string"}]}});
    let errors = validate(&schema, &object);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, FieldErrorKind::Required);
    assert_eq!(errors[0].to_string(), "spec.inputs[1].name: Required value");
    assert_eq!(
        messages(&schema, &json!({"metadata": {"name": "x"}})),
        ["spec: Required value"]
    );
}

#[test]
fn enum_lists_supported_values() {
    let schema = spec_schema(json!({"type": {"type": "string", "enum": ["a", "b"]}}));
    let errors = validate(&schema, &json!({"spec": {"type": "x"}}));
    assert_eq!(errors[0].kind, FieldErrorKind::NotSupported);
    assert_eq!(
        errors[0].to_string(),
        r#"spec.type: Unsupported value: "x": supported values: "a", "b""#
    );
    assert!(validate(&schema, &json!({"spec": {"type": "b"}})).is_empty());
}

#[test]
fn numeric_bounds() {
    let schema = spec_schema(json!({
        "count": {"type": "integer", "minimum": 1.0, "maximum": 10},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "multipleOf": 0.5}
    }));
    assert!(validate(&schema, &json!({"spec": {"count": 1, "ratio": 1.5}})).is_empty());
    assert!(validate(&schema, &json!({"spec": {"count": 10}})).is_empty());
    assert_eq!(
        messages(&schema, &json!({"spec": {"count": 0, "ratio": 0}})),
        [
            "spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1",
            "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
        ]
    );
    assert_eq!(
        messages(&schema, &json!({"spec": {"count": 11, "ratio": 0.7}})),
        [
            "spec.count: Invalid value: 11: spec.count in body should be less than or equal to 10",
            "spec.ratio: Invalid value: 0.7: spec.ratio in body should be a multiple of 0.5",
        ]
    );
}

#[test]
fn string_length_pattern_and_date_time() {
    let schema = spec_schema(json!({
        "name": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
        "at": {"type": "string", "format": "date-time"}
    }));
    assert!(
        validate(
            &schema,
            &json!({"spec": {"name": "abc", "at": "2024-01-02T03:04:05Z"}})
        )
        .is_empty()
    );
    assert_eq!(
        messages(&schema, &json!({"spec": {"name": "a", "at": "yesterday"}})),
        [
            r#"spec.at: Invalid value: "yesterday": spec.at in body must be of type date-time: "yesterday""#,
            r#"spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long"#,
        ]
    );
    let errors = validate(&schema, &json!({"spec": {"name": "ABCDE"}}));
    assert_eq!(errors[0].kind, FieldErrorKind::TooLong);
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spec.name: Too long: may not be more than 4 bytes",
            r#"spec.name: Invalid value: "ABCDE": spec.name in body should match '^[a-z]+$'"#,
        ]
    );
}

#[test]
fn array_bounds_uniqueness_and_items() {
    let schema = spec_schema(json!({
        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true,
                 "items": {"type": "string"}}
    }));
    assert!(validate(&schema, &json!({"spec": {"tags": ["a", "b"]}})).is_empty());
    assert_eq!(
        messages(&schema, &json!({"spec": {"tags": []}})),
        ["spec.tags: Invalid value: []: spec.tags in body should have at least 1 items"]
    );
    assert_eq!(
        messages(&schema, &json!({"spec": {"tags": ["a", "a", 3]}})),
        [
            "spec.tags: Too many: 3: must have at most 2 items",
            r#"spec.tags[1]: Duplicate value: "a""#,
            r#"spec.tags[2]: Invalid value: "integer": spec.tags[2] in body must be of type string: "integer""#,
        ]
    );
}

#[test]
fn map_values_are_checked_with_keys_in_brackets() {
    let schema = spec_schema(json!({
        "variables": {"type": "object", "additionalProperties": {"type": "string"}},
        "open": {"type": "object", "additionalProperties": true},
    }));
    assert_eq!(
        messages(
            &schema,
            &json!({"spec": {"variables": {"domain": 1, "ok": "x"}, "open": {"a": 1}}})
        ),
        [
            r#"spec.variables[domain]: Invalid value: "integer": spec.variables[domain] in body must be of type string: "integer""#
        ]
    );
}

#[test]
fn int_or_string_accepts_both_and_nothing_else() {
    let schema = spec_schema(json!({"port": {"x-kubernetes-int-or-string": true}}));
    assert!(validate(&schema, &json!({"spec": {"port": 80}})).is_empty());
    assert!(validate(&schema, &json!({"spec": {"port": "http"}})).is_empty());
    assert_eq!(
        messages(&schema, &json!({"spec": {"port": true}})),
        [
            r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer-or-string: "boolean""#
        ]
    );
}

#[test]
fn preserve_unknown_fields_accepts_anything() {
    let schema = spec_schema(json!({"default": {"x-kubernetes-preserve-unknown-fields": true}}));
    for value in [json!(1), json!("x"), json!({"a": [1]}), json!([true])] {
        assert!(validate(&schema, &json!({"spec": {"default": value}})).is_empty());
    }
}

#[test]
fn any_one_and_all_of() {
    let schema = spec_schema(json!({
        "any": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 3}]},
        "one": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 3}]}
    }));
    assert!(
        validate(
            &schema,
            &json!({"spec": {"any": 5, "one": {"a": 1}, "all": 2}})
        )
        .is_empty()
    );
    assert!(validate(&schema, &json!({"spec": {"any": "long"}})).is_empty());
    assert_eq!(
        messages(
            &schema,
            &json!({"spec": {"any": "ab", "one": {"a": 1, "b": 2}, "all": 4}})
        ),
        [
            "spec.all: Invalid value: 4: spec.all in body should be less than or equal to 3",
            r#"spec.any: Invalid value: "ab": spec.any in body must validate at least one schema (anyOf)"#,
            r#"spec.one: Invalid value: {"a":1,"b":2}: spec.one in body must validate one and only one schema (oneOf)"#,
        ]
    );
}

#[test]
fn root_skips_server_owned_fields_but_metadata_must_be_an_object() {
    let schema = json!({
        "type": "object",
        "required": ["metadata", "spec"],
        "properties": {"spec": {"type": "object"}, "metadata": {"type": "string"}}
    });
    let object = json!({"apiVersion": 1, "kind": [], "metadata": {"name": "x"}, "spec": {}});
    assert!(validate(&schema, &object).is_empty());
    assert_eq!(
        messages(&schema, &json!({"metadata": "x", "spec": {}})),
        [r#"metadata: Invalid value: "string": metadata in body must be of type object: "string""#]
    );
}

#[test]
fn a_real_crd_schema_accepts_a_valid_object_and_rejects_a_broken_one() {
    let schema = &crate::testing::widget_schema();
    let valid = json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"},
        "spec": {"tenant": "t", "port": "http",
                 "settings": [{"name": "domain", "type": "string", "default": {"any": 1}}],
                 "schedule": {"intervalSeconds": 60, "mode": null}}
    });
    assert_eq!(messages(schema, &valid), Vec::<String>::new());
    let broken = json!({"spec": {"tenant": "t",
                                 "settings": [{"name": "domain", "type": "text"}],
                                 "schedule": {"intervalSeconds": -1}}});
    let fields: Vec<String> = validate(schema, &broken)
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(
        fields,
        ["spec.schedule.intervalSeconds", "spec.settings[0].type"]
    );
}

#[test]
fn error_paths_name_fields_items_and_map_keys() {
    // Paths are written out only for what is reported: each kind of step, at the root
    // and below it.
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["name"], "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {
                "n": {"type": "integer"}}}},
            "map": {"type": "object", "additionalProperties": {"type": "object",
                "properties": {"v": {"type": "string"}}}},
            "set": {"type": "array", "uniqueItems": true},
            "code": {"type": "string", "pattern": "^[a-z]+$"},
        }}
    }});
    let object = json!({
        "metadata": [],
        "spec": {"list": [{"n": 1}, {"n": "x"}], "map": {"k.1": {"v": 2}},
                 "set": [1, 1], "code": "A"},
    });
    let fields: Vec<String> = validate(&schema, &object)
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(
        fields,
        [
            "metadata",
            "spec.name",
            "spec.code",
            "spec.list[1].n",
            "spec.map[k.1].v",
            "spec.set[1]",
        ]
    );
    // A pattern is compiled once and serves every later check.
    let code = |c: &str| validate(&schema, &json!({"spec": {"name": "n", "code": c}}));
    assert!(code("abc").is_empty());
    assert_eq!(code("ABC")[0].field, "spec.code");
}
