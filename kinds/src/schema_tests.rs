//! Outpost's own CRD schemas as the core checks them: the generic core's unit tests run
//! over test kinds of their own (`apiserver/src/testing/crds.yaml`), so these check that
//! the schemas `outpost-api` generates are what the core expects of a real CRD.

use outpost_apiserver::schema::{unknown_fields, validate};
use serde_json::{Value, json};

fn app_schema() -> Value {
    let registry = crate::registry();
    let app = registry
        .get("outpost.dev", "v1alpha1", "apps")
        .expect("Outpost serves apps");
    app.schema.clone().expect("apps have a schema")
}

#[test]
fn the_app_schema_knows_its_own_fields() {
    let object = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "App", "metadata": {"name": "a"},
        "spec": {"inputs": [{"name": "d", "type": "json", "default": {"x": [1]}, "typo": 1}],
                 "sandbox": {"source": "s", "type": "cloudformation", "variables": {"a": "b"}}}
    });
    assert_eq!(
        unknown_fields(&app_schema(), &object),
        ["spec.inputs[0].typo"]
    );
}

#[test]
fn the_app_schema_accepts_a_valid_app_and_rejects_a_broken_one() {
    let schema = app_schema();
    let valid = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "App", "metadata": {"name": "a"},
        "spec": {"inputs": [{"name": "domain", "type": "string", "default": {"any": 1}}],
                 "drift": {"intervalSeconds": 60, "remediation": null}}
    });
    assert!(
        validate(&schema, &valid).is_empty(),
        "{:?}",
        validate(&schema, &valid)
    );
    let broken = json!({"spec": {"inputs": [{"name": "domain", "type": "text"}],
                                 "drift": {"intervalSeconds": -1}}});
    let fields: Vec<String> = validate(&schema, &broken)
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(
        fields,
        ["spec.drift.intervalSeconds", "spec.inputs[0].type"]
    );
}
