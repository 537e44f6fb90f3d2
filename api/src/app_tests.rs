use super::*;
use crate::FieldErrorKind;
use serde_json::json;

fn valid() -> App {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "shopfront"},
        "spec": {
            "inputGroups": [{"name": "networking"}],
            "inputs": [
                {"name": "domain", "type": "string", "group": "networking", "required": true},
                {"name": "replicas", "type": "number", "default": 2}
            ],
            "secrets": [{"name": "db_password", "generate": true}],
            "permissions": {"roles": [
                {"name": "{{ install.id }}-provision", "type": "provision"},
                {"name": "{{ install.id }}-maintenance", "type": "maintenance"},
                {"name": "{{ install.id }}-eks-upgrade-role", "type": "custom"}
            ]},
            "sandbox": {
                "type": "terraform_module",
                "source": "github.com/acme/sandbox",
                "operationRoles": {"provision": "{{ install.id }}-provision"}
            }
        }
    }))
    .expect("test App is well-formed")
}

fn errors(app: &App) -> Vec<(String, FieldErrorKind)> {
    app.validate()
        .into_iter()
        .map(|e| (e.field, e.kind))
        .collect()
}

#[test]
fn valid_app_has_no_errors() {
    assert_eq!(valid().validate(), vec![]);
}

#[test]
fn name_must_be_a_label() {
    let mut app = valid();
    app.metadata.name = Some("shop.front".into());
    assert_eq!(
        errors(&app),
        [("metadata.name".into(), FieldErrorKind::Invalid)]
    );
}

#[test]
fn duplicate_input_is_reported_like_kubernetes() {
    let mut app = valid();
    app.spec.inputs[1].name = "domain".into();
    let all = app.validate();
    assert_eq!(all.len(), 1);
    assert_eq!(
        all[0].to_string(),
        r#"spec.inputs[1].name: Duplicate value: "domain""#
    );
}

#[test]
fn input_names_must_be_identifiers() {
    let mut app = valid();
    app.spec.inputs[0].name = "Domain-Name".into();
    assert_eq!(
        errors(&app),
        [("spec.inputs[0].name".into(), FieldErrorKind::Invalid)]
    );
}

#[test]
fn input_group_must_be_declared() {
    let mut app = valid();
    app.spec.inputs[0].group = Some("database".into());
    assert_eq!(
        errors(&app),
        [("spec.inputs[0].group".into(), FieldErrorKind::Invalid)]
    );
}

#[test]
fn duplicate_groups_and_secrets() {
    let mut app = valid();
    app.spec.input_groups.push(app.spec.input_groups[0].clone());
    app.spec.secrets.push(app.spec.secrets[0].clone());
    assert_eq!(
        errors(&app),
        [
            ("spec.inputGroups[1].name".into(), FieldErrorKind::Duplicate),
            ("spec.secrets[1].name".into(), FieldErrorKind::Duplicate),
        ]
    );
}

#[test]
fn default_must_match_type() {
    let mut app = valid();
    app.spec.inputs[1].default = Some(json!("two"));
    assert_eq!(
        errors(&app),
        [("spec.inputs[1].default".into(), FieldErrorKind::Invalid)]
    );
}

#[test]
fn duplicate_role_names_and_default_types() {
    let mut app = valid();
    let roles = &mut app.spec.permissions.as_mut().unwrap().roles;
    roles.push(roles[0].clone());
    let mut second = roles[1].clone();
    second.name = "other-maintenance".into();
    roles.push(second);
    assert_eq!(
        errors(&app),
        [
            (
                "spec.permissions.roles[3].name".into(),
                FieldErrorKind::Duplicate
            ),
            (
                "spec.permissions.roles[3].type".into(),
                FieldErrorKind::Duplicate
            ),
            (
                "spec.permissions.roles[4].type".into(),
                FieldErrorKind::Duplicate
            ),
        ]
    );
}

#[test]
fn invalid_role_name_template() {
    let mut app = valid();
    app.spec.permissions.as_mut().unwrap().roles[2].name = "{{ install.id }}/eks".into();
    assert_eq!(
        errors(&app),
        [(
            "spec.permissions.roles[2].name".into(),
            FieldErrorKind::Invalid
        )]
    );
}

#[test]
fn sandbox_roles_must_be_declared_and_operations_known() {
    let mut app = valid();
    let roles = &mut app.spec.sandbox.as_mut().unwrap().operation_roles;
    roles.insert("deprovision".into(), "{{ install.id }}-deprovision".into());
    roles.insert("deploy".into(), "{{ install.id }}-maintenance".into());
    assert_eq!(
        errors(&app),
        [
            (
                "spec.sandbox.operationRoles.deploy".into(),
                FieldErrorKind::NotSupported
            ),
            (
                "spec.sandbox.operationRoles.deprovision".into(),
                FieldErrorKind::Invalid
            ),
        ]
    );
}

#[test]
fn a_terraform_sandbox_has_a_source_or_inline_files() {
    let mut app = valid();
    let sandbox = app.spec.sandbox.as_mut().unwrap();
    sandbox.source = String::new();
    sandbox.files.insert("main.tf".into(), "".into());
    assert_eq!(errors(&app), []);
    let sandbox = app.spec.sandbox.as_mut().unwrap();
    sandbox.source = "github.com/acme/sandbox".into();
    sandbox.files.insert("../x.tf".into(), "".into());
    assert_eq!(
        errors(&app),
        [
            ("spec.sandbox.files".into(), FieldErrorKind::Forbidden),
            ("spec.sandbox.files".into(), FieldErrorKind::Invalid),
        ]
    );
    let sandbox = app.spec.sandbox.as_mut().unwrap();
    sandbox.files.clear();
    sandbox.source.clear();
    assert_eq!(
        errors(&app),
        [("spec.sandbox.source".into(), FieldErrorKind::Required)]
    );
    let sandbox = app.spec.sandbox.as_mut().unwrap();
    sandbox.type_ = SandboxType::Cloudformation;
    sandbox.source = "https://example.com/t.yaml".into();
    sandbox.files.insert("main.tf".into(), "".into());
    assert_eq!(
        errors(&app),
        [("spec.sandbox.files".into(), FieldErrorKind::Forbidden)]
    );
}

#[test]
fn default_role_follows_operation() {
    let app = valid();
    assert_eq!(
        app.spec
            .default_role(Operation::Deploy)
            .map(|r| r.name.as_str()),
        Some("{{ install.id }}-maintenance")
    );
    assert!(app.spec.default_role(Operation::Deprovision).is_none());
}

#[test]
fn runner_and_drift_bounds() {
    let mut app = valid();
    app.spec.runner = Some(RunnerSettings {
        heartbeat_seconds: Some(1),
        ..Default::default()
    });
    app.spec.drift = Some(DriftSettings {
        interval_seconds: Some(1),
        remediation: None,
    });
    assert_eq!(
        errors(&app),
        [
            (
                "spec.runner.heartbeatSeconds".into(),
                FieldErrorKind::Invalid
            ),
            ("spec.drift.intervalSeconds".into(), FieldErrorKind::Invalid),
        ]
    );
}
