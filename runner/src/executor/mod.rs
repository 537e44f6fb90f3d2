//! Executors: one module per component type, one trait.
//!
//! An executor turns a Plan's rendered desired state into a [`Diff`] against live
//! state (plan), applies exactly that diff (apply) and reads live state back for
//! drift (observe). Executors never decide *whether* to apply: the runner does,
//! after local policies saw the diff.

pub mod child;
pub mod image;
pub mod job;
pub mod kubernetes;
pub mod secret_ref;
pub mod terraform;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use outpost_api::{Operation, PolicyInput};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Everything an executor needs to act on one Plan.
#[derive(Clone, Debug)]
pub struct StepContext {
    /// The Plan's name.
    pub plan: String,
    /// The Plan's uid (also the role session name).
    pub plan_uid: String,
    /// What the Plan does.
    pub operation: Operation,
    /// The entity's name (component, action or `sandbox`).
    pub entity: String,
    /// The Plan's rendered desired state (`spec.desiredState`), with secret references
    /// still unresolved (`${outpost-secret:NAME}`).
    pub desired: Value,
    /// A directory owned by this entity, kept across Plans (terraform working
    /// directory and state, last-applied documents).
    pub work_dir: PathBuf,
    /// Environment for child processes: the resolved role's temporary credentials
    /// and resolved secret values. Never written to disk.
    pub env: BTreeMap<String, String>,
    /// How long the step may take before it is killed.
    pub timeout: Duration,
}

/// The real change an executor computed against live state, before apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// Which kind of policy input `document` is.
    pub input: PolicyInput,
    /// What policies see (Kubernetes: the dry-run objects; terraform: `show -json` of
    /// the saved plan; job: the steps to run).
    pub document: Value,
    /// One line for humans and the audit log, e.g. `1 to add, 0 to change, 0 to destroy`.
    pub summary: String,
    /// Whether applying would change anything.
    pub changes: bool,
}

/// What an apply produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    /// Outputs other components' templates may read (`components.<name>.outputs.*`).
    pub outputs: BTreeMap<String, Value>,
    /// Captured output of the step (bounded), attached to the Plan.
    pub log: String,
    /// What was applied, normalised: the baseline drift compares live state to.
    pub last_applied: Value,
    /// More details for the `apply` audit event (never a secret value: the Kubernetes
    /// executor lists the Secrets it wrote with each value's digest).
    pub audit: serde_json::Map<String, Value>,
}

/// One component type's way of planning, applying and observing.
pub trait Executor: Send + Sync {
    /// Computes the diff of the Plan's desired state against live state. Must not change
    /// live state.
    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, anyhow::Result<Diff>>;

    /// Applies exactly what [`Executor::plan`] computed (for terraform: the saved plan).
    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, anyhow::Result<Applied>>;

    /// Reads live state for what `last_applied` describes, normalised the same way
    /// (server-managed fields removed), for drift detection.
    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, anyhow::Result<Value>>;

    /// A stream that yields whenever the live state `last_applied` describes may have
    /// changed, for executors that can watch it (Kubernetes objects), so drift is seen
    /// within seconds; `None` (the default) when drift is found on schedule only.
    fn changes<'a>(
        &'a self,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, anyhow::Result<Option<BoxStream<'static, ()>>>> {
        Box::pin(async { Ok(None) })
    }
}
