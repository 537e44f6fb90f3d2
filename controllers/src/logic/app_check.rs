//! Validation of an App as a whole — with its Components, Actions and
//! OperationRoles — for the App's `Invalid` condition, and the App's release
//! hash.
//!
//! Each object validates its own fields (`outpost_api::Validate`); this checks
//! what spans objects:
//! * objects belong to the App (`spec.app`);
//! * dependencies name components of the App and have no cycle;
//! * templates refer only to declared inputs, secrets and components
//!   (any output name of a declared component or of the sandbox is accepted:
//!   components do not declare outputs), and to variables the renderer has;
//! * role references (sandbox and component `operationRoles`, action `role`
//!   and `breakGlassRole`, `OperationRole.spec.role`) name a declared role;
//! * role types fit the reference: `breakGlassRole` names a `break_glass`
//!   role; components, the sandbox and matrix rules name a lifecycle
//!   (`provision`, `maintenance`, `deprovision`) or `custom` role — a
//!   `break_glass` role there would be used as a custom role, so it must be
//!   declared `custom`. An action's `role` may name any type;
//! * matrix rule principals and action triggers name existing entities.
//!
//! Which strings are templates: every string of a Component's spec; of an
//! Action, its steps' `env` values and its roles; of the App, its sandbox and
//! role names. Role references are compared by their name template with the
//! whitespace inside `{{ }}` removed (no install exists to render them).

use crate::logic::app_objects::{AppObjects, name_of};
use crate::logic::graph::ComponentGraph;
use crate::logic::template::{Reference, references, templates_in};
use outpost_api::{Principal, RoleSpec, RoleType, content_hash};
use serde::Serialize;
use serde_json::{Value, json};
use std::fmt;

/// One problem with an App's release, e.g.
/// `Component/web spec.dependencies: unknown component "cache"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The object, `Component/web`.
    pub object: String,
    /// Where in it, `spec.manifest.content`; empty for the object as a whole.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.object, self.message)
        } else {
            write!(f, "{} {}: {}", self.object, self.field, self.message)
        }
    }
}

/// Every cross-object problem of the App's release (see the module docs);
/// empty when it is valid. Problems come per object in the order App,
/// Components, Actions, OperationRoles, then the dependency cycle.
pub fn check_app(objects: &AppObjects<'_>) -> Vec<Problem> {
    let mut check = Check {
        objects,
        problems: Vec::new(),
    };
    check.app();
    for component in objects.components {
        check.component(component);
    }
    for action in objects.actions {
        check.action(action);
    }
    for rule in objects.operation_roles {
        check.operation_role(rule);
    }
    if let Err(cycle) = ComponentGraph::new(objects.components) {
        check.problems.push(Problem {
            object: format!("App/{}", objects.app_name()),
            field: "components".into(),
            message: cycle.to_string(),
        });
    }
    check.problems
}

/// Content hash of the App's release: the specs of the App, its Components,
/// Actions and OperationRoles (each list sorted by name), so any change to
/// what installs converge to changes it, and metadata or status do not.
pub fn release_hash(
    app: &outpost_api::App,
    components: &[outpost_api::Component],
    actions: &[outpost_api::Action],
    operation_roles: &[outpost_api::OperationRole],
) -> String {
    fn sorted<K: kube_client::Resource, S: Serialize>(
        objects: &[K],
        spec: impl Fn(&K) -> &S,
    ) -> Value {
        let mut named: Vec<(&str, Value)> = objects
            .iter()
            .map(|o| {
                (
                    name_of(o),
                    serde_json::to_value(spec(o)).unwrap_or_default(),
                )
            })
            .collect();
        named.sort_by(|a, b| a.0.cmp(b.0));
        named
            .into_iter()
            .map(|(name, spec)| json!({"name": name, "spec": spec}))
            .collect()
    }
    content_hash(&json!({
        "app": {"name": name_of(app), "spec": serde_json::to_value(&app.spec).unwrap_or_default()},
        "components": sorted(components, |c| &c.spec),
        "actions": sorted(actions, |a| &a.spec),
        "operationRoles": sorted(operation_roles, |r| &r.spec),
    }))
}

/// How a role is referenced, which decides the role types it may name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RoleUse {
    /// Sandbox or component `operationRoles`, matrix rules.
    Lifecycle,
    /// An action's `role`.
    Action,
    /// An action's `breakGlassRole`.
    BreakGlass,
}

struct Check<'o, 'a> {
    objects: &'o AppObjects<'a>,
    problems: Vec<Problem>,
}

