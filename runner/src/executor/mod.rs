//! Executors: one module per component type, one trait, and the registry of those a
//! runner has ([`Executors`]). The Plan run loop that calls them is [`crate::worker`].
//!
//! Errors are typed at the trait ([`ExecutorError`]: moved, refused, timed out, a tool's
//! or a cluster call's failure); inside, each executor keeps its own error types and
//! `anyhow` context, and [`typed`] sorts them at the boundary.
//!
//! An executor turns a Plan's rendered desired state into a [`Diff`] against live
//! state (plan), applies exactly that diff (apply) and reads live state back for
//! drift (observe). Executors never decide *whether* to apply: the runner does,
//! after local policies saw the diff.

pub mod child;
pub mod cloudformation;
pub mod eks_cluster;
mod error;
pub mod helm;
pub mod image;
pub mod job;
pub mod kubernetes;
pub mod secret_ref;
pub mod terraform;

mod registry;

pub use error::{ExecutorError, typed};
pub use registry::{Executors, executor_type};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use outpost_api::{Operation, PolicyInput, ResourceChange};
use serde::{Deserialize, Serialize};
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

/// The real change an executor computed against live state, before apply. Kept in the
/// entity's work dir while a person decides on it (serialised), and applied as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// The changed resources, when the executor lists them itself (Kubernetes: it compared
    /// each dry-run result with the live object); `None`: the runner reads them from
    /// `document` ([`crate::plan_diff`]).
    #[serde(default)]
    pub resources: Option<Vec<ResourceChange>>,
    /// The live state the apply depends on, checked again before an approved diff is
    /// applied (Kubernetes: each object's address and live resourceVersion); part of the
    /// diff's hash. `null` where the executor has nothing to check (terraform checks its
    /// saved plan itself). An object with [`BASIS_ARTEFACT`] names the artefact the diff
    /// was rendered from, by digest (shown as the Plan's `status.diff.source`).
    #[serde(default)]
    pub basis: Value,
}

/// What the executor is about to run vendor code for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Planning the Plan's desired state (laid out in the work dir first).
    Plan,
    /// Observing live state for drift (what the work dir holds, as deployed).
    Observe,
}

/// The key of a [`Diff::basis`] object naming the artefact, pinned by digest, that the
/// diff was rendered from (a `helm_chart` from an OCI registry).
pub const BASIS_ARTEFACT: &str = "artefact";

/// Live state moved since the diff was computed: the approved diff is not applied (nothing
/// was changed), the runner plans again and asks again.
#[derive(Debug, thiserror::Error)]
#[error("live state moved since planning: {0}")]
pub struct Moved(pub String);

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
    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>>;

    /// The static configuration the executor is about to run for `ctx` and `purpose`,
    /// before any vendor code runs: what policies taking the `static` input see. A
    /// terraform module is laid out and read (providers, module calls, resources,
    /// files), and refused if it needs a provider the customer did not allow. `None`
    /// (the default) when the executor runs no vendor code before its diff is checked,
    /// or nothing at all.
    fn configuration<'a>(
        &'a self,
        _ctx: &'a StepContext,
        _purpose: Purpose,
    ) -> BoxFuture<'a, Result<Option<Diff>, ExecutorError>> {
        Box::pin(async { Ok(None) })
    }

    /// Applies exactly what [`Executor::plan`] computed (for terraform: the saved plan).
    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>>;

    /// What is live when the diff has no changes, without changing anything: the outputs
    /// and drift baseline an apply would have produced. The default applies the empty
    /// diff, for executors whose apply of it changes nothing.
    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        self.apply(ctx, diff)
    }

    /// Whether applying a fresh plan after an apply was cut (the runner killed during it)
    /// finishes that apply without doing any of it twice: the plan is computed against
    /// live state, which records what the cut apply did (terraform's state, objects
    /// written by server-side apply, an image already copied). A script's steps have no
    /// such record, so the default is no: an interrupted job fails instead of running
    /// again (`RECOVERY.md`).
    fn resumable(&self) -> bool {
        false
    }

    /// Whether the live state `diff.basis` describes has moved since planning (checked
    /// before an approved diff is applied). The default: nothing to check.
    fn moved<'a>(
        &'a self,
        _ctx: &'a StepContext,
        _diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Option<Moved>, ExecutorError>> {
        Box::pin(async { Ok(None) })
    }

    /// Reads live state for what `last_applied` describes, normalised the same way
    /// (server-managed fields removed), for drift detection.
    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>>;

    /// A stream that yields whenever the live state `last_applied` describes may have
    /// changed, for executors that can watch it (Kubernetes objects), so drift is seen
    /// within seconds; `None` (the default) when drift is found on schedule only.
    fn changes<'a>(
        &'a self,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Option<BoxStream<'static, ()>>, ExecutorError>> {
        Box::pin(async { Ok(None) })
    }
}
