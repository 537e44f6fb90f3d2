//! IAM roles an App declares, one per lifecycle phase plus break-glass and
//! custom roles. The install stack creates them in the customer's account;
//! the customer can switch each one off.

use crate::template;
use crate::validation::{FieldError, duplicates, validate_required};
use crate::wire::any_value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The App's permissions.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    /// Roles the install stack creates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleSpec>,
}

/// What a role is for. The default role for an operation is the App's role of
/// [`Operation::default_role_type`](crate::Operation::default_role_type).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RoleType {
    /// Creates the sandbox (provision, reprovision).
    Provision,
    /// Day-2 operations: deploy, teardown, actions.
    Maintenance,
    /// Destroys the sandbox.
    Deprovision,
    /// Elevated access for emergencies; off unless the customer enables it.
    BreakGlass,
    /// Anything else, referenced by name from components, actions or matrix
    /// rules; off unless enabled.
    Custom,
}

impl RoleType {
    /// Whether a role of this type is enabled when `enabledByDefault` is
    /// omitted: `true` for provision, maintenance and deprovision, `false` for
    /// break_glass and custom.
    pub fn enabled_by_default(self) -> bool {
        matches!(
            self,
            Self::Provision | Self::Maintenance | Self::Deprovision
        )
    }
}

/// One IAM role. Its `name` is a template over install state, for example
/// `{{ install.id }}-eks-upgrade-role`, so that every install gets its own
/// role; references to the role (sandbox or component `operationRoles`,
/// action `role`, `OperationRole.spec.role`) use the same raw template text.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleSpec {
    /// IAM role name template; a valid IAM role name once rendered.
    pub name: String,
    /// What the role is for.
    #[serde(rename = "type")]
    pub type_: RoleType,
    /// Shown to the customer when they review the install stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the install stack enables the role unless the customer opts
    /// out. Omitted means [`RoleType::enabled_by_default`]; use
    /// [`RoleSpec::enabled_by_default`] to read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_by_default: Option<bool>,
    /// Inline IAM policies attached to the role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<InlinePolicy>,
    /// ARNs of managed policies attached to the role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_policy_arns: Vec<String>,
    /// Upper bound on what the role can do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions_boundary: Option<PermissionsBoundary>,
}

impl RoleSpec {
    /// Whether the role is enabled unless the customer opts out, with the
    /// per-type default applied.
    pub fn enabled_by_default(&self) -> bool {
        self.enabled_by_default
            .unwrap_or_else(|| self.type_.enabled_by_default())
    }

    /// Field errors of this role, with paths under `field`.
    pub fn validate_at(&self, field: &str) -> Vec<FieldError> {
        let mut errors: Vec<FieldError> = validate_role_name(&format!("{field}.name"), &self.name)
            .into_iter()
            .collect();
        for (i, policy) in self.policies.iter().enumerate() {
            let at = format!("{field}.policies[{i}]");
            errors.extend(validate_required(&format!("{at}.name"), &policy.name));
            if !policy.document.is_object() {
                errors.push(FieldError::invalid(
                    format!("{at}.document"),
                    policy.document.to_string(),
                    "must be an IAM policy document (a JSON object)",
                ));
            }
        }
        errors.extend(duplicates(
            self.policies.iter().map(|p| p.name.as_str()),
            |i| format!("{field}.policies[{i}].name"),
        ));
        for (i, arn) in self.managed_policy_arns.iter().enumerate() {
            if !is_arn(arn) {
                errors.push(FieldError::invalid(
                    format!("{field}.managedPolicyArns[{i}]"),
                    arn,
                    "must be an ARN (arn:partition:service:...)",
                ));
            }
        }
        if let Some(boundary) = &self.permissions_boundary {
            errors.extend(boundary.validate_at(&format!("{field}.permissionsBoundary")));
        }
        errors
    }
}

/// An inline IAM policy.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InlinePolicy {
    /// Policy name, unique within the role.
    pub name: String,
    /// The IAM policy document (`{"Version": "2012-10-17", "Statement": [...]}`).
    #[schemars(schema_with = "any_value")]
    pub document: Value,
}

/// A permissions boundary: exactly one of an inline document or a managed
/// policy ARN.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsBoundary {
    /// Inline boundary policy document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub document: Option<Value>,
    /// ARN of a managed boundary policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
}

