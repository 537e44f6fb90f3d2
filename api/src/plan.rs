//! `Plan`: one operation on one entity of one install. The spec is
//! immutable once created: approvals and verdicts bind to its content hash,
//! so a change means a new Plan.

use crate::operation::{EntityKind, EntityRef, Operation};
use crate::plan_lifecycle::{ApprovalDecision, PlanDiff};
use crate::policy::Enforcement;
use crate::role::validate_role_name;
use crate::validation::{FieldError, NameRule, Validate, validate_name, validate_object_name};
use crate::wire::{any_value, any_value_map};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Spec of a `Plan`.
///
/// # Warning
/// The spec is immutable once created; the API server rejects updates to it.
/// Only the status changes as the Plan moves through its lifecycle.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Plan",
    namespaced,
    status = "PlanStatus",
    derive = "PartialEq",
    shortname = "pl",
    category = "outpost",
    selectable = ".spec.install",
    selectable = ".spec.operation",
    selectable = ".status.phase",
    doc = "One operation on one entity of an install. The spec is immutable.",
    printcolumn(name = "Install", type_ = "string", json_path = ".spec.install"),
    printcolumn(name = "Operation", type_ = "string", json_path = ".spec.operation"),
    printcolumn(name = "Entity", type_ = "string", json_path = ".spec.entity.name"),
    printcolumn(name = "Role", type_ = "string", json_path = ".status.role.name"),
    printcolumn(name = "Level", type_ = "string", json_path = ".status.role.level"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Changes", type_ = "string", json_path = ".status.diff.short"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpec {
    /// Name of the Install.
    pub install: String,
    /// What to do.
    pub operation: Operation,
    /// What to do it to.
    pub entity: EntityRef,
    /// Why the Plan was made (release change, drift, manual trigger, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// App release (content hash) the desired state was rendered from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Runtime role override (`outpost trigger --role`), step 1 of the
    /// precedence chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_override: Option<String>,
    /// The rendered desired state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub desired_state: Option<Value>,
    /// `content_hash` of `desiredState`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Revision of the live state the Plan was computed against; the runner
    /// refuses a Plan whose base moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_revision: Option<String>,
}

/// Status of a `Plan`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// Where the Plan is in its lifecycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PlanPhase>,
    /// The resolved role and what chose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ResolvedRole>,
    /// Policy results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
    /// The real change the runner computed against live state (terraform plan,
    /// Kubernetes dry-run), bounded and secret-free; approvals bind to its `hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<PlanDiff>,
    /// The decision of a person (`plans/NAME/approval`), bound to the content hash and
    /// the diff hash. Written only by the API server, never through `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// Runner that claimed the Plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// When execution started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When execution finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Human-readable reason for the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Machine-readable reason for the phase, e.g. `NoChanges` (a Succeeded Plan whose
    /// diff was empty: nothing was applied) or `Replanned` (live state moved after
    /// approval; the Plan asks again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Outputs of the applied entity (Terraform outputs, stack outputs, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "any_value_map")]
    pub outputs: BTreeMap<String, Value>,
    /// What the executor printed while applying (job and action steps: stdout and stderr
    /// interleaved, per step; terraform: `apply`'s output), the last 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Lifecycle phase of a Plan; the transitions and who may make each are in
/// [`crate::plan_lifecycle`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum PlanPhase {
    /// Made, not yet looked at by the gate.
    Pending,
    /// Refused by the gate (role chain, vendor policy on the rendered state), by a
    /// person, or by the runner's policies on the real diff. Terminal.
    Denied,
    /// Passed the gate; waiting for the install's runner.
    Ready,
    /// A runner holds it (fenced by resourceVersion).
    Claimed,
    /// The runner computes the real diff against live state.
    Planning,
    /// The runner has posted the real diff (`status.diff`).
    Planned,
    /// The diff waits for a person's decision (`plans/NAME/approval`).
    AwaitingApproval,
    /// A person approved exactly `status.diff.hash`; waiting for the runner to apply.
    Approved,
    /// The runner applies the saved artefact.
    Applying,
    /// Applied (or nothing to apply: reason `NoChanges`). Terminal.
    Succeeded,
    /// Failed while planning or applying. Terminal.
    Failed,
}

