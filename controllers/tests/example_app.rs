//! The example App from `manifests/` through the public API: it validates,
//! renders for the `acme` install, and resolves roles by the precedence chain.

use outpost_api::{
    Action, App, Component, EntityKind, EntityRef, Install, Operation, OperationRole, PlanSpec,
    RoleLevel,
};
use outpost_controllers::template::{secret_references, templates_in};
use outpost_controllers::{AppObjects, InstallOutputs, TemplateContext, check_app, resolve_role};
use serde_json::json;

fn load<K: serde::de::DeserializeOwned>(file: &str) -> Vec<K> {
    let path = format!("{}/../manifests/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("parse {path}: {e}"))
}

fn plan(operation: Operation, name: &str) -> PlanSpec {
    PlanSpec {
        install: "acme".into(),
        operation,
        entity: EntityRef {
            kind: operation.entity_kind(),
            name: name.into(),
        },
        reason: None,
        release: None,
        role_override: None,
        desired_state: None,
        content_hash: None,
        base_revision: None,
    }
}

#[test]
fn example_app_renders_and_resolves_roles() {
    let app: App = load::<App>("app.yaml").remove(0);
    let components: Vec<Component> = load("components.yaml");
    let actions: Vec<Action> = load("actions.yaml");
    let rules: Vec<OperationRole> = load("operation-roles.yaml");
    let mut install: Install = load::<Install>("installs.yaml").remove(0);
    install.metadata.uid = Some("i-123".into());
    let objects = AppObjects {
        app: &app,
        components: &components,
        actions: &actions,
        operation_roles: &rules,
    };
    assert!(check_app(&objects).is_empty());

    let outputs = InstallOutputs {
        sandbox: [("private_subnet_ids".to_owned(), json!(["subnet-1"]))].into(),
        components: [
            ("database", "endpoint", "db:5432"),
            ("cache", "host", "redis"),
            (
                "web-image",
                "reference",
                "111122223333.dkr.ecr.eu-west-1.amazonaws.com/shopfront@sha256:abc",
            ),
        ]
        .into_iter()
        .map(|(c, k, v)| (c.to_owned(), [(k.to_owned(), json!(v))].into()))
        .collect(),
    };
    let context = TemplateContext::new(&app, &install, &outputs).unwrap();
    let web = components
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("web"))
        .unwrap();
    let rendered = context
        .render_value(&serde_json::to_value(&web.spec).unwrap())
        .unwrap();
    let content = rendered["manifest"]["content"].as_str().unwrap();
    assert!(content.contains(r#"value: "redis""#), "{content}");
    assert!(
        content.contains(
            r#"image: "111122223333.dkr.ecr.eu-west-1.amazonaws.com/shopfront@sha256:abc""#
        ),
        "web runs the copy in the customer's registry: {content}"
    );
    let web_image = components
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("web-image"))
        .unwrap();
    let rendered_image = context
        .render_value(&serde_json::to_value(&web_image.spec).unwrap())
        .unwrap();
    // The install's registry is a customer input (`source: customer`): the control plane
    // renders its placeholder, and the runner fills it in from its own install stack.
    assert_eq!(
        rendered_image["image"],
        json!({"repository": "ghcr.io/acme/shopfront", "tag": "1.8.2",
               "destination": "${outpost-input:image_registry}/shopfront"}),
        "copied from the vendor's registry into the install's"
    );
    assert!(content.contains(r#"value: "shop.acme.example""#));
    assert_eq!(
        secret_references(content),
        Vec::<&str>::new(),
        "web reads the password from its Secret"
    );
    let database = components
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("database"))
        .unwrap();
    let rendered_database = context
        .render_value(&serde_json::to_value(&database.spec).unwrap())
        .unwrap();
    assert_eq!(
        rendered_database["terraform"]["variables"]["master_password"],
        "${outpost-secret:db_password}",
        "secrets render to references"
    );
    assert!(
        templates_in(&rendered)
            .iter()
            .all(|(_, t)| !t.contains("{{"))
    );

    for (operation, entity, level, name, rule) in [
        (
            Operation::Deploy,
            "web",
            RoleLevel::Entity,
            "i-123-maintenance",
            "Component/web operationRoles.deploy",
        ),
        (
            Operation::Deploy,
            "database",
            RoleLevel::Matrix,
            "i-123-provision",
            "OperationRole/database-deploy",
        ),
        (
            Operation::Teardown,
            "web",
            RoleLevel::Matrix,
            "i-123-deprovision",
            "OperationRole/components-teardown",
        ),
        (
            Operation::Deploy,
            "cache",
            RoleLevel::Default,
            "i-123-maintenance",
            "App/shopfront default maintenance role",
        ),
        (
            Operation::Trigger,
            "eks-upgrade",
            RoleLevel::Entity,
            "i-123-eks-upgrade-role",
            "Action/eks-upgrade role",
        ),
        (
            Operation::Provision,
            "sandbox",
            RoleLevel::Entity,
            "i-123-provision",
            "App/shopfront sandbox.operationRoles.provision",
        ),
    ] {
        let resolved = resolve_role(&plan(operation, entity), &objects, &context).unwrap();
        assert_eq!(
            (
                resolved.level,
                resolved.name.as_str(),
                resolved.rule.as_deref()
            ),
            (level, name, Some(rule)),
            "{operation} {entity}"
        );
    }
    let mut manual = plan(Operation::Trigger, "migrate");
    manual.role_override = Some("{{ install.id }}-break-glass".into());
    let resolved = resolve_role(&manual, &objects, &context).unwrap();
    assert_eq!(
        (resolved.level, resolved.name.as_str()),
        (RoleLevel::Override, "i-123-break-glass")
    );
    assert_eq!(manual.entity.kind, EntityKind::Action);
}
