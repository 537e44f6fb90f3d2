//! Outpost's controllers: independent reconcilers, one concern each, built on
//! `kube::runtime::Controller` against Outpost's API server, and the pure logic they
//! share (templates, the role precedence chain, app validation, install stacks).
//!
//! The design (each controller, the Plan lifecycle, rollouts): `docs/ARCHITECTURE.md`.

pub mod app_cache;
pub mod app_check;
pub mod app_controller;
pub mod app_objects;
pub mod cron;
pub mod drift_controller;
pub mod graph;
pub mod install_controller;
pub mod install_stack;
pub mod install_stack_controller;
pub mod kubernetes_secrets;
pub mod leader;
pub mod maintenance;
pub mod plan_gate;
pub mod plan_index;
pub mod plan_policies;
pub mod reference;
pub mod role_chain;
pub mod rollout_controller;
pub mod rollout_waves;
pub mod run;
pub mod template;

pub use app_check::{Problem, check_app, release_hash};

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
pub use app_objects::AppObjects;
pub use graph::{ComponentGraph, Cycle};
pub use role_chain::{RoleError, resolve_role};
pub use template::{InstallOutputs, Reference, TemplateContext, TemplateError, references};