impl Check<'_, '_> {
    fn push(&mut self, object: &str, field: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            object: object.to_owned(),
            field: field.into(),
            message: message.into(),
        });
    }

    fn app(&mut self) {
        let app = self.objects.app;
        let object = format!("App/{}", self.objects.app_name());
        if let Some(sandbox) = &app.spec.sandbox {
            let spec = serde_json::to_value(sandbox).unwrap_or_default();
            self.templates(&object, "spec.sandbox", &spec);
            for (op, role) in &sandbox.operation_roles {
                let field = format!("spec.sandbox.operationRoles.{op}");
                self.role(&object, &field, role, RoleUse::Lifecycle);
            }
        }
        for (i, role) in app.spec.roles().iter().enumerate() {
            let field = format!("spec.permissions.roles[{i}].name");
            self.template(&object, &field, &role.name);
        }
    }

    fn component(&mut self, component: &outpost_api::Component) {
        let object = format!("Component/{}", name_of(component));
        self.belongs(&object, &component.spec.app);
        for (i, dep) in component.spec.dependencies.iter().enumerate() {
            if self.objects.component(dep).is_none() {
                self.push(
                    &object,
                    format!("spec.dependencies[{i}]"),
                    format!("unknown component {dep:?}"),
                );
            }
        }
        let spec = serde_json::to_value(&component.spec).unwrap_or_default();
        self.templates(&object, "spec", &spec);
        for (op, role) in &component.spec.operation_roles {
            let field = format!("spec.operationRoles.{op}");
            self.role(&object, &field, role, RoleUse::Lifecycle);
        }
    }

    fn action(&mut self, action: &outpost_api::Action) {
        let object = format!("Action/{}", name_of(action));
        self.belongs(&object, &action.spec.app);
        for (i, step) in action.spec.steps.iter().enumerate() {
            for (key, value) in &step.env {
                self.template(&object, &format!("spec.steps[{i}].env.{key}"), value);
            }
        }
        for (i, trigger) in action.spec.triggers.iter().enumerate() {
            if let Some(component) = &trigger.component
                && self.objects.component(component).is_none()
            {
                let field = format!("spec.triggers[{i}].component");
                self.push(&object, field, format!("unknown component {component:?}"));
            }
        }
        if let Some(role) = &action.spec.role {
            self.template(&object, "spec.role", role);
            self.role(&object, "spec.role", role, RoleUse::Action);
        }
        if let Some(role) = &action.spec.break_glass_role {
            self.template(&object, "spec.breakGlassRole", role);
            self.role(&object, "spec.breakGlassRole", role, RoleUse::BreakGlass);
        }
    }

    fn operation_role(&mut self, rule: &outpost_api::OperationRole) {
        let object = format!("OperationRole/{}", name_of(rule));
        self.belongs(&object, &rule.spec.app);
        match Principal::parse(&rule.spec.principal) {
            Ok(Principal::Component(name)) if self.objects.component(&name).is_none() => {
                self.push(
                    &object,
                    "spec.principal",
                    format!("unknown component {name:?}"),
                );
            }
            Ok(Principal::Action(name)) if self.objects.action(&name).is_none() => {
                self.push(
                    &object,
                    "spec.principal",
                    format!("unknown action {name:?}"),
                );
            }
            Ok(_) => {}
            Err(err) => self.push(&object, "spec.principal", err.to_string()),
        }
        self.template(&object, "spec.role", &rule.spec.role);
        self.role(&object, "spec.role", &rule.spec.role, RoleUse::Lifecycle);
    }

    fn belongs(&mut self, object: &str, app: &str) {
        let name = self.objects.app_name();
        if app != name {
            self.push(
                object,
                "spec.app",
                format!("belongs to app {app:?}, not {name:?}"),
            );
        }
    }

    /// Checks every string of `spec` as a template.
    fn templates(&mut self, object: &str, at: &str, spec: &Value) {
        for (path, template) in templates_in(spec) {
            self.template(object, &format!("{at}.{path}"), template);
        }
    }

    /// Checks that `template` parses and refers only to what the App declares.
    fn template(&mut self, object: &str, field: &str, template: &str) {
        let found = match references(template) {
            Ok(found) => found,
            Err(err) => {
                let detail = std::error::Error::source(&err)
                    .map(ToString::to_string)
                    .unwrap_or_default();
                self.push(object, field, format!("{err}: {detail}"));
                return;
            }
        };
        let spec = &self.objects.app.spec;
        for reference in found {
            let message = match &reference {
                Reference::Input { name } if !spec.inputs.iter().any(|i| &i.name == name) => {
                    format!("refers to {reference}, which the app does not declare")
                }
                Reference::Secret { name } if !spec.secrets.iter().any(|s| &s.name == name) => {
                    format!("refers to {reference}, which the app does not declare")
                }
                Reference::Component { name, .. } if self.objects.component(name).is_none() => {
                    format!("refers to {reference}, but the app has no component {name:?}")
                }
                Reference::Sandbox { .. } if spec.sandbox.is_none() => {
                    format!("refers to {reference}, but the app has no sandbox")
                }
                Reference::Collection { root } => {
                    format!("refers to {root} as a whole; name one: {root}.<name>")
                }
                Reference::Unknown { path } => format!("refers to unknown variable {path}"),
                _ => continue,
            };
            self.push(object, field, message);
        }
    }

    /// Checks that `template` names a declared role of a type `usage` allows.
    fn role(&mut self, object: &str, field: &str, template: &str, usage: RoleUse) {
        let wanted = normalize(template);
        let Some(role) = self
            .objects
            .app
            .spec
            .roles()
            .iter()
            .find(|r| normalize(&r.name) == wanted)
        else {
            self.push(
                object,
                field,
                format!("role {template:?} is not declared by the app"),
            );
            return;
        };
        let allowed = match usage {
            RoleUse::BreakGlass => role.type_ == RoleType::BreakGlass,
            RoleUse::Lifecycle => role.type_ != RoleType::BreakGlass,
            RoleUse::Action => true,
        };
        if !allowed {
            let message = match usage {
                RoleUse::BreakGlass => format!(
                    "role {template:?} is declared {}, but breakGlassRole must name a break_glass role",
                    type_name(role)
                ),
                _ => format!(
                    "role {template:?} is used as a custom role but declared {}; declare it custom",
                    type_name(role)
                ),
            };
            self.push(object, field, message);
        }
    }
}

/// A role's type as written in YAML (`break_glass`).
fn type_name(role: &RoleSpec) -> String {
    serde_json::to_value(role.type_)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `template` with whitespace inside `{{ }}` removed, so
/// `{{install.id}}-x` and `{{ install.id }}-x` compare equal.
fn normalize(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            break;
        };
        out.extend(
            rest[start..start + end]
                .chars()
                .filter(|c| !c.is_whitespace()),
        );
        out.push_str("}}");
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[path = "app_check_tests.rs"]
mod tests;
