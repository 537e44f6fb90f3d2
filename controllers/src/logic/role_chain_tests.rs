//! Table-driven tests of the precedence chain: for each level, a case where it
//! wins over every level below it, plus templated and undeclared names.

use super::*;
use crate::logic::template::InstallOutputs;
use crate::logic::template::tests::install;
use outpost_api::{Action, App, Component, EntityRef, OperationRole};
use serde_json::{Value, json};

struct Fixture {
    app: App,
    components: Vec<Component>,
    actions: Vec<Action>,
    rules: Vec<OperationRole>,
}

fn object<K: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("test object is well-formed")
}

fn role(name: &str, type_: &str) -> Value {
    json!({"name": format!("{{{{ install.id }}}}-{name}"), "type": type_})
}

fn fixture() -> Fixture {
    let app = object(
        "App",
        "shopfront",
        json!({
            "inputs": [{"name": "team", "type": "string", "default": "ops"}],
            "permissions": {"roles": [
                role("provision", "provision"),
                role("maintenance", "maintenance"),
                role("deprovision", "deprovision"),
                role("break-glass", "break_glass"),
                role("custom-a", "custom"),
                role("custom-b", "custom"),
                {"name": "{{ inputs.team }}-{{ install.cloud.region }}", "type": "custom"},
            ]},
            "sandbox": {
                "type": "terraform_module",
                "source": "registry.example/sandbox",
                "operationRoles": {"provision": "{{ install.id }}-custom-a"},
            },
        }),
    );
    let manifest = json!({"content": "kind: ConfigMap\n"});
    let component = |name: &str, roles: Value| {
        object::<Component>(
            "Component",
            name,
            json!({"app": "shopfront", "type": "kubernetes_manifest", "manifest": manifest, "operationRoles": roles}),
        )
    };
    let action = |name: &str, extra: Value| {
        let mut spec = json!({"app": "shopfront", "steps": [{"name": "s", "command": "true"}]});
        spec.as_object_mut()
            .expect("spec is an object")
            .extend(extra.as_object().expect("extra is an object").clone());
        object::<Action>("Action", name, spec)
    };
    let rule = |name: &str, principal: &str, operation: &str, role: &str| {
        object::<OperationRole>(
            "OperationRole",
            name,
            json!({"app": "shopfront", "principal": principal, "operation": operation,
                   "role": format!("{{{{ install.id }}}}-{role}")}),
        )
    };
    Fixture {
        app,
        components: vec![
            component("web", json!({"deploy": "{{ install.id }}-custom-a"})),
            component("db", json!({})),
            component("cache", json!({})),
        ],
        actions: vec![
            action(
                "migrate",
                json!({"role": "{{ install.id }}-custom-a", "breakGlassRole": "{{ install.id }}-break-glass"}),
            ),
            action("report", json!({"role": "{{ install.id }}-maintenance"})),
            action("nightly", json!({})),
        ],
        rules: vec![
            rule("all-teardown", "component:*", "teardown", "deprovision"),
            rule("db-teardown", "component:db", "teardown", "custom-b"),
            rule("web-deploy", "component:web", "deploy", "custom-b"),
            rule("migrate-trigger", "action:migrate", "trigger", "custom-b"),
            rule("nightly-trigger", "action:nightly", "trigger", "custom-b"),
            rule("other-app", "component:cache", "deploy", "custom-b"),
        ],
    }
}

struct Case {
    name: &'static str,
    operation: Operation,
    entity: &'static str,
    role_override: Option<&'static str>,
    change: fn(&mut Fixture),
    /// `Ok((level, rendered name, rule))` or `Err(message)`.
    want: Result<(RoleLevel, &'static str, &'static str), &'static str>,
}

fn unchanged(_: &mut Fixture) {}