impl PlanPhase {
    /// The phases a Plan never leaves.
    pub const TERMINAL: [PlanPhase; 3] = [Self::Denied, Self::Succeeded, Self::Failed];

    /// Whether the Plan will not move any more.
    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }
}

/// The role a Plan runs with.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRole {
    /// Role name (rendered).
    pub name: String,
    /// The step of the precedence chain that chose it.
    pub level: RoleLevel,
    /// What chose it, e.g. `OperationRole/teardown-components` or
    /// `Component/web operationRoles.deploy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// Steps of the role precedence chain, first match wins.
#[derive(
    Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum RoleLevel {
    /// Runtime override.
    Override,
    /// An action's deprecated `breakGlassRole`.
    BreakGlass,
    /// The entity's own role.
    Entity,
    /// An `OperationRole` matrix rule.
    Matrix,
    /// The App's role of the operation's default role type.
    Default,
}

/// The result of one policy on a Plan.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Policy name.
    pub policy: String,
    /// The policy's enforcement.
    pub enforcement: Enforcement,
    /// Whether the policy denied the Plan (only with `deny` enforcement).
    pub denied: bool,
    /// Whether the policy asks a person to approve the Plan (an `approve` enforcement
    /// whose `deny` rule fired).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval_required: bool,
    /// Whether the verdict is a customer-local policy's, evaluated by the runner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
    /// The policy's `deny`/`warn` messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
}

