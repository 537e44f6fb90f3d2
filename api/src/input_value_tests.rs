use super::*;
use crate::validation::{FieldErrorKind, Validate};
use crate::{App, AppSpec};
use serde_json::json;

fn app() -> App {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "shop"},
        "spec": {
            "inputs": [
                {"name": "domain", "type": "string", "required": true,
                 "pattern": "^[a-z0-9.-]+$"},
                {"name": "node_count", "type": "number", "default": 3},
                {"name": "tier", "type": "string", "enum": ["small", "large"], "default": "small"},
                {"name": "license_key", "type": "string", "required": true, "sensitive": true},
                {"name": "labels", "type": "json"}
            ],
            "secrets": [{"name": "license"}]
        }
    }))
    .expect("the test App decodes")
}

fn inputs(value: Value) -> BTreeMap<String, Value> {
    serde_json::from_value(value).expect("inputs are a map")
}

fn valid() -> Value {
    json!({"domain": "shop.example", "license_key": {"secretRef": "license"}})
}

/// `(field, kind)` of each error.
fn causes(errors: &[FieldError]) -> Vec<(&str, FieldErrorKind)> {
    errors.iter().map(|e| (e.field.as_str(), e.kind)).collect()
}

fn check(value: Value) -> Vec<FieldError> {
    validate_install_inputs(&app().spec, &inputs(value), None)
}

#[test]
fn valid_inputs_pass() {
    assert_eq!(check(valid()), vec![]);
    let mut all = valid();
    all["node_count"] = json!(5);
    all["tier"] = json!("large");
    all["labels"] = json!({"team": ["a"]});
    assert_eq!(check(all), vec![]);
}

#[test]
fn wrong_types_are_named() {
    let mut value = valid();
    value["node_count"] = json!("five");
    value["domain"] = json!(42);
    let errors = check(value);
    assert_eq!(
        causes(&errors),
        [
            ("spec.inputs.domain", FieldErrorKind::Invalid),
            ("spec.inputs.node_count", FieldErrorKind::Invalid)
        ]
    );
    assert_eq!(
        errors[0].message,
        "Invalid value: \"42\": must be of type string"
    );
    assert_eq!(
        errors[1].message,
        "Invalid value: \"five\": must be of type number"
    );
}

#[test]
fn required_inputs_without_default_must_be_set() {
    let errors = check(json!({"license_key": {"secretRef": "license"}}));
    assert_eq!(
        causes(&errors),
        [("spec.inputs.domain", FieldErrorKind::Required)]
    );
}

#[test]
fn enum_and_pattern() {
    let mut value = valid();
    value["tier"] = json!("medium");
    value["domain"] = json!("Shop Example");
    let errors = check(value);
    assert_eq!(
        causes(&errors),
        [
            ("spec.inputs.domain", FieldErrorKind::Invalid),
            ("spec.inputs.tier", FieldErrorKind::NotSupported)
        ]
    );
    assert!(
        errors[0].message.contains("must match the pattern"),
        "{errors:?}"
    );
    assert_eq!(
        errors[1].message,
        "Unsupported value: \"medium\": supported values: \"small\", \"large\""
    );
}

#[test]
fn sensitive_inputs_are_refused_in_plain_form_and_never_echoed() {
    let mut value = valid();
    value["license_key"] = json!("ACME-0001-XYZ");
    let errors = check(value);
    assert_eq!(
        causes(&errors),
        [("spec.inputs.license_key", FieldErrorKind::Invalid)]
    );
    assert!(!errors[0].message.contains("ACME"), "{errors:?}");

    let mut value = valid();
    value["license_key"] = json!({"secretRef": "db_password"});
    assert_eq!(
        causes(&check(value)),
        [(
            "spec.inputs.license_key.secretRef",
            FieldErrorKind::NotSupported
        )]
    );
    // Anything besides the reference is plain form too.
    let mut value = valid();
    value["license_key"] = json!({"secretRef": "license", "value": "ACME"});
    assert_eq!(
        causes(&check(value)),
        [("spec.inputs.license_key", FieldErrorKind::Invalid)]
    );
}

