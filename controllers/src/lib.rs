//! Outpost's controllers: independent reconcilers, one concern each, built on
//! `kube::runtime::Controller` against Outpost's API server, and the pure logic they
//! use. The crate is laid out so the two read apart (the design of each controller,
//! the Plan lifecycle and rollouts: `docs/ARCHITECTURE.md`, section Controllers):
//!
//! * [`reconcilers`]: the `*_controller` modules (each a `run` loop and its
//!   `reconcile`), the gate, the run loop starting them all and leader election. These
//!   talk to the API server. No reconciler uses another.
//! * [`caches`]: the in-memory views the reconcilers read (App releases, Plans and
//!   DriftReports by install), each kept by a watch.
//! * [`logic`]: pure functions and types: templates, the role precedence chain, App
//!   checks, the component graph, rollout waves, plan policies, the gate's decision,
//!   drift, maintenance windows, cron, install stack rendering. No API calls; unit
//!   tested on values.
//!
//! Dependencies point one way: `reconcilers` → `caches` → `logic`, and `logic` never
//! names `reconcilers` or `caches` (`controllers/tests/module_cycles.rs` checks it).
//! Shared names (labels, finalizers, condition types) come from `outpost_api`.

pub mod caches;
pub mod logic;
pub mod reconcilers;

pub use logic::app_check::{Problem, check_app, release_hash};
pub use logic::app_objects::AppObjects;
pub use logic::graph::{ComponentGraph, Cycle};
pub use logic::role_chain::{RoleError, resolve_role};
pub use logic::template::{InstallOutputs, Reference, TemplateContext, TemplateError, references};
// The paths other crates use.
pub use logic::{install_stack, template};
pub use reconcilers::{leader, run};

/// Reconciles one controller runs at once. Unbounded, a release rolled out to
/// thousands of installs opens thousands of requests to the API server at once, which
/// then fail and back off; bounded, they queue and each finishes quickly.
pub const CONCURRENCY: u16 = 32;

/// How every controller watches: lists stream as watch events from the API server's
/// cache (`sendInitialEvents`, Kubernetes' WatchList) rather than arriving in pages of
/// 500, the later ones read from the store; a fleet has hundreds of thousands of Plans.
pub fn watch_config() -> kube_client::runtime::watcher::Config {
    kube_client::runtime::watcher::Config::default().streaming_lists()
}

/// The settings every controller runs with.
pub fn controller_config() -> kube_client::runtime::controller::Config {
    kube_client::runtime::controller::Config::default().concurrency(CONCURRENCY)
}
