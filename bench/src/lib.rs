//! Outpost's benchmarks, which `outpost bench ...` runs (the command line is the CLI's,
//! `cli/src/bench.rs`). Each prints ratios against a baseline measured in the same run,
//! because the machines are shared and noisy.
//!
//! * [`store`]: both store backends against raw `etcd-client` puts;
//! * [`api`]: the API server through real HTTP, next to its store and raw etcd;
//! * [`controllers`]: the controllers rolling a release out to many installs;
//! * [`fleet`]: the control plane as child processes with a simulated runner per install;
//! * [`runner`] and [`runner_footprint`]: the real `outpost-runner`'s dispatch latency,
//!   size and memory.
//!
//! The throwaway etcd they start is `outpost-testing`'s; nothing here ships in the
//! API server or the runner.

pub mod api;
pub mod controllers;
pub mod fleet;
pub mod runner;
pub mod runner_footprint;
pub mod store;
