//! The control plane under test: `outpost server` and `outpost controllers` as child
//! processes of this executable (so each one's memory can be read on its own), on the
//! embedded store or on a throwaway etcd.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use outpost_testing::ThrowawayEtcd;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// Which store the API server runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The embedded store (a redb file), as `outpost up` runs.
    Embedded,
    /// A single-member etcd started for the run.
    Etcd,
}

impl Backend {
    /// `embedded` or `etcd`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::Etcd => "etcd",
        }
    }
}

/// A process's resident memory, from `/proc/PID/status`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// `VmRSS`: resident now, in bytes.
    pub rss: u64,
    /// `VmHWM`: the most it was ever resident, in bytes.
    pub peak: u64,
}

impl Memory {
    fn of(pid: Option<u32>) -> Memory {
        let Some(status) =
            pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        else {
            return Memory::default();
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024)
        };
        Memory {
            rss: field("VmRSS:"),
            peak: field("VmHWM:"),
        }
    }
}

/// CPU time a process used so far (user + system), from `/proc/PID/stat`.
pub fn cpu_time(pid: Option<u32>) -> Duration {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // After the command in parentheses: state is field 3; utime and stime are 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Linux reports in clock ticks of 1/100 s (USER_HZ) on every architecture.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// CPU time used so far by the API server, the controllers and this process (the
/// simulated runners).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTimes {
    /// The API server (with the embedded store, when it runs on it).
    pub apiserver: Duration,
    /// The controllers.
    pub controllers: Duration,
    /// This process: the simulated runners and the bench.
    pub runners: Duration,
    /// The etcd member of the etcd backend (zero on the embedded store, whose work is the
    /// API server's): not in the CPU-per-Plan goal, which counts the three above, and
    /// reported beside it so the two stores compare.
    pub etcd: Duration,
}

impl std::ops::Sub for CpuTimes {
    type Output = CpuTimes;
    fn sub(self, before: CpuTimes) -> CpuTimes {
        CpuTimes {
            apiserver: self.apiserver.saturating_sub(before.apiserver),
            controllers: self.controllers.saturating_sub(before.controllers),
            runners: self.runners.saturating_sub(before.runners),
            etcd: self.etcd.saturating_sub(before.etcd),
        }
    }
}

/// The API server and controllers processes, stopped on drop.
pub struct ControlPlane {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// A token of `outpost:admins`.
    pub admin_token: String,
    /// The etcd of the etcd backend, stopped on drop.
    etcd: Option<ThrowawayEtcd>,
    server: Child,
    controllers: Option<Child>,
    /// Where the processes' logs go.
    logs: std::path::PathBuf,
    backend: Backend,
    _dir: tempfile::TempDir,
}

impl ControlPlane {
    /// Starts `outpost server` on `backend` (plain HTTP on loopback) and waits until it
    /// serves. The controllers are started separately ([`ControlPlane::start_controllers`]).
    /// The processes' logs go to `logs` (`BACKEND-server.log`, ...), or into the run's
    /// temporary directory.
    pub async fn start(backend: Backend, logs: Option<&Path>) -> anyhow::Result<ControlPlane> {
        let dir = tempfile::Builder::new()
            .prefix("outpost-bench-fleet-")
            .tempdir()?;
        let logs = logs.unwrap_or(dir.path()).to_owned();
        std::fs::create_dir_all(&logs)?;
        let admin_token: String = (0..32)
            .map(|_| format!("{:x}", rand::random_range(0..16u8)))
            .collect();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(
            &tokens,
            format!("{admin_token},bench,bench,\"outpost:admins\"\n"),
        )?;
        let (store, etcd) = match backend {
            Backend::Embedded => (
                format!("embedded:{}", dir.path().join("store").display()),
                None,
            ),
            Backend::Etcd => {
                let etcd = ThrowawayEtcd::start().await?;
                (etcd.store(), Some(etcd))
            }
        };
        let mut server = outpost(&logs, &format!("{}-server", backend.name()))
            .args(["server", "--listen", "127.0.0.1:0", "--store", &store])
            .arg("--tokens")
            .arg(&tokens)
            .spawn()
            .context("cannot start outpost server")?;
        let line = first_line_with(&mut server, "serving on ").await?;
        let url = line
            .split("serving on ")
            .nth(1)
            .context("the server did not say where it serves")?
            .trim()
            .to_owned();
        Ok(ControlPlane {
            url,
            admin_token,
            etcd,
            server,
            controllers: None,
            logs,
            backend,
            _dir: dir,
        })
    }