#[test]
fn undeclared_inputs_are_refused() {
    let mut value = valid();
    value["domian"] = json!("typo.example");
    let errors = check(value);
    assert_eq!(
        causes(&errors),
        [("spec.inputs.domian", FieldErrorKind::NotSupported)]
    );
    assert!(errors[0].message.contains("\"domain\""), "{errors:?}");
}

#[test]
fn updates_ratchet_over_unchanged_inputs() {
    // Stored before the App made `tier` an enum and `region` required.
    let mut app = app();
    app.spec.inputs.push(
        serde_json::from_value(json!(
            {"name": "region", "type": "string", "required": true}
        ))
        .unwrap(),
    );
    let mut old = valid();
    old["tier"] = json!("medium");
    old["license_key"] = json!("plain");
    let old = inputs(old);
    // An update that leaves those inputs alone is accepted...
    let mut new = old.clone();
    new.insert("node_count".into(), json!(4));
    assert_eq!(validate_install_inputs(&app.spec, &new, Some(&old)), vec![]);
    // ...one that changes an invalid input is checked, and so is a create.
    new.insert("tier".into(), json!("huge"));
    assert_eq!(
        causes(&validate_install_inputs(&app.spec, &new, Some(&old))),
        [("spec.inputs.tier", FieldErrorKind::NotSupported)]
    );
    assert_eq!(
        causes(&validate_install_inputs(&app.spec, &old, None)),
        [
            ("spec.inputs.tier", FieldErrorKind::NotSupported),
            ("spec.inputs.license_key", FieldErrorKind::Invalid),
            ("spec.inputs.region", FieldErrorKind::Required)
        ]
    );
    // Removing a now-required input is a change too.
    let mut dropped = inputs(valid());
    dropped.remove("domain");
    assert_eq!(
        causes(&validate_install_inputs(
            &app.spec,
            &dropped,
            Some(&inputs(valid()))
        )),
        [("spec.inputs.domain", FieldErrorKind::Required)]
    );
}

#[test]
fn declarations_are_checked_on_the_app() {
    let mut app = app();
    assert_eq!(app.validate(), vec![]);
    let spec: &mut AppSpec = &mut app.spec;
    spec.inputs[0].pattern = Some("([a-z".into());
    spec.inputs[1].pattern = Some("^[0-9]+$".into());
    spec.inputs[2].enum_ = vec![json!("small"), json!(2)];
    spec.inputs[2].default = Some(json!("medium"));
    spec.inputs[3].default = Some(json!("ACME"));
    spec.inputs[4].sensitive = true;
    spec.inputs[4].type_ = InputType::Number;
    assert_eq!(
        causes(&app.validate()),
        [
            ("spec.inputs[0].pattern", FieldErrorKind::Invalid),
            ("spec.inputs[1].pattern", FieldErrorKind::Forbidden),
            ("spec.inputs[2].enum[1]", FieldErrorKind::Invalid),
            ("spec.inputs[2].default", FieldErrorKind::NotSupported),
            ("spec.inputs[3].default", FieldErrorKind::Forbidden),
            ("spec.inputs[4].type", FieldErrorKind::Invalid),
        ]
    );
}

#[test]
fn customer_inputs_are_not_set_by_the_install() {
    let mut app = app();
    app.spec.inputs.push(
        serde_json::from_value(json!(
            {"name": "db_name", "type": "string", "source": "customer", "required": true}
        ))
        .unwrap(),
    );
    // Unset is fine even though required: the install stack asks the customer for it.
    assert_eq!(
        validate_install_inputs(&app.spec, &inputs(valid()), None),
        vec![]
    );
    let mut value = valid();
    value["db_name"] = json!("shop");
    let errors = validate_install_inputs(&app.spec, &inputs(value), None);
    assert_eq!(
        causes(&errors),
        [("spec.inputs.db_name", FieldErrorKind::Forbidden)]
    );
    assert!(errors[0].message.contains("InputDbName"), "{errors:?}");
}

#[test]
fn a_sensitive_customer_input_is_a_secret_instead() {
    let mut app = app();
    app.spec.inputs[3].source = Some(crate::Party::Customer);
    let fields: Vec<_> = app.validate().into_iter().map(|e| e.field).collect();
    assert_eq!(fields, ["spec.inputs[3].sensitive"]);
}
