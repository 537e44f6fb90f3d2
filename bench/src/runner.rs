//! `outpost bench runner` and `outpost bench runner-footprint`: how fast the real
//! `outpost-runner` process starts a newly approved Plan, and how small it is.
//!
//! Both start the API server in this process on a fresh embedded store, create an App
//! and an Install, mint the install's runner token (as `outpost token` does) and spawn
//! the `outpost-runner` binary that sits next to this executable, over loopback HTTP.
//!
//! Dispatch latency is measured from the moment the approval (the Plan's status update
//! to `Approved`) is sent to the moment this process's own watch sees the runner's claim
//! (phase `Claimed`, fenced by resourceVersion). It therefore includes the approval's
//! request, the watch delivering it to the runner, the runner's journal fsync, the claim
//! request and the watch delivering the claim back: an upper bound of the runner's part.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube_client::api::{Api, Patch, PatchParams, PostParams};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Plan, PlanPhase, Runner};
use outpost_apiserver::auth::{TokenFile, User};
use outpost_apiserver::server::ApiServer;
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, Store};
use outpost_kinds::ADMINS;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The namespace and the install of the bench.
const NAMESPACE: &str = "bench";
const INSTALL: &str = "bench";

/// The acceptance goal for dispatch: a newly approved Plan is claimed within 100 ms (p99).
const DISPATCH_GOAL: Duration = Duration::from_millis(100);

/// An API server on a fresh embedded store, in this process, with an App, Installs of
/// it and each install's minted runner token.
pub struct BenchPlane {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// An admin's client.
    pub client: Client,
    /// Install name → its runner token.
    pub tokens: HashMap<String, String>,
    /// Temporary directory of the store and of the runners' state.
    pub dir: tempfile::TempDir,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for BenchPlane {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl BenchPlane {
    /// Starts the server, creates the App and `installs` and mints their runner tokens.
    pub async fn start(installs: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let store: Arc<dyn Store> = Arc::new(
            EmbeddedStore::open(&dir.path().join("store"), EmbeddedOptions::default()).await?,
        );
        let admin_token = format!("{:032x}", rand::random::<u128>());
        let mut tokens = TokenFile::default();
        tokens.insert(
            admin_token.clone(),
            User {
                name: "bench".into(),
                uid: "bench".into(),
                groups: vec![ADMINS.into()],
            },
        );
        let server = ApiServer::new(store, outpost_kinds::server_config(tokens)).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let serving = tokio::spawn(server.serve(listener, std::future::pending()));
        let mut config = kube_client::Config::new(url.parse()?);
        config.auth_info.token = Some(admin_token.into());
        let client = Client::try_from(config)?;
        create(&client, "apps", app()).await?;
        let mut tokens = HashMap::new();
        for name in installs {
            create(&client, "installs", install(name)).await?;
            tokens.insert(
                (*name).to_owned(),
                outpost_runner::token::mint(&client, NAMESPACE, name).await?,
            );
        }
        Ok(Self {
            url,
            client,
            tokens,
            dir,
            serving,
        })
    }

    /// Spawns `command` (a runner binary and its leading arguments) for `install`, with
    /// a fresh state dir.
    pub fn spawn_runner(
        &self,
        mut command: Command,
        install: &str,
    ) -> anyhow::Result<RunnerProcess> {
        let token = self
            .tokens
            .get(install)
            .with_context(|| format!("no install {install} in the bench"))?;
        let program = command.get_program().to_owned();
        let child = command
            .args(["--server", &self.url, "--install"])
            .arg(format!("{NAMESPACE}/{install}"))
            .arg("--state-dir")
            .arg(self.dir.path().join(format!("state-{install}")))
            .env("OUTPOST_RUNNER_TOKEN", token)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {}", Path::new(&program).display()))?;
        Ok(RunnerProcess(child))
    }

    /// Waits until `install`'s Runner is registered and has heartbeated.
    pub async fn registered(&self, install: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let beat = self
                .runners()
                .get_opt(install)
                .await?
                .and_then(|r| r.status)
                .and_then(|s| s.last_heartbeat);
            if beat.is_some() {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the runner did not register within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn runners(&self) -> Api<Runner> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }
}

/// A spawned runner, killed (SIGKILL) when dropped.
pub struct RunnerProcess(Child);

impl RunnerProcess {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.0.try_wait()? {
            Some(status) => anyhow::bail!("the runner exited: {status}"),
            None => Ok(()),
        }
    }
}

impl Drop for RunnerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `NAME` next to the running executable (`target/fleet/` under `./x bench`).
pub fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the running executable")?;
    let path = exe.with_file_name(name);
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: build it with `cargo build --release -p outpost-runner` \
         (`./x bench` does)",
        path.display()
    );
    Ok(path)
}

async fn create(client: &Client, plural: &str, object: Value) -> anyhow::Result<()> {
    let request = http::Request::post(format!(
        "/apis/outpost.dev/v1alpha1/namespaces/{NAMESPACE}/{plural}"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&object)?)?;
    client
        .request::<Value>(request)
        .await
        .with_context(|| format!("creating the bench's {plural}"))?;
    Ok(())
}

