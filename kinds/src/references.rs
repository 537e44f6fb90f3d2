//! References a write must hold to objects in the store: a `Rollout`'s
//! `spec.component` must be a Component of its App, when the Rollout is created or the
//! update changes it ([`ComponentReferences`], 422 naming the App's components).

use outpost_api::FieldError;
use outpost_apiserver::admission::{Admission, Attributes, Reads};
use outpost_apiserver::object_meta::from_store;
use outpost_apiserver::status::{ApiError, Subject};
use serde_json::Value;

/// The admission plugin checking a Rollout's component.
#[derive(Clone, Copy, Debug, Default)]
pub struct ComponentReferences;

#[async_trait::async_trait]
impl Admission for ComponentReferences {
    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        reads: &Reads<'_>,
    ) -> Result<(), ApiError> {
        let rt = attributes.rt;
        if rt.group != outpost_api::GROUP {
            return Ok(());
        }
        let Some(reference) = component_reference(&rt.kind, object, attributes.old) else {
            return Ok(());
        };
        let Some(components) =
            reads.resource(outpost_api::GROUP, outpost_api::VERSION, "components")
        else {
            return Ok(()); // not served here: nothing to check against
        };
        let subject = || Subject::of(rt, attributes.name);
        let (items, _) = reads
            .store()
            .list_all(&components.key_prefix(attributes.namespace()))
            .await
            .map_err(|e| ApiError::from_store(e, subject()))?;
        let components: Vec<Value> = items.iter().map(from_store).collect::<Result<_, _>>()?;
        match check_component(&reference, &components) {
            None => Ok(()),
            Some(cause) => Err(ApiError::Invalid {
                subject: subject(),
                causes: vec![cause],
            }),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
