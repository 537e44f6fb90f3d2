//! The end-to-end suite as one test binary: each file beside this one is a module of it
//! (`autotests = false` in Cargo.toml). One binary links once and instantiates the shared
//! generic code once, where thirty binaries did each thirty times; under nextest every
//! test still runs in a process of its own. A new file must be declared here —
//! `every_test_file_is_declared` fails the suite when one is not.

mod api;
mod audit_anchor;
mod audit_anchor_stack;
mod cli;
mod connections;
mod controller;
mod controllers;
mod customer_aws;
mod customer_inputs;
mod dashboard;
mod drift;
mod eks_cluster;
mod etcd_tls;
mod flow;
mod ha;
mod hardening;
mod helm_chart;
mod helm_component;
mod helm_oci;
mod image_sync;
mod install_controller;
mod install_inputs;
mod kubectl;
mod leader;
mod plan_apply;
mod plan_gate;
mod plan_lifecycle;
mod plan_resume;
mod rollout;
mod runner;
mod runner_authz;
mod runner_failover;
mod runner_job;
mod runner_sandbox;
mod server_stop;
mod standin;
mod standin_crds;
mod ui_sessions;

/// A file under `tests/` that is not declared above would be compiled by nothing and its
/// tests would silently never run.
#[test]
fn every_test_file_is_declared() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("tests/main.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tests/") {
        let name = entry.expect("an entry of tests/").file_name();
        let name = name.to_string_lossy();
        if let Some(module) = name.strip_suffix(".rs")
            && module != "main"
            && !main.lines().any(|l| l == format!("mod {module};"))
        {
            missing.push(name.into_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "declare these in e2e/tests/main.rs with `mod NAME;`: {missing:?}"
    );
}