/// A person's decision on a Plan's real diff, recorded by the API server from the
/// authenticated user of the `plans/NAME/approval` request and its own clock.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// Approve or deny.
    #[serde(default)]
    pub decision: ApprovalDecision,
    /// Who decided: the authenticated user's name.
    pub by: String,
    /// When (the API server's clock).
    pub at: Time,
    /// Content hash of the spec decided on; the approval is void if it differs.
    pub content_hash: String,
    /// The diff decided on (`status.diff.hash`); the runner applies only this diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_hash: Option<String>,
    /// Why, as the person said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Validate for Plan {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        errors.extend(validate_name(
            "spec.install",
            &spec.install,
            NameRule::Label,
        ));
        let expected = spec.operation.entity_kind();
        if spec.entity.kind != expected {
            errors.push(FieldError::invalid(
                "spec.entity.kind",
                serde_json::to_value(spec.entity.kind)
                    .unwrap_or_default()
                    .to_string(),
                format!(
                    "operation {} applies to {}",
                    spec.operation,
                    serde_json::to_value(expected).unwrap_or_default()
                ),
            ));
        }
        if spec.entity.kind == EntityKind::Sandbox {
            if spec.entity.name != "sandbox" {
                errors.push(FieldError::invalid(
                    "spec.entity.name",
                    &spec.entity.name,
                    "must be \"sandbox\" for the sandbox",
                ));
            }
        } else {
            errors.extend(validate_name(
                "spec.entity.name",
                &spec.entity.name,
                NameRule::Label,
            ));
        }
        if let Some(role) = &spec.role_override {
            errors.extend(validate_role_name("spec.roleOverride", role));
        }
        for (field, value) in [
            ("spec.contentHash", &spec.content_hash),
            ("spec.release", &spec.release),
        ] {
            if let Some(hash) = value
                && !crate::is_content_hash(hash)
            {
                errors.push(FieldError::invalid(
                    field,
                    hash,
                    "must be sha256:<64 hex digits>",
                ));
            }
        }
        if let (Some(state), Some(hash)) = (&spec.desired_state, &spec.content_hash)
            && crate::is_content_hash(hash)
            && crate::content_hash(state) != *hash
        {
            errors.push(FieldError::invalid(
                "spec.contentHash",
                hash,
                "does not match spec.desiredState",
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;
    use serde_json::json;

    /// Every phase a Plan can have, read off its schema (variants with docs are a
    /// `oneOf` of `const`s, others an `enum`).
    fn every_phase() -> Vec<PlanPhase> {
        fn names(schema: &Value, out: &mut Vec<String>) {
            match schema {
                Value::Object(map) => {
                    for (key, value) in map {
                        match (key.as_str(), value) {
                            ("const", Value::String(name)) => out.push(name.clone()),
                            ("enum", Value::Array(items)) => out
                                .extend(items.iter().filter_map(|i| i.as_str().map(str::to_owned))),
                            _ => names(value, out),
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|i| names(i, out)),
                _ => {}
            }
        }
        let schema = serde_json::to_value(schemars::schema_for!(PlanPhase)).unwrap();
        let mut found = Vec::new();
        names(&schema, &mut found);
        found
            .iter()
            .map(|name| serde_json::from_value(json!(name)).unwrap())
            .collect()
    }

    /// `TERMINAL` (which the watch cache holds compressed) is exactly the phases nothing
    /// moves a Plan out of: no status write, no decision.
    #[test]
    fn terminal_phases_are_those_no_writer_leaves() {
        use crate::plan_lifecycle::{Writer, allowed};
        let every = every_phase();
        assert_eq!(every.len(), 11, "{every:?}");
        for from in &every {
            // A person's decision (the approval subresource, not a status move) moves
            // a Plan awaiting approval.
            let decided = *from == PlanPhase::AwaitingApproval;
            let leaves = decided
                || every.iter().any(|to| {
                    to != from
                        && [Writer::Runner, Writer::Operator]
                            .into_iter()
                            .any(|writer| allowed(writer, Some(*from), *to).is_ok())
                });
            assert_eq!(from.is_terminal(), !leaves, "{from:?}");
            assert_eq!(
                from.is_terminal(),
                PlanPhase::TERMINAL.contains(from),
                "{from:?}"
            );
        }
    }

    fn plan(operation: Operation, kind: EntityKind, name: &str) -> Plan {
        let state = json!({"kind": "Deployment"});
        Plan::new(
            "acme-deploy-web-1",
            PlanSpec {
                install: "acme".into(),
                operation,
                entity: EntityRef {
                    kind,
                    name: name.into(),
                },
                reason: None,
                release: None,
                role_override: None,
                content_hash: Some(crate::content_hash(&state)),
                desired_state: Some(state),
                base_revision: None,
            },
        )
    }

    fn errors(p: &Plan) -> Vec<(String, FieldErrorKind)> {
        p.validate()
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    #[test]
    fn consistent_plans_are_valid() {
        assert_eq!(
            errors(&plan(Operation::Deploy, EntityKind::Component, "web")),
            []
        );
        assert_eq!(
            errors(&plan(Operation::Trigger, EntityKind::Action, "migrate")),
            []
        );
        assert_eq!(
            errors(&plan(
                Operation::Reprovision,
                EntityKind::Sandbox,
                "sandbox"
            )),
            []
        );
    }

    #[test]
    fn operation_must_apply_to_entity_kind() {
        let p = plan(Operation::Deploy, EntityKind::Action, "migrate");
        assert_eq!(
            errors(&p),
            [("spec.entity.kind".into(), FieldErrorKind::Invalid)]
        );
        let p = plan(Operation::Provision, EntityKind::Sandbox, "web");
        assert_eq!(
            errors(&p),
            [("spec.entity.name".into(), FieldErrorKind::Invalid)]
        );
    }

    #[test]
    fn content_hash_must_match_desired_state() {
        let mut p = plan(Operation::Deploy, EntityKind::Component, "web");
        p.spec.desired_state = Some(json!({"kind": "Service"}));
        assert_eq!(
            errors(&p),
            [("spec.contentHash".into(), FieldErrorKind::Invalid)]
        );
        p.spec.content_hash = Some("abc".into());
        assert_eq!(
            errors(&p),
            [("spec.contentHash".into(), FieldErrorKind::Invalid)]
        );
    }

    #[test]
    fn role_levels_order_like_the_chain() {
        assert!(RoleLevel::Override < RoleLevel::BreakGlass);
        assert!(RoleLevel::Matrix < RoleLevel::Default);
        assert_eq!(
            serde_json::to_value(RoleLevel::BreakGlass).unwrap(),
            json!("break_glass")
        );
        assert!(PlanPhase::Denied.is_terminal() && !PlanPhase::Claimed.is_terminal());
    }
}