    /// Starts `outpost controllers` against the server and waits until it leads.
    pub async fn start_controllers(&mut self) -> anyhow::Result<()> {
        let name = format!("{}-controllers", self.backend.name());
        let mut controllers = outpost(&self.logs, &name)
            .args([
                "controllers",
                "--server",
                &self.url,
                "--token",
                &self.admin_token,
            ])
            .args([
                "--lease-namespace",
                "bench",
                "--identity",
                "bench-controllers",
            ])
            .args(["--public-url", "https://outpost.bench.invalid"])
            .spawn()
            .context("cannot start outpost controllers")?;
        first_line_with(&mut controllers, "controllers running").await?;
        self.controllers = Some(controllers);
        Ok(())
    }

    /// CPU used so far by each process.
    pub fn cpu(&self) -> CpuTimes {
        CpuTimes {
            apiserver: cpu_time(outpost_pid(&self.server)),
            controllers: cpu_time(self.controllers.as_ref().and_then(outpost_pid)),
            runners: cpu_time(None),
            etcd: self
                .etcd
                .as_ref()
                .map_or(Duration::ZERO, |etcd| cpu_time(Some(etcd.pid()))),
        }
    }

    /// The API server's and the controllers' memory now.
    pub fn memory(&self) -> (Memory, Memory) {
        (
            Memory::of(outpost_pid(&self.server)),
            Memory::of(self.controllers.as_ref().and_then(outpost_pid)),
        )
    }

    /// Stops the controllers, then the server, as an operator would: SIGTERM, then up to
    /// a minute to exit (a process under heaptrack writes its profile then) before it is
    /// killed. Dropping the control plane instead kills both at once.
    pub async fn stop(mut self) {
        if let Some(controllers) = self.controllers.take() {
            terminate(controllers, "controllers").await;
        }
        terminate(self.server, "server").await;
    }

    /// Store writes the API server made so far, by (operation, resource), from its
    /// `/metrics` (`apiserver_store_writes_total`).
    pub async fn store_writes(
        &self,
        admin: &kube_client::Client,
    ) -> anyhow::Result<BTreeMap<(String, String), u64>> {
        Ok(parse_writes(&metrics(admin).await?))
    }

    /// What the API server's watch caches hold now: bytes of objects and of their
    /// windows of recent changes, each by resource.
    pub async fn cache_bytes(&self, admin: &kube_client::Client) -> anyhow::Result<CacheBytes> {
        let text = metrics(admin).await?;
        Ok(CacheBytes {
            objects: by_resource(&text, "apiserver_watch_cache_bytes"),
            windows: by_resource(&text, "apiserver_watch_cache_window_bytes"),
        })
    }

    /// Whether both processes still run; the error names the one that stopped.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.server.try_wait()? {
            anyhow::bail!(
                "outpost server exited ({status}); see its log in {}",
                self.logs.display()
            );
        }
        if let Some(controllers) = &mut self.controllers
            && let Some(status) = controllers.try_wait()?
        {
            anyhow::bail!(
                "outpost controllers exited ({status}); see its log in {}",
                self.logs.display()
            );
        }
        Ok(())
    }
}

/// The pid of the `outpost` process `child` runs: the child itself, or, when the child is
/// heaptrack's wrapper script (`OUTPOST_BENCH_HEAPTRACK`), the wrapper's child running this
/// executable. (Measuring or signalling the wrapper would read a shell's memory and CPU,
/// and a SIGTERM would reach the shell, not the process it profiles.)
fn outpost_pid(child: &Child) -> Option<u32> {
    let pid = child.id()?;
    let exe = std::env::current_exe().ok()?;
    let runs_this =
        |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok() == Some(exe.clone());
    if runs_this(pid) {
        return Some(pid);
    }
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find(|&c| runs_this(c))
        .or(Some(pid))
}