impl PermissionsBoundary {
    fn validate_at(&self, field: &str) -> Vec<FieldError> {
        match (&self.document, &self.arn) {
            (Some(_), Some(_)) => {
                vec![FieldError::forbidden(
                    field,
                    "set only one of document and arn",
                )]
            }
            (None, None) => vec![FieldError::required(field, "one of document or arn")],
            (Some(doc), None) if !doc.is_object() => vec![FieldError::invalid(
                format!("{field}.document"),
                doc.to_string(),
                "must be an IAM policy document (a JSON object)",
            )],
            (None, Some(arn)) if !is_arn(arn) => vec![FieldError::invalid(
                format!("{field}.arn"),
                arn,
                "must be an ARN (arn:partition:service:...)",
            )],
            _ => Vec::new(),
        }
    }
}

/// Longest IAM role name.
pub const IAM_ROLE_NAME_MAX: usize = 64;

/// Checks that a role name template is a valid IAM role name once rendered:
/// each `{{ ... }}` is replaced by a one-character placeholder, and the result
/// must be 1–64 characters of `[A-Za-z0-9+=,.@_-]`. The length check is a
/// lower bound: rendered values may be longer than the placeholder.
pub fn validate_role_name(field: &str, name: &str) -> Option<FieldError> {
    if name.is_empty() {
        return Some(FieldError::required(field, ""));
    }
    let rendered = match template::with_placeholder(name, "x") {
        Ok(rendered) => rendered,
        Err(err) => return Some(FieldError::invalid(field, name, err.to_string())),
    };
    if rendered.len() > IAM_ROLE_NAME_MAX {
        return Some(FieldError::too_long(field, IAM_ROLE_NAME_MAX));
    }
    let valid = rendered
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b));
    (!valid).then(|| {
        FieldError::invalid(
            field,
            name,
            "must be a valid IAM role name: letters, digits and +=,.@_- (templates {{ ... }} \
             allowed)",
        )
    })
}

fn is_arn(text: &str) -> bool {
    text.starts_with("arn:") && text.split(':').count() >= 6
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(name: &str, type_: RoleType) -> RoleSpec {
        RoleSpec {
            name: name.into(),
            type_,
            description: None,
            enabled_by_default: None,
            policies: vec![],
            managed_policy_arns: vec![],
            permissions_boundary: None,
        }
    }

    #[test]
    fn enabled_by_default_depends_on_type_when_omitted() {
        assert!(role("a", RoleType::Provision).enabled_by_default());
        assert!(role("a", RoleType::Maintenance).enabled_by_default());
        assert!(role("a", RoleType::Deprovision).enabled_by_default());
        assert!(!role("a", RoleType::BreakGlass).enabled_by_default());
        assert!(!role("a", RoleType::Custom).enabled_by_default());
        let mut custom = role("a", RoleType::Custom);
        custom.enabled_by_default = Some(true);
        assert!(custom.enabled_by_default());
        let mut provision = role("a", RoleType::Provision);
        provision.enabled_by_default = Some(false);
        assert!(!provision.enabled_by_default());
    }

    #[test]
    fn role_type_wire_names() {
        assert_eq!(
            serde_json::to_value(RoleType::BreakGlass).unwrap(),
            json!("break_glass")
        );
        assert_eq!(
            serde_json::to_value(RoleType::Custom).unwrap(),
            json!("custom")
        );
    }

    #[test]
    fn role_names_are_checked_after_templates_are_replaced() {
        assert!(validate_role_name("n", "{{ install.id }}-eks-upgrade-role").is_none());
        assert!(validate_role_name("n", "outpost-provision").is_none());
        assert!(validate_role_name("n", "{{ install.id }} role").is_some());
        assert!(validate_role_name("n", "{{ install.id -role").is_some());
        assert!(validate_role_name("n", "").is_some());
        let long = format!("{{{{ install.id }}}}{}", "a".repeat(64));
        assert_eq!(
            validate_role_name("n", &long).map(|e| e.kind),
            Some(crate::FieldErrorKind::TooLong)
        );
    }

    #[test]
    fn policies_and_boundary_are_checked() {
        let mut r = role("r", RoleType::Custom);
        assert!(r.validate_at("x").is_empty());
        r.policies = vec![
            InlinePolicy {
                name: "p".into(),
                document: json!({"Version": "2012-10-17"}),
            },
            InlinePolicy {
                name: "p".into(),
                document: json!("nope"),
            },
        ];
        r.managed_policy_arns = vec!["not-an-arn".into()];
        r.permissions_boundary = Some(PermissionsBoundary::default());
        let fields: Vec<String> = r.validate_at("x").into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "x.policies[1].document",
                "x.policies[1].name",
                "x.managedPolicyArns[0]",
                "x.permissionsBoundary"
            ]
        );
    }
}
