//! An Install's inputs against the inputs its App declares
//! ([`outpost_api::input_value`]): the App is read from the watch cache (the store when
//! the cache does not have it yet), and an Install whose App does not exist is admitted
//! unchecked — the Install controller reports it, as it reports inputs an App change
//! made invalid (`InputsValid`).

use outpost_api::{AppSpec, FieldError};
use outpost_apiserver::admission::{Admission, Attributes, Reads};
use outpost_apiserver::object_meta::from_store;
use outpost_apiserver::status::{ApiError, Subject};
use serde_json::Value;
use std::collections::BTreeMap;

/// The admission plugin checking an Install's inputs: 422 naming each input
/// (`spec.inputs.NAME`) that does not hold.
#[derive(Clone, Copy, Debug, Default)]
pub struct InstallInputs;

#[async_trait::async_trait]
impl Admission for InstallInputs {
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
        let Some(check) = input_check(&rt.kind, object, attributes.old) else {
            return Ok(());
        };
        let Some(apps) = reads.resource(outpost_api::GROUP, outpost_api::VERSION, "apps") else {
            return Ok(()); // not served here: nothing to check against
        };
        let namespace = attributes.namespace();
        let subject = || Subject::of(rt, attributes.name);
        let cached = reads
            .cache(&apps)?
            .get(namespace, &check.app)
            .map(|o| o.value())
            .transpose()?;
        let app = match cached {
            Some(app) => Some(app),
            // Written moments ago (`kubectl apply -f` of an App and its Installs): the
            // cache may not have it yet.
            None => reads
                .store()
                .get(&apps.key(namespace, &check.app))
                .await
                .map_err(|e| ApiError::from_store(e, subject()))?
                .as_ref()
                .map(from_store)
                .transpose()?,
        };
        let causes = app.map_or_else(Vec::new, |app| check_inputs(&check, &app));
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Invalid {
                subject: subject(),
                causes,
            })
        }
    }
}

/// What to check of an Install write.
#[derive(Debug, PartialEq)]
pub struct InputCheck {
    /// The App the Install names.
    pub app: String,
    /// The inputs written.
    pub inputs: BTreeMap<String, Value>,
    /// The inputs stored before, when the update keeps the App (ratcheting).
    pub old: Option<BTreeMap<String, Value>>,
}

/// The check a write of `object` (of `kind`, replacing `old`) needs: none for other
/// kinds, nor for an update that leaves the App and the inputs as they were (a status
/// write, a label change), so those never read the App.
pub fn input_check(kind: &str, object: &Value, old: Option<&Value>) -> Option<InputCheck> {
    if kind != "Install" {
        return None;
    }
    let app = object.pointer("/spec/app")?.as_str()?.to_owned();
    let inputs_of = |o: &Value| -> BTreeMap<String, Value> {
        o.pointer("/spec/inputs")
            .and_then(|i| serde_json::from_value(i.clone()).ok())
            .unwrap_or_default()
    };
    let inputs = inputs_of(object);
    let old = old
        .filter(|o| o.pointer("/spec/app").and_then(Value::as_str) == Some(&app))
        .map(inputs_of);
    if old.as_ref() == Some(&inputs) {
        return None;
    }
    Some(InputCheck { app, inputs, old })
}

/// The errors of `check` against the App object `app` (as stored). An App that does
/// not decode (stored before a schema change) declares nothing to check against.
pub fn check_inputs(check: &InputCheck, app: &Value) -> Vec<FieldError> {
    let Some(spec) = app
        .get("spec")
        .and_then(|s| serde_json::from_value::<AppSpec>(s.clone()).ok())
    else {
        return Vec::new();
    };
    outpost_api::input_value::validate_install_inputs(&spec, &check.inputs, check.old.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn install(app: &str, inputs: Value) -> Value {
        json!({"kind": "Install", "spec": {"app": app, "inputs": inputs}})
    }

    #[test]
    fn only_writes_that_change_inputs_or_app_are_checked() {
        let old = install("shop", json!({"domain": "a"}));
        assert_eq!(input_check("Install", &old, Some(&old)), None);
        assert_eq!(input_check("App", &old, None), None);
        let created = input_check("Install", &old, None).expect("a create is checked");
        assert_eq!((created.app.as_str(), created.old), ("shop", None));
        let changed = install("shop", json!({"domain": "b"}));
        let update = input_check("Install", &changed, Some(&old)).unwrap();
        assert_eq!(
            update.old,
            Some(BTreeMap::from([("domain".into(), json!("a"))]))
        );
        // Another App: nothing ratchets.
        let moved = install("other", json!({"domain": "a"}));
        assert_eq!(
            input_check("Install", &moved, Some(&old)).unwrap().old,
            None
        );
    }

    #[test]
    fn inputs_are_checked_against_the_app() {
        let app =
            json!({"spec": {"inputs": [{"name": "domain", "type": "string", "required": true}]}});
        let check = input_check("Install", &install("shop", json!({})), None).unwrap();
        let errors = check_inputs(&check, &app);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.inputs.domain");
        assert_eq!(
            check_inputs(&check, &json!({"spec": {"inputs": 5}})),
            vec![]
        );
    }
}
