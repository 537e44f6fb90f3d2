//! Outpost's runner: one process per install, on the customer's VM, outside any cluster.
//!
//! It listens on no port. It dials the control plane, watches its install's Plans,
//! claims each approved Plan exactly once, computes the real diff with an
//! [`executor::Executor`], evaluates the customer's local policies on it, applies,
//! reports outputs, watches for drift and signs an audit log of every step.
//!
//! The runner never depends on the apiserver crate: it is a plain Kubernetes client.

pub mod executor;
pub mod local_policy;