fn cases() -> Vec<Case> {
    use Operation::*;
    use RoleLevel::*;
    let case = |name, operation, entity, role_override, want| Case {
        name,
        operation,
        entity,
        role_override,
        change: unchanged,
        want,
    };
    vec![
        // 1. Override beats break-glass, entity, matrix and default.
        case(
            "override over break-glass",
            Trigger,
            "migrate",
            Some("{{ install.id }}-maintenance"),
            Ok((Override, "0f0e-maintenance", "roleOverride")),
        ),
        case(
            "override over entity and matrix",
            Deploy,
            "web",
            Some("{{ install.id }}-provision"),
            Ok((Override, "0f0e-provision", "roleOverride")),
        ),
        // 2. Break-glass beats entity (`role`), matrix and default.
        case(
            "break-glass over entity",
            Trigger,
            "migrate",
            None,
            Ok((
                BreakGlass,
                "0f0e-break-glass",
                "Action/migrate breakGlassRole",
            )),
        ),
        // 3. Entity beats matrix and default.
        case(
            "component entity over matrix",
            Deploy,
            "web",
            None,
            Ok((
                Entity,
                "0f0e-custom-a",
                "Component/web operationRoles.deploy",
            )),
        ),
        Case {
            change: |f| f.actions[0].spec.break_glass_role = None,
            ..case(
                "action role over matrix",
                Trigger,
                "migrate",
                None,
                Ok((Entity, "0f0e-custom-a", "Action/migrate role")),
            )
        },
        case(
            "sandbox entity over default",
            Provision,
            "sandbox",
            None,
            Ok((
                Entity,
                "0f0e-custom-a",
                "App/shopfront sandbox.operationRoles.provision",
            )),
        ),
        // 4. Matrix beats default; a specific principal beats component:*.
        case(
            "wildcard matrix over default",
            Teardown,
            "web",
            None,
            Ok((Matrix, "0f0e-deprovision", "OperationRole/all-teardown")),
        ),
        case(
            "specific matrix over wildcard",
            Teardown,
            "db",
            None,
            Ok((Matrix, "0f0e-custom-b", "OperationRole/db-teardown")),
        ),
        case(
            "action matrix over default",
            Trigger,
            "nightly",
            None,
            Ok((Matrix, "0f0e-custom-b", "OperationRole/nightly-trigger")),
        ),
        Case {
            change: |f| f.rules[5].spec.app = "other".into(),
            ..case(
                "rules of another app do not match",
                Deploy,
                "cache",
                None,
                Ok((
                    Default,
                    "0f0e-maintenance",
                    "App/shopfront default maintenance role",
                )),
            )
        },
        // 5. Default by operation type.
        case(
            "default for reprovision",
            Reprovision,
            "sandbox",
            None,
            Ok((
                Default,
                "0f0e-provision",
                "App/shopfront default provision role",
            )),
        ),
        case(
            "default for deprovision",
            Deprovision,
            "sandbox",
            None,
            Ok((
                Default,
                "0f0e-deprovision",
                "App/shopfront default deprovision role",
            )),
        ),
        case(
            "default for deploy",
            Deploy,
            "db",
            None,
            Ok((
                Default,
                "0f0e-maintenance",
                "App/shopfront default maintenance role",
            )),
        ),
        // Templated names compare rendered.
        case(
            "override spelled differently",
            Trigger,
            "report",
            Some("{{install.id}}-custom-b"),
            Ok((Override, "0f0e-custom-b", "roleOverride")),
        ),
        case(
            "override as a rendered name",
            Trigger,
            "report",
            Some("0f0e-custom-b"),
            Ok((Override, "0f0e-custom-b", "roleOverride")),
        ),
        case(
            "role templated over inputs and cloud",
            Trigger,
            "report",
            Some("ops-eu-west-1"),
            Ok((Override, "ops-eu-west-1", "roleOverride")),
        ),
        // Undeclared roles deny; no fallback to a lower level.
        case(
            "undeclared override",
            Trigger,
            "report",
            Some("{{ install.id }}-nope"),
            Err(
                r#"role "0f0e-nope" ("{{ install.id }}-nope"), chosen by roleOverride at the override level, is not declared by the app"#,
            ),
        ),
        Case {
            change: |f| {
                f.components[0]
                    .spec
                    .operation_roles
                    .insert("deploy".into(), "admin".into());
            },
            ..case(
                "undeclared entity role does not fall back",
                Deploy,
                "web",
                None,
                Err(
                    r#"role "admin" ("admin"), chosen by Component/web operationRoles.deploy at the entity level, is not declared by the app"#,
                ),
            )
        },
        case(
            "unrenderable role",
            Trigger,
            "report",
            Some("{{ inputs.missing }}"),
            Err(
                r#"role "{{ inputs.missing }}", chosen by roleOverride at the override level, cannot be rendered"#,
            ),
        ),
        Case {
            change: |f| f.rules[1].spec.principal = "component:*".into(),
            ..case(
                "tied matrix rules with different roles",
                Teardown,
                "db",
                None,
                Err(
                    "matrix rules OperationRole/all-teardown, OperationRole/db-teardown match teardown of Component/db equally and name different roles",
                ),
            )
        },
        Case {
            change: |f| {
                f.rules[1].spec.principal = "component:*".into();
                f.rules[1].spec.role = "{{ install.id }}-deprovision".into();
            },
            ..case(
                "tied matrix rules with one role",
                Teardown,
                "db",
                None,
                Ok((Matrix, "0f0e-deprovision", "OperationRole/all-teardown")),
            )
        },
        Case {
            change: |f| {
                let roles = &mut f
                    .app
                    .spec
                    .permissions
                    .as_mut()
                    .expect("fixture has roles")
                    .roles;
                roles.retain(|r| r.type_ != RoleType::Deprovision);
            },
            ..case(
                "no default role",
                Deprovision,
                "sandbox",
                None,
                Err("no role chosen for deprovision and the app declares no Deprovision role"),
            )
        },
        case(
            "unknown entity",
            Deploy,
            "nope",
            None,
            Err("Component/nope is not part of the app"),
        ),
    ]
}

