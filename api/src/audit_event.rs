//! `AuditEvent`: an append-only, hash-chained, signed record of one runner
//! step. Written whole by the runner; never updated or deleted.

use crate::operation::EntityRef;
use crate::validation::{
    FieldError, NameRule, Validate, validate_name, validate_object_name, validate_required,
};
use crate::wire::any_value;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Spec of an `AuditEvent`. `hash` is the content hash of the event without
/// `hash` and `signature`; `signature` is the runner's ed25519 signature of
/// `hash`; `previousHash` is the `hash` of the event with `sequence - 1`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "AuditEvent",
    namespaced,
    derive = "PartialEq",
    shortname = "audit",
    category = "outpost",
    selectable = ".spec.install",
    doc = "A signed, hash-chained record of one runner step.",
    printcolumn(name = "Install", type_ = "string", json_path = ".spec.install"),
    printcolumn(name = "Seq", type_ = "integer", json_path = ".spec.sequence"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Plan", type_ = "string", json_path = ".spec.plan"),
    printcolumn(name = "Time", type_ = "date", json_path = ".spec.timestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventSpec {
    /// Name of the Install.
    pub install: String,
    /// Name of the Runner that wrote the event.
    pub runner: String,
    /// Position in the install's chain, from 0, without gaps.
    pub sequence: u64,
    /// When the step happened.
    pub timestamp: Time,
    /// What happened.
    #[serde(rename = "type")]
    pub type_: AuditEventType,
    /// Plan the step belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Entity the step touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<EntityRef>,
    /// Role (rendered) the step ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Step-specific details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub details: Option<Value>,
    /// `hash` of the previous event; absent only for sequence 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_hash: Option<String>,
    /// `sha256:<hex>` of this event.
    pub hash: String,
    /// Base64 ed25519 signature of `hash`.
    pub signature: String,
}

/// What a runner step was.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuditEventType {
    /// The runner registered or restarted.
    Register,
    /// The runner claimed a Plan.
    Claim,
    /// The runner assumed a role.
    Role,
    /// The runner computed the real diff of a Plan.
    Plan,
    /// Policies were evaluated on the diff.
    Verdict,
    /// The runner applied a Plan.
    Apply,
    /// The runner reported outputs.
    Outputs,
    /// The runner checked for drift.
    Drift,
    /// The runner refused a Plan (stale, disabled role, denied).
    Refuse,
    /// The runner moved to a new signing key; signed by the old key, `details.newPublicKey`
    /// names the new one, which signs the events after it.
    #[serde(rename = "key-rotation")]
    KeyRotation,
    /// A runner that lost its state dir (and so its key) continues the chain with a new
    /// key: signed by that key (`details.publicKey`), linked to the control plane's head,
    /// `details.checkpoint` the newest checkpoint it found on the customer's side.
    /// Verification flags it for the customer to confirm.
    #[serde(rename = "key-reset")]
    KeyReset,
}

impl Validate for AuditEvent {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        errors.extend(validate_name(
            "spec.install",
            &spec.install,
            NameRule::Label,
        ));
        errors.extend(validate_name(
            "spec.runner",
            &spec.runner,
            NameRule::Subdomain,
        ));
        match (&spec.previous_hash, spec.sequence) {
            (Some(_), 0) => errors.push(FieldError::forbidden(
                "spec.previousHash",
                "the first event has no previous hash",
            )),
            (None, 1..) => errors.push(FieldError::required(
                "spec.previousHash",
                "every event after the first",
            )),
            (Some(hash), _) if !crate::is_content_hash(hash) => errors.push(FieldError::invalid(
                "spec.previousHash",
                hash,
                "must be sha256:<64 hex digits>",
            )),
            _ => {}
        }
        if !crate::is_content_hash(&spec.hash) {
            errors.push(FieldError::invalid(
                "spec.hash",
                &spec.hash,
                "must be sha256:<64 hex digits>",
            ));
        }
        errors.extend(validate_required("spec.signature", &spec.signature));
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;
    use serde_json::json;

    fn event(sequence: u64, previous: Option<&str>) -> AuditEvent {
        let hash = crate::content_hash(&json!(sequence));
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "AuditEvent",
            "metadata": {"name": format!("acme-{sequence}")},
            "spec": {
                "install": "acme",
                "runner": "acme",
                "sequence": sequence,
                "timestamp": "2025-01-15T10:00:00Z",
                "type": "claim",
                "previousHash": previous,
                "hash": hash,
                "signature": "c2ln"
            }
        }))
        .expect("test AuditEvent is well-formed")
    }

    #[test]
    fn chain_links_are_checked() {
        let first = event(0, None);
        assert_eq!(first.validate(), vec![]);
        let second = event(1, Some(&first.spec.hash));
        assert_eq!(second.validate(), vec![]);
        let errors = event(1, None).validate();
        assert_eq!(
            (errors[0].field.as_str(), errors[0].kind),
            ("spec.previousHash", FieldErrorKind::Required)
        );
        let errors = event(0, Some(&first.spec.hash)).validate();
        assert_eq!(errors[0].kind, FieldErrorKind::Forbidden);
    }
}
