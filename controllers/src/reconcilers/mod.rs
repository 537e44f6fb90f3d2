//! The reconcilers: each `*_controller` module runs one `kube::runtime::Controller`
//! (its `run` loop, `reconcile` and error policy) over one kind; [`run`] starts them all
//! under [`leader`] election. They read the [`caches`](crate::caches), decide with the
//! [`logic`](crate::logic) and write through the API server. None uses another.

pub mod app_controller;
pub mod drift_controller;
pub mod install_controller;
pub mod install_stack_controller;
pub mod leader;
pub mod plan_gate;
pub mod rollout_controller;
pub mod run;
