//! Inputs and secrets an App declares. Inputs are values an install sets
//! (`{{ inputs.domain }}`); secrets are values that stay in the customer's
//! secret store and are resolved by the runner (`{{ secrets.db_password }}`).

use crate::party::Party;
use crate::validation::{FieldError, is_dns1123_label, is_dns1123_subdomain, validate_identifier};
use crate::wire::{any_value, any_value_list, is_false};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One input of an App.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputSpec {
    /// Identifier `[a-z][a-z0-9_]*`, used as `{{ inputs.<name> }}`.
    pub name: String,
    /// Label shown in forms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Type of the value.
    #[serde(rename = "type")]
    pub type_: InputType,
    /// Name of an entry of the App's `inputGroups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Who sets the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Party>,
    /// Whether an install must set it (when there is no default).
    #[serde(default, skip_serializing_if = "is_false")]
    pub required: bool,
    /// Value used when an install does not set one; must match `type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub default: Option<Value>,
    /// The values allowed, each of `type`; any value of `type` when empty.
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_value_list")]
    pub enum_: Vec<Value>,
    /// A regular expression (Rust `regex` syntax, unanchored as in OpenAPI) a
    /// `string` value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Whether the value is secret: an install never gives it in plain form, only as
    /// `{secretRef: SECRET}` naming one of the App's secrets, which the runner
    /// resolves in the customer's account (see [`crate::input_value`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub sensitive: bool,
}

impl InputSpec {
    /// Who sets the value, `vendor` when omitted.
    pub fn source(&self) -> Party {
        self.source.unwrap_or_default()
    }
}

/// Type of an input value.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InputType {
    /// A JSON string.
    String,
    /// A JSON number.
    Number,
    /// A JSON boolean.
    Boolean,
    /// A JSON array.
    List,
    /// Any JSON value.
    Json,
}

impl InputType {
    /// Whether `value` has this type.
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            Self::String => value.is_string(),
            Self::Number => value.is_number(),
            Self::Boolean => value.is_boolean(),
            Self::List => value.is_array(),
            Self::Json => true,
        }
    }
}

/// A group of inputs shown together.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputGroup {
    /// Identifier referenced by `inputs[].group`.
    pub name: String,
    /// Label shown in forms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A secret the App needs. Its value never enters the control plane.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretSpec {
    /// Identifier, used as `{{ secrets.<name> }}`.
    pub name: String,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the runner generates a random value if the customer sets none.
    #[serde(default, skip_serializing_if = "is_false")]
    pub generate: bool,
    /// Length of a generated value; [`SecretSpec::DEFAULT_LENGTH`] when omitted.
    /// Only with `generate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u32>,
    /// Also write the value into this Kubernetes Secret of the install's cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_secret: Option<KubernetesSecretTarget>,
}

impl SecretSpec {
    /// Length of a generated value when `length` is omitted.
    pub const DEFAULT_LENGTH: u32 = 32;
    /// Accepted lengths of a generated value.
    pub const LENGTHS: std::ops::RangeInclusive<u32> = 8..=4096;

    /// Field errors of this secret, with paths under `field`.
    pub fn validate_at(&self, field: &str) -> Vec<FieldError> {
        let mut errors: Vec<_> = validate_identifier(&format!("{field}.name"), &self.name)
            .into_iter()
            .collect();
        if let Some(length) = self.length {
            if !self.generate {
                errors.push(FieldError::forbidden(
                    format!("{field}.length"),
                    "only applies when generate is true",
                ));
            } else if !Self::LENGTHS.contains(&length) {
                errors.push(FieldError::invalid(
                    format!("{field}.length"),
                    length,
                    "must be between 8 and 4096",
                ));
            }
        }
        if let Some(target) = &self.kubernetes_secret {
            let at = format!("{field}.kubernetesSecret");
            if !is_dns1123_label(&target.namespace) {
                errors.push(FieldError::invalid(
                    format!("{at}.namespace"),
                    &target.namespace,
                    "must be a DNS-1123 label",
                ));
            }
            if !is_dns1123_subdomain(&target.name) {
                errors.push(FieldError::invalid(
                    format!("{at}.name"),
                    &target.name,
                    "must be a DNS-1123 subdomain",
                ));
            }
            let key_ok = !target.key.is_empty()
                && target
                    .key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            if !key_ok {
                errors.push(FieldError::invalid(
                    format!("{at}.key"),
                    &target.key,
                    "must consist of alphanumeric characters, '-', '_' or '.'",
                ));
            }
        }
        errors
    }
}

/// Where in the install's cluster a secret is also written.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesSecretTarget {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key within the Secret's data.
    pub key: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_types_accept_matching_values() {
        assert!(InputType::String.accepts(&json!("a")));
        assert!(!InputType::String.accepts(&json!(1)));
        assert!(InputType::Number.accepts(&json!(1.5)));
        assert!(InputType::Boolean.accepts(&json!(false)));
        assert!(!InputType::List.accepts(&json!({})));
        assert!(InputType::Json.accepts(&json!({"a": [1]})));
    }

    #[test]
    fn secret_checks() {
        let mut s = SecretSpec {
            name: "db_password".into(),
            description: None,
            generate: true,
            length: Some(24),
            kubernetes_secret: Some(KubernetesSecretTarget {
                namespace: "shop".into(),
                name: "db".into(),
                key: "password".into(),
            }),
        };
        assert!(s.validate_at("s").is_empty());
        s.length = Some(4);
        assert_eq!(s.validate_at("s")[0].field, "s.length");
        s.generate = false;
        assert_eq!(s.validate_at("s")[0].kind, crate::FieldErrorKind::Forbidden);
        s.length = None;
        s.name = "db-password".into();
        s.kubernetes_secret.as_mut().unwrap().key = "a b".into();
        let fields: Vec<_> = s.validate_at("s").into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["s.name", "s.kubernetesSecret.key"]);
    }
}
