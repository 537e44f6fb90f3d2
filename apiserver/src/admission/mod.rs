//! Admission: each Outpost kind's own validation rules (from `outpost-api`), run after
//! the schema check so that a request gets every cause in one 422. A `Policy`'s module
//! must also compile. Then the references that must exist in the store: a `Rollout`'s
//! `spec.component` must be a Component of its App ([`component_reference`]); an
//! Install's inputs must hold against its App's declarations ([`inputs`]). A Plan's
//! lifecycle (who may write which status and make which move, approvals) is in [`plan`];
//! the audit log is append-only ([`audit`]).

pub mod audit;
pub mod inputs;
pub mod plan;

use outpost_api::{FieldError, Validate};
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The validation of an Outpost kind, by kind name.
pub fn validator(kind: &str) -> Option<fn(&Value) -> Vec<FieldError>> {
    use outpost_api as k;
    Some(match kind {
        "App" => typed::<k::App>,
        "Component" => typed::<k::Component>,
        "Action" => typed::<k::Action>,
        "OperationRole" => typed::<k::OperationRole>,
        "Policy" => policy,
        "Install" => typed::<k::Install>,
        "InstallStack" => typed::<k::InstallStack>,
        "Runner" => typed::<k::Runner>,
        "Plan" => typed::<k::Plan>,
        "DriftReport" => typed::<k::DriftReport>,
        "AuditEvent" => typed::<k::AuditEvent>,
        "Rollout" => typed::<k::Rollout>,
        _ => return None,
    })
}

fn typed<K: DeserializeOwned + Validate>(object: &Value) -> Vec<FieldError> {
    match K::deserialize(object) {
        Ok(typed) => typed.validate(),
        Err(err) => vec![FieldError::invalid("", "", err.to_string())],
    }
}

/// A Component an object names, which must exist when the object is written.
#[derive(Debug, PartialEq, Eq)]
pub struct ComponentReference {
    /// The field that names it.
    pub field: &'static str,
    /// The App it must belong to.
    pub app: String,
    /// The Component's name.
    pub component: String,
}

/// The Component reference of `object` (of `kind`) to check: a `Rollout`'s
/// `spec.component`, when it is created (`old` is `None`) or an update changes it — a
/// rollout keeps working (pause, resume, abort) after its App dropped the component.
pub fn component_reference(
    kind: &str,
    object: &Value,
    old: Option<&Value>,
) -> Option<ComponentReference> {
    if kind != "Rollout" {
        return None;
    }
    let component = object.pointer("/spec/component")?.as_str()?;
    if old.and_then(|o| o.pointer("/spec/component")) == object.pointer("/spec/component") {
        return None;
    }
    Some(ComponentReference {
        field: "spec.component",
        app: object.pointer("/spec/app")?.as_str()?.to_owned(),
        component: component.to_owned(),
    })
}

/// Checks `reference` against the Component objects of its namespace: an error naming
/// the App's components when it is not one of them.
pub fn check_component(reference: &ComponentReference, components: &[Value]) -> Option<FieldError> {
    let of_app: Vec<&str> = components
        .iter()
        .filter(|c| c.pointer("/spec/app").and_then(Value::as_str) == Some(&reference.app))
        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    if of_app.contains(&reference.component.as_str()) {
        return None;
    }
    let has = if of_app.is_empty() {
        "it has none".to_owned()
    } else {
        format!("it has {}", of_app.join(", "))
    };
    Some(FieldError::invalid(
        reference.field,
        &reference.component,
        format!("not a component of App {:?} ({has})", reference.app),
    ))
}

/// A `Policy`'s validation, plus its module compiling (`spec.module`, naming the line
/// and column of the first error).
fn policy(object: &Value) -> Vec<FieldError> {
    let policy = match outpost_api::Policy::deserialize(object) {
        Ok(policy) => policy,
        Err(err) => return vec![FieldError::invalid("", "", err.to_string())],
    };
    let mut errors = policy.validate();
    // A missing or misplaced package is already reported by `validate`.
    if errors.iter().all(|e| e.field != "spec.module")
        && let Err(err) = outpost_policy::compile("spec.module", &policy.spec.module)
    {
        let line = policy
            .spec
            .module
            .lines()
            .nth(err.line.saturating_sub(1) as usize)
            .unwrap_or_default()
            .trim();
        errors.push(FieldError::invalid(
            "spec.module",
            line,
            format!("{}:{}: {}", err.line, err.column, err.message),
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy_object(module: &str) -> Value {
        json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Policy",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"inputs": ["terraform"], "module": module},
        })
    }

    #[test]
    fn policy_modules_must_compile() {
        let validate = validator("Policy").expect("Policy has a validator");
        let ok = "package outpost.p\n\ndeny contains \"x\" if input.bad\n";
        assert_eq!(validate(&policy_object(ok)), vec![]);

        let broken = "package outpost.p\n\ndeny contains msg if {\n  input.a == = 1\n}\n";
        let errors = validate(&policy_object(broken));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.module");
        assert_eq!(
            errors[0].message,
            "Invalid value: \"input.a == = 1\": 4:14: expecting expression"
        );
    }

    #[test]
    fn a_rollout_component_must_be_one_of_its_apps() {
        let rollout = |component: &str| {
            json!({"kind": "Rollout", "metadata": {"name": "r"},
                   "spec": {"app": "shop", "component": component}})
        };
        let component = |name: &str, app: &str| json!({"kind": "Component", "metadata": {"name": name}, "spec": {"app": app}});
        let components = [
            component("web", "shop"),
            component("cache", "shop"),
            component("db", "other"),
        ];
        let reference = component_reference("Rollout", &rollout("db"), None)
            .expect("a new Rollout's component is checked");
        let error = check_component(&reference, &components).expect("db is another App's");
        assert_eq!(error.field, "spec.component");
        assert_eq!(
            error.message,
            "Invalid value: \"db\": not a component of App \"shop\" (it has web, cache)"
        );
        let web = component_reference("Rollout", &rollout("web"), None).unwrap();
        assert_eq!(check_component(&web, &components), None);
        assert!(
            check_component(&web, &[])
                .unwrap()
                .message
                .contains("it has none")
        );
        // An update that leaves it alone (pause, abort) is not checked again; one that
        // changes it is.
        assert_eq!(
            component_reference("Rollout", &rollout("db"), Some(&rollout("db"))),
            None
        );
        assert!(component_reference("Rollout", &rollout("db"), Some(&rollout("web"))).is_some());
        let whole = json!({"kind": "Rollout", "spec": {"app": "shop"}});
        assert_eq!(component_reference("Rollout", &whole, None), None);
        assert_eq!(component_reference("Install", &rollout("db"), None), None);
    }

    #[test]
    fn package_errors_are_reported_once() {
        let validate = validator("Policy").expect("Policy has a validator");
        let errors = validate(&policy_object("package main\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains("outpost.<name>"), "{errors:?}");
    }
}