/// SIGTERM to the `outpost` process of `child`; kills the child if it has not exited a
/// minute later.
async fn terminate(mut child: Child, name: &str) {
    if let Some(pid) = outpost_pid(&child) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    match tokio::time::timeout(Duration::from_secs(60), child.wait()).await {
        Ok(_) => {}
        Err(_) => {
            eprintln!("outpost {name} did not stop within a minute of SIGTERM: killed");
            let _ = child.kill().await;
        }
    }
}

/// This executable as `outpost ARGS`, its stdout piped (to read when it is ready) and
/// its stderr to `DIR/NAME.log` (logging at `RUST_LOG`, `warn` by default); killed when
/// dropped.
fn outpost(dir: &Path, name: &str) -> Command {
    let exe = std::env::current_exe().expect("the running executable has a path");
    // `OUTPOST_BENCH_HEAPTRACK=NAME`: that process runs under heaptrack, its profile in `dir`.
    let mut command = if std::env::var("OUTPOST_BENCH_HEAPTRACK").ok().as_deref() == Some(name) {
        let mut heaptrack = Command::new("heaptrack");
        heaptrack
            .arg("-o")
            .arg(dir.join(format!("{name}.heaptrack")))
            .arg(exe);
        heaptrack
    } else {
        Command::new(exe)
    };
    let log = std::fs::File::create(dir.join(format!("{name}.log")))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    command
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    command
}

/// Reads the child's stdout until a line contains `marker` (60 s at most); the rest of
/// its output is drained in the background.
async fn first_line_with(child: &mut Child, marker: &str) -> anyhow::Result<String> {
    let stdout = child.stdout.take().context("stdout is piped")?;
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            if line.contains(marker) {
                return Ok(line);
            }
        }
        anyhow::bail!("the process exited before printing {marker:?}")
    })
    .await
    .with_context(|| format!("no {marker:?} within 60 s"))??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(found)
}

/// `GET /metrics`.
async fn metrics(admin: &kube_client::Client) -> anyhow::Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    admin.request_text(request).await.context("GET /metrics")
}

/// Bytes the watch caches hold, by resource.
#[derive(Clone, Debug, Default)]
pub struct CacheBytes {
    /// Objects.
    pub objects: BTreeMap<String, u64>,
    /// The objects of the windows of recent changes.
    pub windows: BTreeMap<String, u64>,
}

/// The values of `NAME{resource="R"} N` lines, by resource.
fn by_resource(text: &str, name: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{name}{{resource=\"");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (resource, value) = rest.split_once("\"} ")?;
            Some((resource.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// `apiserver_store_writes_total{operation="create",resource="plans",result="ok"} 12`
/// lines, the successful ones, by (operation, resource).
fn parse_writes(text: &str) -> BTreeMap<(String, String), u64> {
    let mut writes = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_store_writes_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
        };
        if label("result").as_deref() != Some("ok") {
            continue;
        }
        if let (Some(op), Some(resource), Ok(n)) = (
            label("operation"),
            label("resource"),
            value.trim().parse::<u64>(),
        ) {
            writes.insert((op, resource), n);
        }
    }
    writes
}

#[cfg(test)]
mod tests {
    use super::parse_writes;

    #[test]
    fn store_writes_are_read_from_the_metrics_text() {
        let text = "# HELP x\n\
            apiserver_store_writes_total{operation=\"create\",resource=\"plans\",result=\"ok\"} 12\n\
            apiserver_store_writes_total{operation=\"create\",resource=\"plans\",result=\"refused\"} 3\n\
            apiserver_store_writes_total{operation=\"update\",resource=\"installs\",result=\"ok\"} 7\n";
        let writes = parse_writes(text);
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[&("create".into(), "plans".into())], 12);
        assert_eq!(writes[&("update".into(), "installs".into())], 7);
    }
}