fn app() -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {
            "permissions": {"roles": [
                {"name": "{{ install.id }}-provision", "type": "provision"},
                {"name": "{{ install.id }}-maintenance", "type": "maintenance"},
                {"name": "{{ install.id }}-deprovision", "type": "deprovision"},
            ]},
        }
    })
}

fn install(name: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"app": "bench", "approvalMode": "approve-all",
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
    })
}

/// What to measure.
pub struct RunnerBench {
    /// Plans approved one at a time, each once the previous one finished.
    pub plans: usize,
    /// Pause after a Plan finished before approving the next (the runner is idle then).
    pub gap: Duration,
    /// Plans approved back to back in one burst (0 skips the burst figures).
    pub burst: usize,
    /// Bursts, each once the previous one finished.
    pub bursts: usize,
}

/// Approval-to-claim latencies of one mode.
#[derive(Clone, Debug)]
pub struct Latencies {
    /// What was measured.
    pub name: String,
    /// One per Plan.
    pub samples: Vec<Duration>,
    /// Plans that ended Succeeded.
    pub succeeded: usize,
    /// Plans that ended Failed.
    pub failed: usize,
}

/// The benchmark's result.
#[derive(Clone, Debug)]
pub struct RunnerBenchReport {
    /// One at a time, then bursts.
    pub modes: Vec<Latencies>,
    /// Milliseconds the runner was left idle between sequential Plans.
    pub gap: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl fmt::Display for RunnerBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "approval sent -> claim seen on a watch; real outpost-runner process, loopback \
             HTTP, embedded store; job Plans (one bubblewrap step each)"
        )?;
        writeln!(
            f,
            "{:<28} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
            "mode",
            "plans",
            "mean ms",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "ok/fail",
            "p99/100ms"
        )?;
        for m in &self.modes {
            let mut sorted = m.samples.clone();
            sorted.sort();
            let mean = sorted.iter().sum::<Duration>() / sorted.len().max(1) as u32;
            let p99 = percentile(&sorted, 0.99);
            writeln!(
                f,
                "{:<28} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>12.3}",
                m.name,
                sorted.len(),
                ms(mean),
                ms(percentile(&sorted, 0.50)),
                ms(percentile(&sorted, 0.90)),
                ms(p99),
                ms(sorted.last().copied().unwrap_or_default()),
                format!("{}/{}", m.succeeded, m.failed),
                p99.as_secs_f64() / DISPATCH_GOAL.as_secs_f64(),
            )?;
        }
        const BUCKETS: [u64; 7] = [2, 5, 10, 20, 50, 100, 200];
        for m in &self.modes {
            let mut counts = [0usize; BUCKETS.len() + 1];
            for s in &m.samples {
                let i = BUCKETS
                    .iter()
                    .position(|b| ms(*s) < *b as f64)
                    .unwrap_or(BUCKETS.len());
                counts[i] += 1;
            }
            let mut parts = Vec::new();
            for (i, n) in counts.iter().enumerate() {
                let label = match (i.checked_sub(1).map(|j| BUCKETS[j]), BUCKETS.get(i)) {
                    (None, Some(hi)) => format!("<{hi}"),
                    (Some(lo), Some(hi)) => format!("{lo}-{hi}"),
                    (Some(lo), None) => format!(">={lo}"),
                    (None, None) => unreachable!("BUCKETS is not empty"),
                };
                parts.push(format!("{label}: {n}"));
            }
            writeln!(f, "{} histogram (ms): {}", m.name, parts.join(", "))?;
        }
        writeln!(
            f,
            "one-at-a-time: each Plan is approved {:?} after the previous one finished (runner \
             idle); a burst approves Plans back to back and the runner executes them one at a \
             time, so a burst's later Plans wait for the earlier ones to run",
            self.gap
        )
    }
}

/// What this process's own watch saw of the Plans: when each was first seen claimed
/// (or later), and how each ended.
struct Observed {
    events: mpsc::UnboundedReceiver<(String, PlanPhase, Instant)>,
    claimed: HashMap<String, Instant>,
    finished: HashMap<String, PlanPhase>,
    _watch: tokio::task::JoinHandle<()>,
}

impl Observed {
    fn start(plans: Api<Plan>) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let watch = tokio::spawn(async move {
            let mut stream = watcher(plans, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(plan) = stream.next().await {
                let Ok(plan) = plan else { continue };
                let phase = plan.status.as_ref().and_then(|s| s.phase);
                if let Some(phase) = phase
                    && tx.send((plan.name_any(), phase, Instant::now())).is_err()
                {
                    return;
                }
            }
        });
        Self {
            events,
            claimed: HashMap::new(),
            finished: HashMap::new(),
            _watch: watch,
        }
    }

