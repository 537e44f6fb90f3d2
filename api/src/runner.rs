//! `Runner`: the agent on the customer's VM, registered for one install.

use crate::validation::{
    FieldError, NameRule, Validate, duplicates, validate_name, validate_object_name,
    validate_required,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of a `Runner`, written by the runner when it registers.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Runner",
    namespaced,
    status = "RunnerStatus",
    derive = "PartialEq",
    shortname = "rn",
    category = "outpost",
    selectable = ".spec.install",
    doc = "The runner of an install.",
    printcolumn(name = "Install", type_ = "string", json_path = ".spec.install"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "Heartbeat",
        type_ = "date",
        json_path = ".status.lastHeartbeat"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RunnerSpec {
    /// Name of the Install.
    pub install: String,
    /// Runner version.
    pub version: String,
    /// Ed25519 public key that verifies the runner's audit signatures,
    /// standard base64 (44 characters).
    pub public_key: String,
    /// What the runner can execute (`terraform`, `helm`, `kubernetes`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
}

/// Status of a `Runner`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerStatus {
    /// Time of the last heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
    /// Role names (rendered) the runner can assume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled_roles: Vec<String>,
    /// `Connected` and others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Whether `text` is the standard base64 encoding of 32 bytes.
pub fn is_ed25519_public_key(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 44
        && b[43] == b'='
        && b[..43].iter().all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        // The last symbol carries 4 bits of the last byte and 2 padding bits,
        // which must be zero.
        && (b"AEIMQUYcgkosw048".contains(&b[42]))
}

impl Validate for Runner {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        errors.extend(validate_name(
            "spec.install",
            &spec.install,
            NameRule::Label,
        ));
        errors.extend(validate_required("spec.version", &spec.version));
        if !is_ed25519_public_key(&spec.public_key) {
            errors.push(FieldError::invalid(
                "spec.publicKey",
                &spec.public_key,
                "must be a base64-encoded 32-byte ed25519 public key",
            ));
        }
        errors.extend(duplicates(
            spec.capabilities.iter().map(String::as_str),
            |i| format!("spec.capabilities[{i}]"),
        ));
        errors
    }
}

/// A runner is online while its last heartbeat is at most this many heartbeat intervals
/// (the App's `runner.heartbeatSeconds`) old.
pub const MISSED_HEARTBEATS: i64 = 3;

/// Whether a runner whose last heartbeat was at `last_heartbeat` is online at `now`,
/// heartbeating every `heartbeat_seconds` ([`MISSED_HEARTBEATS`] may be missed).
pub fn is_online(last_heartbeat: &Time, now: &Time, heartbeat_seconds: u32) -> bool {
    now.0.as_second() - last_heartbeat.0.as_second()
        <= MISSED_HEARTBEATS * i64::from(heartbeat_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";

    fn runner(key: &str) -> Runner {
        Runner::new(
            "acme",
            RunnerSpec {
                install: "acme".into(),
                version: "0.1.0".into(),
                public_key: key.into(),
                capabilities: vec!["terraform".into(), "helm".into()],
            },
        )
    }

    #[test]
    fn public_key_must_be_32_bytes_of_base64() {
        assert_eq!(runner(KEY).validate(), vec![]);
        for bad in [
            "",
            "abc",
            &KEY[1..],
            "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURp=",
            "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHUR!=",
        ] {
            assert_eq!(runner(bad).validate().len(), 1, "{bad}");
        }
    }

    #[test]
    fn capabilities_are_unique() {
        let mut r = runner(KEY);
        r.spec.capabilities.push("helm".into());
        assert_eq!(r.validate()[0].field, "spec.capabilities[2]");
    }
}
