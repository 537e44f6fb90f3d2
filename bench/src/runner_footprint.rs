//! `outpost bench runner-footprint`: the `outpost-runner` binary's stripped size and the
//! idle memory of a registered runner, against the goals (≤ 25 MiB stripped, ≤ 20 MiB
//! idle RSS), with `outpost runner` (the whole `outpost` binary) measured alongside.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;

use crate::runner::{BenchPlane, sibling_binary};

const MIB: f64 = 1024.0 * 1024.0;
/// Goal for the stripped `outpost-runner` binary.
const SIZE_GOAL_MIB: f64 = 25.0;
/// Goal for a registered, idle runner's resident memory.
const RSS_GOAL_MIB: f64 = 20.0;

/// What to measure.
pub struct RunnerFootprint {
    /// How long each runner idles after registering before its memory is read.
    pub idle: Duration,
}

/// One runner process's memory.
#[derive(Clone, Debug)]
pub struct Memory {
    /// The command measured.
    pub command: String,
    /// `VmRSS`, bytes.
    pub rss: u64,
    /// `VmHWM` (peak RSS), bytes.
    pub peak: u64,
}

/// The benchmark's result.
#[derive(Clone, Debug)]
pub struct FootprintReport {
    /// The binary measured.
    pub binary: PathBuf,
    /// Its size as built, bytes.
    pub built: u64,
    /// Its size after `strip`, bytes; `Err` says why it could not be stripped.
    pub stripped: Result<u64, String>,
    /// The `outpost` binary's size as built, bytes, for comparison.
    pub outpost: u64,
    /// How long the runners idled.
    pub idle: Duration,
    /// `outpost-runner`, then `outpost runner`.
    pub memory: Vec<Memory>,
}

impl fmt::Display for FootprintReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: u64| bytes as f64 / MIB;
        writeln!(f, "binary {}", self.binary.display())?;
        writeln!(f, "  as built:  {:>7.2} MiB", mib(self.built))?;
        match &self.stripped {
            Ok(size) => writeln!(
                f,
                "  stripped:  {:>7.2} MiB   goal <= {SIZE_GOAL_MIB} MiB: ratio {:.2}",
                mib(*size),
                mib(*size) / SIZE_GOAL_MIB
            )?,
            Err(why) => writeln!(f, "  stripped:  not measured ({why})")?,
        }
        writeln!(
            f,
            "  outpost (control plane and CLI), as built: {:.2} MiB; outpost-runner is {:.2} of it",
            mib(self.outpost),
            self.built as f64 / self.outpost.max(1) as f64
        )?;
        writeln!(
            f,
            "idle memory after registering and {:?} idle (/proc/PID/status):",
            self.idle
        )?;
        for m in &self.memory {
            writeln!(
                f,
                "  {:<16} VmRSS {:>7.2} MiB (peak {:>6.2} MiB)   goal <= {RSS_GOAL_MIB} MiB: ratio {:.2}",
                m.command,
                mib(m.rss),
                mib(m.peak),
                mib(m.rss) / RSS_GOAL_MIB
            )?;
        }
        Ok(())
    }
}

impl RunnerFootprint {
    /// Runs the benchmark.
    pub async fn run(&self) -> anyhow::Result<FootprintReport> {
        let binary = sibling_binary("outpost-runner")?;
        let outpost = std::env::current_exe().context("cannot locate the running executable")?;
        let built = std::fs::metadata(&binary)?.len();
        let scratch = tempfile::tempdir()?;
        let stripped = strip_copy(&binary, scratch.path());

        // One install per runner: each registers its own Runner and audit log.
        let plane = BenchPlane::start(&["bare", "whole"]).await?;
        let mut memory = Vec::new();
        let mut bare = Command::new(&binary);
        bare.arg("--heartbeat-seconds").arg("10");
        let mut whole = Command::new(&outpost);
        whole.arg("runner").arg("--heartbeat-seconds").arg("10");
        for (label, command, install) in [
            ("outpost-runner", bare, "bare"),
            ("outpost runner", whole, "whole"),
        ] {
            let mut runner = plane.spawn_runner(command, install)?;
            plane.registered(install, Duration::from_secs(30)).await?;
            tokio::time::sleep(self.idle).await;
            runner.check_alive()?;
            let (rss, peak) = memory_of(runner.id())?;
            memory.push(Memory {
                command: label.to_owned(),
                rss,
                peak,
            });
            drop(runner);
        }
        Ok(FootprintReport {
            binary,
            built,
            stripped,
            outpost: std::fs::metadata(&outpost)?.len(),
            idle: self.idle,
            memory,
        })
    }
}

/// Copies `binary` into `dir`, runs `strip` on the copy and returns its size.
fn strip_copy(binary: &Path, dir: &Path) -> Result<u64, String> {
    let copy = dir.join("outpost-runner");
    std::fs::copy(binary, &copy).map_err(|e| format!("cannot copy it: {e}"))?;
    let output = Command::new("strip")
        .arg(&copy)
        .output()
        .map_err(|e| format!("cannot run strip: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "strip failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    std::fs::metadata(&copy)
        .map(|m| m.len())
        .map_err(|e| e.to_string())
}

/// `VmRSS` and `VmHWM` of process `pid`, in bytes.
fn memory_of(pid: u32) -> anyhow::Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("{path} has no {name}"))?;
        let kib: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{path}: {name}{line}"))?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
