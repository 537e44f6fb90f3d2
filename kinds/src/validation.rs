//! Each Outpost kind's own validation rules (from `outpost-api`), the kind's
//! [`Strategy`]: the server runs them after the schema check so that a request gets
//! every cause in one 422. A `Policy`'s module must also compile. A Plan's spec is
//! immutable.

use outpost_api::{FieldError, Validate};
use outpost_apiserver::strategy::Strategy;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The strategy of an Outpost kind.
#[derive(Clone, Copy, Debug)]
pub struct KindRules {
    validate: Option<fn(&Value) -> Vec<FieldError>>,
    immutable_spec: bool,
    status_on_create: bool,
}

impl KindRules {
    /// The rules of `kind`.
    pub fn of(kind: &str) -> Self {
        KindRules {
            validate: validator(kind),
            immutable_spec: kind == "Plan",
            status_on_create: kind == "Plan",
        }
    }
}

impl Strategy for KindRules {
    fn validate(&self, object: &Value) -> Vec<FieldError> {
        self.validate.map(|v| v(object)).unwrap_or_default()
    }

    fn immutable_spec(&self) -> bool {
        self.immutable_spec
    }

    /// A Plan may be created with its gate's decision (`crate::plan::check_create_status`
    /// says what of it, `crate::approval` who).
    fn status_on_create(&self) -> bool {
        self.status_on_create
    }
}

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

/// Decodes the object as `K` and asks its rules. The object's managed fields are not
/// decoded with it ([`outpost_api::Lean`]: on a fleet Plan they were a third of the bytes
/// this decode copied into `Value` trees on every write); their entries are checked for
/// the shape the whole decode checked (so a `time` that is not a timestamp is still
/// refused), without copying their field sets.
fn typed<K: DeserializeOwned + Validate>(object: &Value) -> Vec<FieldError> {
    match decode::<K>(object) {
        Ok(typed) => typed.validate(),
        Err(error) => vec![error],
    }
}

/// The object as `K`, without its managed fields, whose entries' shape is checked alone
/// (see [`typed`]); the decode error as the one cause otherwise.
fn decode<K: DeserializeOwned>(object: &Value) -> Result<K, FieldError> {
    let invalid = |err: serde_json::Error| FieldError::invalid("", "", err.to_string());
    if let Some(entries) = object.pointer("/metadata/managedFields") {
        Option::<Vec<ManagedEntryShape>>::deserialize(entries).map_err(invalid)?;
    }
    outpost_api::Lean::<K>::deserialize(object)
        .map(outpost_api::Lean::into_inner)
        .map_err(invalid)
}

/// What k8s-openapi's `ManagedFieldsEntry` reads of an entry, its `fieldsV1` (any JSON
/// there) passed over.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "decoded only to check its shape")]
struct ManagedEntryShape {
    api_version: Option<String>,
    fields_type: Option<String>,
    #[serde(rename = "fieldsV1")]
    fields_v1: Option<serde::de::IgnoredAny>,
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// A `Policy`'s validation, plus its module compiling (`spec.module`, naming the line
/// and column of the first error).
fn policy(object: &Value) -> Vec<FieldError> {
    let policy = match decode::<outpost_api::Policy>(object) {
        Ok(policy) => policy,
        Err(error) => return vec![error],
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

    /// The typed check decodes objects without their managed fields, and refuses the
    /// same managed fields the whole decode refused.
    #[test]
    fn managed_fields_are_refused_as_the_whole_decode_refused_them() {
        let validate = validator("Install").expect("Install has a validator");
        let install = |managed: Value| {
            json!({
                "apiVersion": "outpost.dev/v1alpha1",
                "kind": "Install",
                "metadata": {"name": "a", "namespace": "default", "managedFields": managed},
                "spec": {"app": "shopfront", "cloud": {"provider": "aws",
                         "accountId": "123456789012", "region": "eu-west-1"}},
            })
        };
        let entry = json!({"manager": "m", "operation": "Update", "apiVersion": "v1",
                           "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:app": {}}},
                           "subresource": "", "time": "2026-11-27T00:00:00Z"});
        let cases = [
            (json!(null), true),
            (json!([]), true),
            (json!([entry]), true),
            (json!([{}]), true),
            (json!([{"fieldsV1": 1}]), true),
            (json!([{"fieldsV1": [{"f": "x"}], "extra": 1}]), true),
            (json!(5), false),
            (json!("entries"), false),
            (json!({"manager": "m"}), false),
            (json!([5]), false),
            (json!([null]), false),
            (json!([{"manager": 5}]), false),
            (json!([{"operation": ["Update"]}]), false),
            (json!([{"time": "yesterday"}]), false),
            (json!([{"time": 0}]), false),
            (json!([{"subresource": {}}]), false),
        ];
        for (managed, valid) in cases {
            let object = install(managed.clone());
            let whole = outpost_api::Install::deserialize(&object);
            assert_eq!(whole.is_ok(), valid, "{managed}: the whole decode");
            let errors = validate(&object);
            assert_eq!(errors.is_empty(), valid, "{managed}: {errors:?}");
        }
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
    fn package_errors_are_reported_once() {
        let validate = validator("Policy").expect("Policy has a validator");
        let errors = validate(&policy_object("package main\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains("outpost.<name>"), "{errors:?}");
    }
}
