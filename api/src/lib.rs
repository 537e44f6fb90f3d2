//! Outpost resource kinds (`outpost.dev/v1alpha1`), their validation and
//! defaults, and the value types they share.
//!
//! Every kind is a namespaced Kubernetes-style resource derived with
//! [`kube::CustomResource`]; [`crds`] returns their definitions, from which the
//! API server registers them. Every kind implements [`Validate`].
//! How role names, templates and defaults work is described in the crate's
//! `README.md`.

// clippy reads the repeated `type_ = ...` inside `#[kube(printcolumn(...))]`
// as duplicated attributes; they are separate columns.
#![allow(clippy::duplicated_attributes)]

pub mod action;
pub mod annotations;
pub mod app;
pub mod audit_anchor;
pub mod audit_chain;
pub mod audit_event;
pub mod chart_source;
pub mod component;
pub mod condition;
pub mod crd;
pub mod customer_input;
pub mod drift;
pub mod drift_report;
pub mod finalizers;
pub mod input;
pub mod input_value;
pub mod install;
pub mod install_stack;
pub mod labels;
pub mod lean;
pub mod operation;
pub mod operation_role;
pub mod party;
pub mod plan;
pub mod plan_lifecycle;
pub mod policy;
pub mod registry_auth;
pub mod role;
pub mod rollout;
pub mod runner;
pub mod template;
mod wire;

// Kind-free machinery, in its own crate so the generic API server needs no Outpost kind.
pub use outpost_meta::{fence, hash, secret_file, validation};

pub use action::{Action, ActionSpec, Step, Trigger, TriggerKind};
pub use app::{App, AppSpec, AppStatus, RunnerSettings, Sandbox, SandboxType};
pub use audit_event::{AuditEvent, AuditEventSpec, AuditEventType};
pub use component::{
    CloudFormationSource, ClusterAccess, Component, ComponentSpec, ComponentStatus, ComponentType,
    HelmSource, ImageSource, JobSource, ManifestSource, TerraformSource,
};
pub use crd::{API_VERSION, GROUP, VERSION, crds};
pub use drift::{DriftRemediation, DriftSettings, DriftState};
pub use drift_report::{DiffEntry, DiffOp, DriftReport, DriftReportSpec};
pub use hash::{content_hash, is_content_hash};
pub use input::{InputGroup, InputSpec, InputType, KubernetesSecretTarget, SecretSpec};
pub use install::{
    ApprovalMode, CloudAccount, CloudProvider, ComponentPhase, ComponentState, Install,
    InstallPhase, InstallSpec, InstallStatus, MaintenanceWindow, PlanRequest, RunnerHealth,
    Weekday,
};
pub use install_stack::{InstallStack, InstallStackSpec, InstallStackStatus};
pub use lean::Lean;
pub use operation::{EntityKind, EntityRef, Operation};
pub use operation_role::{OperationRole, OperationRoleSpec, Principal, PrincipalError};
pub use party::Party;
pub use plan::{Approval, Plan, PlanPhase, PlanSpec, PlanStatus, ResolvedRole, RoleLevel, Verdict};
pub use plan_lifecycle::{
    APPROVERS, ApprovalDecision, ApprovalRequest, ChangeAction, FieldChange, PlanDiff,
    ResourceChange,
};
pub use policy::{Enforcement, Policy, PolicyInput, PolicySpec, PolicyStatus};
pub use registry_auth::RegistryAuth;
pub use role::{InlinePolicy, Permissions, PermissionsBoundary, RoleSpec, RoleType};
pub use rollout::{
    Halt, InstallProgress, InstallProgressState, Rollout, RolloutPhase, RolloutSpec, RolloutStatus,
    WaveStatus,
};
pub use runner::{Runner, RunnerSpec, RunnerStatus};
pub use validation::{FieldError, FieldErrorKind, Validate};