    async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !done(self) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some((name, phase, at))) => {
                    if matches!(
                        phase,
                        PlanPhase::Claimed
                            | PlanPhase::Planning
                            | PlanPhase::Applying
                            | PlanPhase::Succeeded
                            | PlanPhase::Failed
                    ) {
                        self.claimed.entry(name.clone()).or_insert(at);
                    }
                    if phase.is_terminal() {
                        self.finished.insert(name, phase);
                    }
                }
                Ok(None) => anyhow::bail!("the bench's plan watch ended"),
                Err(_) => anyhow::bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        Ok(())
    }
}

/// Creates a job Plan `name` (a component whose one step runs `true` in the sandbox).
async fn create_plan(plans: &Api<Plan>, name: &str) -> anyhow::Result<()> {
    let desired = json!({"app": "bench", "type": "job",
                         "job": {"image": "none", "command": ["true"]}});
    let hash = outpost_api::content_hash(&desired);
    let plan = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": name, "labels": {outpost_api::labels::INSTALL: INSTALL}},
        "spec": {"install": INSTALL, "operation": "deploy",
                 "entity": {"kind": "component", "name": "job"},
                 "desiredState": desired, "contentHash": hash},
    });
    plans
        .create(&PostParams::default(), &serde_json::from_value(plan)?)
        .await
        .with_context(|| format!("creating plan {name}"))?;
    Ok(())
}

/// Passes Plan `name` as the gate does (`Ready`, its role); returns when that was sent.
async fn approve(plans: &Api<Plan>, name: &str) -> anyhow::Result<Instant> {
    let status = json!({"status": {
        "phase": "Ready",
        "role": {"name": "bench-maintenance", "level": "default"},
    }});
    let sent = Instant::now();
    plans
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .with_context(|| format!("approving plan {name}"))?;
    Ok(sent)
}

impl RunnerBench {
    /// Runs the benchmark.
    pub async fn run(&self) -> anyhow::Result<RunnerBenchReport> {
        let plane = BenchPlane::start(&[INSTALL]).await?;
        let binary = sibling_binary("outpost-runner")?;
        let mut runner = plane.spawn_runner(Command::new(&binary), INSTALL)?;
        plane.registered(INSTALL, Duration::from_secs(30)).await?;
        let plans: Api<Plan> = Api::namespaced(plane.client.clone(), NAMESPACE);
        let mut observed = Observed::start(plans.clone());
        let timeout = Duration::from_secs(60);

        // Warm-up (not measured): the runner's watch is established and its first
        // sandbox has run.
        for i in 0..3 {
            let name = format!("warmup-{i}");
            create_plan(&plans, &name).await?;
            approve(&plans, &name).await?;
            observed
                .until(&format!("{name} to finish"), timeout, |o| {
                    o.finished.contains_key(&name)
                })
                .await?;
        }

        let mut modes = Vec::new();
        let mut sequential = Vec::new();
        for i in 0..self.plans {
            let name = format!("seq-{i:04}");
            create_plan(&plans, &name).await?;
            tokio::time::sleep(self.gap).await;
            sequential.push((name.clone(), approve(&plans, &name).await?));
            observed
                .until(&format!("{name} to finish"), timeout, |o| {
                    o.finished.contains_key(&name)
                })
                .await?;
            runner.check_alive()?;
        }
        modes.push(latencies("one at a time", &sequential, &observed)?);
        if self.burst > 0 && self.bursts > 0 {
            let mut firsts = Vec::new();
            let mut all = Vec::new();
            for b in 0..self.bursts {
                tokio::time::sleep(self.gap).await;
                let mut burst = Vec::new();
                for i in 0..self.burst {
                    let name = format!("burst-{b:02}-{i:03}");
                    create_plan(&plans, &name).await?;
                    burst.push(name);
                }
                let mut approved = Vec::new();
                for name in &burst {
                    approved.push((name.clone(), approve(&plans, name).await?));
                }
                observed
                    .until("a burst to finish", timeout * 2, |o| {
                        burst.iter().all(|n| o.finished.contains_key(n))
                    })
                    .await?;
                runner.check_alive()?;
                firsts.push(approved[0].clone());
                all.extend(approved);
            }
            modes.push(latencies(
                &format!("burst of {}: first Plan", self.burst),
                &firsts,
                &observed,
            )?);
            modes.push(latencies(
                &format!("burst of {}: every Plan", self.burst),
                &all,
                &observed,
            )?);
        }
        Ok(RunnerBenchReport {
            modes,
            gap: self.gap,
        })
    }
}

fn latencies(
    name: &str,
    approved: &[(String, Instant)],
    observed: &Observed,
) -> anyhow::Result<Latencies> {
    let mut samples = Vec::new();
    let (mut succeeded, mut failed) = (0, 0);
    for (plan, sent) in approved {
        let claimed = observed
            .claimed
            .get(plan)
            .with_context(|| format!("{plan} finished without being seen claimed"))?;
        samples.push(claimed.saturating_duration_since(*sent));
        match observed.finished.get(plan) {
            Some(PlanPhase::Succeeded) => succeeded += 1,
            _ => failed += 1,
        }
    }
    Ok(Latencies {
        name: name.to_owned(),
        samples,
        succeeded,
        failed,
    })
}
