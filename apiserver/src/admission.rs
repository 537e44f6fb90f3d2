//! Admission: each Outpost kind's own validation rules (from `outpost-api`), run after
//! the schema check so that a request gets every cause in one 422.

use outpost_api::{FieldError, Validate};
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
        "Policy" => typed::<k::Policy>,
        "Install" => typed::<k::Install>,
        "InstallStack" => typed::<k::InstallStack>,
        "Runner" => typed::<k::Runner>,
        "Plan" => typed::<k::Plan>,
        "DriftReport" => typed::<k::DriftReport>,
        "AuditEvent" => typed::<k::AuditEvent>,
        _ => return None,
    })
}

fn typed<K: DeserializeOwned + Validate>(object: &Value) -> Vec<FieldError> {
    match K::deserialize(object) {
        Ok(typed) => typed.validate(),
        Err(err) => vec![FieldError::invalid("", "", err.to_string())],
    }
}