#[test]
fn precedence_chain() {
    let context_app = fixture().app;
    let context = TemplateContext::new(&context_app, &install(), &InstallOutputs::default())
        .expect("test context is valid");
    for case in cases() {
        let mut f = fixture();
        (case.change)(&mut f);
        let objects = AppObjects {
            app: &f.app,
            components: &f.components,
            actions: &f.actions,
            operation_roles: &f.rules,
        };
        let plan = PlanSpec {
            install: "acme".into(),
            operation: case.operation,
            entity: EntityRef {
                kind: case.operation.entity_kind(),
                name: case.entity.into(),
            },
            reason: None,
            release: None,
            role_override: case.role_override.map(Into::into),
            desired_state: None,
            content_hash: None,
            base_revision: None,
        };
        let got = resolve_role(&plan, &objects, &context)
            .map(|r| (r.level, r.name, r.rule.unwrap_or_default()))
            .map_err(|e| e.to_string());
        let want = case
            .want
            .map(|(level, name, rule)| (level, name.to_owned(), rule.to_owned()))
            .map_err(str::to_owned);
        assert_eq!(got, want, "case {:?}", case.name);
    }
}

#[test]
fn operation_must_fit_the_entity() {
    let f = fixture();
    let objects = AppObjects {
        app: &f.app,
        components: &f.components,
        actions: &f.actions,
        operation_roles: &f.rules,
    };
    let context = TemplateContext::new(&f.app, &install(), &InstallOutputs::default()).unwrap();
    let plan = PlanSpec {
        install: "acme".into(),
        operation: Operation::Deploy,
        entity: EntityRef {
            kind: EntityKind::Action,
            name: "migrate".into(),
        },
        reason: None,
        release: None,
        role_override: None,
        desired_state: None,
        content_hash: None,
        base_revision: None,
    };
    let err = resolve_role(&plan, &objects, &context).unwrap_err();
    assert_eq!(
        err.to_string(),
        "operation deploy does not apply to Action/migrate"
    );
}
