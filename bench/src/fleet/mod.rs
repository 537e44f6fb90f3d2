//! `outpost bench fleet`: the control plane at fleet scale, on each store.
//!
//! For each backend: `outpost server` and `outpost controllers` as child processes; the
//! App ([`fixture`]); N Installs; one simulated runner per install ([`runners`]), each
//! with its own token, connections and watch. Then three measured phases:
//!
//! 1. **admission**: the Installs are created, their runners connect, and the fleet is
//!    provisioned and deployed until every install is Active;
//! 2. **one-component rollout**: a release that changes one component (a leaf, so one
//!    Plan per install): how long until every install's Plan is created, gated and seen
//!    by its runner, and until every install reports the release; the store writes the
//!    API server made meanwhile, per Plan;
//! 3. **dispatch**: with every runner watching, Plans awaiting approval are approved
//!    one at a time; the time from sending an approval to the runner's watch bringing
//!    it, and to the approval's write being answered (the store's commit included: on
//!    etcd, its round trip and fsync), the part of it before any watch.
//!
//! Raw etcd create-if-absent transactions per second are measured in the same run (first),
//! as the baseline of the store write rate. Each store's figures go to standard error as
//! soon as its phases end, and every store's to standard output at the end.

mod control_plane;
mod fixture;
mod phases;
mod report;
mod runners;

use std::time::Duration;

pub use control_plane::Backend;
pub use report::FleetReport;

/// What to measure.
pub struct FleetBench {
    /// Installs (and simulated runners).
    pub installs: usize,
    /// Components of the App.
    pub components: usize,
    /// The stores to run on, in order.
    pub backends: Vec<Backend>,
    /// Approvals whose dispatch latency is measured.
    pub dispatch_samples: usize,
    /// Time between two approvals of the dispatch phase.
    pub dispatch_gap: Duration,
    /// Give up on a phase after this long.
    pub timeout: Duration,
    /// Where the server's and controllers' logs go (a temporary directory otherwise).
    pub logs: Option<std::path::PathBuf>,
    /// This process's open-files limit, as the caller raised it (the server, a child,
    /// inherits it).
    pub open_files: u64,
}

impl FleetBench {
    /// Measures the raw etcd baseline, then runs every backend.
    pub async fn run(&self) -> anyhow::Result<FleetReport> {
        anyhow::ensure!(self.installs > 0, "--installs must be at least 1");
        anyhow::ensure!(self.components > 0, "--components must be at least 1");
        let open_files = self.open_files;
        // Each runner holds one connection (HTTP/2: its watch and its calls), and the
        // server (a child, with the same limit) its other end.
        let needed = self.installs as u64 + 1_024;
        anyhow::ensure!(
            open_files >= needed,
            "{} installs need about {needed} open files, but the limit is {open_files}: \
             raise it (ulimit -n) or run as a user that may",
            self.installs
        );
        // The baseline first, so each store's figures can be printed as soon as that
        // store is done: a later store that fails (at 10,000 installs, after half an
        // hour) does not take the earlier one's figures with it.
        eprintln!("== raw etcd create transactions");
        let raw = crate::store::raw_etcd_create_txns(&[], 10_000, 64, 1024).await?;
        let mut report = FleetReport {
            installs: self.installs,
            components: self.components,
            backends: Vec::new(),
            raw_etcd_txn_per_second: raw,
        };
        for backend in &self.backends {
            eprintln!("== {} store", backend.name());
            let figures = phases::run_on(self, *backend).await?;
            eprint!(
                "{}",
                FleetReport {
                    backends: vec![figures.clone()],
                    ..report.clone()
                }
            );
            report.backends.push(figures);
        }
        Ok(report)
    }
}
