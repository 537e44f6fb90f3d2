//! Operations a Plan performs, and the entities they apply to.

use crate::role::RoleType;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One lifecycle operation on one entity of an install.
#[derive(
    Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Create the sandbox (the install's base infrastructure).
    Provision,
    /// Re-apply the sandbox after a change.
    Reprovision,
    /// Destroy the sandbox.
    Deprovision,
    /// Deploy or update a component.
    Deploy,
    /// Remove a component.
    Teardown,
    /// Run an action.
    Trigger,
}

impl Operation {
    /// Every operation, in lifecycle order.
    pub const ALL: [Operation; 6] = [
        Self::Provision,
        Self::Reprovision,
        Self::Deprovision,
        Self::Deploy,
        Self::Teardown,
        Self::Trigger,
    ];

    /// The wire name (`provision`, `deploy`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provision => "provision",
            Self::Reprovision => "reprovision",
            Self::Deprovision => "deprovision",
            Self::Deploy => "deploy",
            Self::Teardown => "teardown",
            Self::Trigger => "trigger",
        }
    }

    /// Every wire name, for `NotSupported` errors.
    pub fn names() -> [&'static str; 6] {
        Self::ALL.map(Self::as_str)
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == text)
    }

    /// The role type used when nothing earlier in the precedence chain chose a
    /// role: `provision` for provision and reprovision, `deprovision` for
    /// deprovision, `maintenance` for deploy, teardown and trigger.
    pub fn default_role_type(self) -> RoleType {
        match self {
            Self::Provision | Self::Reprovision => RoleType::Provision,
            Self::Deprovision => RoleType::Deprovision,
            Self::Deploy | Self::Teardown | Self::Trigger => RoleType::Maintenance,
        }
    }

    /// The kind of entity this operation applies to: sandbox operations to the
    /// sandbox, deploy/teardown to components, trigger to actions.
    pub fn entity_kind(self) -> EntityKind {
        match self {
            Self::Provision | Self::Reprovision | Self::Deprovision => EntityKind::Sandbox,
            Self::Deploy | Self::Teardown => EntityKind::Component,
            Self::Trigger => EntityKind::Action,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of entity of an install an operation applies to.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum EntityKind {
    /// The App's sandbox.
    Sandbox,
    /// A Component of the App.
    Component,
    /// An Action of the App.
    Action,
}

/// One entity of an install: the sandbox, a component or an action.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct EntityRef {
    /// What the entity is.
    pub kind: EntityKind,
    /// The Component or Action name; `sandbox` for the sandbox.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_role_types() {
        assert_eq!(
            Operation::Provision.default_role_type(),
            RoleType::Provision
        );
        assert_eq!(
            Operation::Reprovision.default_role_type(),
            RoleType::Provision
        );
        assert_eq!(
            Operation::Deprovision.default_role_type(),
            RoleType::Deprovision
        );
        for op in [Operation::Deploy, Operation::Teardown, Operation::Trigger] {
            assert_eq!(op.default_role_type(), RoleType::Maintenance);
        }
    }

    #[test]
    fn parses_wire_names() {
        for op in Operation::ALL {
            assert_eq!(Operation::parse(op.as_str()), Some(op));
            assert_eq!(serde_json::to_value(op).unwrap(), op.as_str());
        }
        assert_eq!(Operation::parse("Deploy"), None);
    }
}
