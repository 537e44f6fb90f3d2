//! `OperationRole`: a matrix rule choosing the role for a principal and an
//! operation, step 4 of the role precedence chain.

use crate::operation::{EntityKind, EntityRef, Operation};
use crate::role::validate_role_name;
use crate::validation::{
    FieldError, NameRule, Validate, is_dns1123_label, validate_name, validate_object_name,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of an `OperationRole`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "OperationRole",
    namespaced,
    derive = "PartialEq",
    shortname = "oprole",
    category = "outpost",
    selectable = ".spec.app",
    doc = "A matrix rule: the role a principal uses for an operation.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Principal", type_ = "string", json_path = ".spec.principal"),
    printcolumn(name = "Operation", type_ = "string", json_path = ".spec.operation"),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OperationRoleSpec {
    /// Name of the App the rule belongs to.
    pub app: String,
    /// `sandbox`, `component:<name>`, `component:*` or `action:<name>`; see
    /// [`Principal`].
    pub principal: String,
    /// The operation the rule applies to.
    pub operation: Operation,
    /// Role name template of one of the App's roles.
    pub role: String,
}

impl OperationRoleSpec {
    /// The parsed principal.
    pub fn principal(&self) -> Result<Principal, PrincipalError> {
        Principal::parse(&self.principal)
    }
}

/// Who a matrix rule applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// `sandbox`.
    Sandbox,
    /// `component:*`: every component.
    AnyComponent,
    /// `component:<name>`.
    Component(String),
    /// `action:<name>`.
    Action(String),
}

/// A principal that is not `sandbox`, `component:<name or *>` or
/// `action:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("principal must be sandbox, component:<name>, component:* or action:<name>")]
pub struct PrincipalError;

impl Principal {
    /// Parses `sandbox`, `component:<name>`, `component:*` or `action:<name>`.
    pub fn parse(text: &str) -> Result<Self, PrincipalError> {
        match text.split_once(':') {
            None if text == "sandbox" => Ok(Self::Sandbox),
            Some(("component", "*")) => Ok(Self::AnyComponent),
            Some(("component", name)) if is_dns1123_label(name) => {
                Ok(Self::Component(name.to_owned()))
            }
            Some(("action", name)) if is_dns1123_label(name) => Ok(Self::Action(name.to_owned())),
            _ => Err(PrincipalError),
        }
    }

    /// The kind of entity the principal names.
    pub fn entity_kind(&self) -> EntityKind {
        match self {
            Self::Sandbox => EntityKind::Sandbox,
            Self::AnyComponent | Self::Component(_) => EntityKind::Component,
            Self::Action(_) => EntityKind::Action,
        }
    }

    /// Whether the principal covers `entity`.
    pub fn matches(&self, entity: &EntityRef) -> bool {
        match self {
            Self::Sandbox => entity.kind == EntityKind::Sandbox,
            Self::AnyComponent => entity.kind == EntityKind::Component,
            Self::Component(name) => entity.kind == EntityKind::Component && &entity.name == name,
            Self::Action(name) => entity.kind == EntityKind::Action && &entity.name == name,
        }
    }

    /// Whether the rule names one entity (`component:web`) rather than all
    /// components (`component:*`); specific rules win over wildcards.
    pub fn is_specific(&self) -> bool {
        !matches!(self, Self::AnyComponent)
    }
}

impl Validate for OperationRole {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        errors.extend(validate_name("spec.app", &spec.app, NameRule::Label));
        match spec.principal() {
            Err(err) => errors.push(FieldError::invalid(
                "spec.principal",
                &spec.principal,
                err.to_string(),
            )),
            Ok(principal) if principal.entity_kind() != spec.operation.entity_kind() => errors
                .push(FieldError::invalid(
                    "spec.operation",
                    spec.operation.as_str(),
                    format!("does not apply to principal {:?}", spec.principal),
                )),
            Ok(_) => {}
        }
        errors.extend(validate_role_name("spec.role", &spec.role));
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;

    #[test]
    fn parses_principals() {
        assert_eq!(Principal::parse("sandbox"), Ok(Principal::Sandbox));
        assert_eq!(Principal::parse("component:*"), Ok(Principal::AnyComponent));
        assert_eq!(
            Principal::parse("component:web"),
            Ok(Principal::Component("web".into()))
        );
        assert_eq!(
            Principal::parse("action:migrate"),
            Ok(Principal::Action("migrate".into()))
        );
        for bad in [
            "",
            "sandbox:x",
            "component:",
            "action:*",
            "job:x",
            "component:Web",
        ] {
            assert_eq!(Principal::parse(bad), Err(PrincipalError), "{bad}");
        }
    }

    #[test]
    fn principals_match_entities() {
        let web = EntityRef {
            kind: EntityKind::Component,
            name: "web".into(),
        };
        assert!(Principal::AnyComponent.matches(&web));
        assert!(Principal::Component("web".into()).matches(&web));
        assert!(!Principal::Component("db".into()).matches(&web));
        assert!(!Principal::Action("web".into()).matches(&web));
        assert!(!Principal::AnyComponent.is_specific());
    }

    fn rule(principal: &str, operation: Operation) -> OperationRole {
        OperationRole::new(
            "teardown",
            OperationRoleSpec {
                app: "shopfront".into(),
                principal: principal.into(),
                operation,
                role: "{{ install.id }}-deprovision".into(),
            },
        )
    }

    #[test]
    fn validates_principal_and_operation() {
        assert_eq!(rule("component:*", Operation::Teardown).validate(), vec![]);
        let errors = rule("components:*", Operation::Teardown).validate();
        assert_eq!(errors[0].field, "spec.principal");
        let errors = rule("sandbox", Operation::Deploy).validate();
        assert_eq!(errors.len(), 1);
        assert_eq!(
            (errors[0].field.as_str(), errors[0].kind),
            ("spec.operation", FieldErrorKind::Invalid)
        );
    }
}
