//! Outpost's runner: one process per install, on the customer's VM, outside any cluster.
//!
//! It listens on no port. It dials the control plane, watches its install's Plans,
//! claims each approved Plan exactly once, computes the real diff with an
//! [`executor::Executor`], evaluates the customer's local policies on it, applies,
//! reports outputs, watches for drift and signs an audit log of every step.
//!
//! The runner never depends on the apiserver crate: it is a plain Kubernetes client.
//! How it recovers after a crash is described in `RECOVERY.md`; where it sits in the
//! design, in `docs/ARCHITECTURE.md`.

pub mod anchor;
pub mod audit;
pub mod aws;
pub mod claim;
pub mod customer_inputs;
pub mod drift;
pub mod eks;
pub mod example_image;
pub mod execute;
pub mod executor;
pub mod executors;
pub mod failover;
pub mod identity;
pub mod journal;
pub mod local_policy;
pub mod mask;
pub mod plan_diff;
pub mod report;
pub mod retry;
pub mod rotation;
pub mod secrets;
pub mod session;
pub mod settings;
pub mod stack_report;
pub mod token;
pub mod work_dirs;
pub mod worker;

pub use audit::{AuditLog, Failure, Source, verify};
pub use executors::Executors;
pub use identity::Identity;
pub use journal::{Journal, Stage};
pub use secrets::{DirectorySecrets, SecretSource};
pub use session::run;
pub use settings::RunnerArgs;
