//! The measured phases on one backend: admission, a one-component rollout, dispatch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use kube_client::Client;
use kube_client::api::{Api, Patch, PatchParams, PostParams};
use outpost_api::{Install, Operation, Plan, PlanPhase, PlanRequest};
use serde_json::json;

use super::FleetBench;
use super::control_plane::{Backend, CacheBytes, ControlPlane, CpuTimes, Memory};
use super::fixture::{self, ACTION, APP, NAMESPACE};
use super::runners::{Fleet, Shared};
use crate::controllers::{wait_for_release, wait_rolled_out};

/// Requests in flight while the bench sets things up.
const SETUP_CONCURRENCY: usize = 64;

/// One backend's figures.
#[derive(Clone, Debug)]
pub struct BackendReport {
    /// The store.
    pub backend: Backend,
    /// Until every Install was created.
    pub installs_created: Duration,
    /// Until every runner had its token, listed its Plans and watched (from the start).
    pub runners_watching: Duration,
    /// Until every install was Active with every component deployed (from the start).
    pub admitted: Duration,
    /// Plans the runners completed during admission.
    pub admission_plans: usize,
    /// The one-component rollout.
    pub rollout: Rollout,
    /// Approval sent → runner's watch brought it, sorted.
    pub dispatch: Vec<Duration>,
    /// Approval sent → the approval's write answered (the API server's checks and the
    /// store's commit), sorted: dispatch's write alone, without the watches.
    pub dispatch_written: Vec<Duration>,
    /// The API server's memory at the end (`rss`) and at its highest (`peak`).
    pub apiserver: Memory,
    /// The controllers' memory.
    pub controllers: Memory,
    /// What the API server's caches held at the end.
    pub caches: CacheBytes,
    /// Claims that lost a race (nobody else claims here: must stay 0).
    pub claims_lost: u64,
    /// Plans reported succeeded twice (must stay 0).
    pub applied_twice: u64,
    /// Errors of the runners' watches (410s that made them relist, failed calls).
    pub watch_errors: u64,
    /// Failed calls of the runners (claims, reports).
    pub runner_errors: u64,
}

/// The one-component rollout's figures.
#[derive(Clone, Debug, Default)]
pub struct Rollout {
    /// New Plans the runners saw.
    pub plans: usize,
    /// Until the last of them was first seen by its runner.
    pub created: Duration,
    /// Until the last of them was seen gated (approved) by its runner.
    pub gated: Duration,
    /// Until every install reported the release.
    pub rolled_out: Duration,
    /// Store writes from the change until the writes stopped, by (operation, resource).
    pub writes: BTreeMap<(String, String), u64>,
    /// How long those writes took (the change until the last one).
    pub writing: Duration,
    /// CPU the processes used from the change until the writes stopped.
    pub cpu: CpuTimes,
}

impl Rollout {
    /// Every store write of the phase.
    pub fn total_writes(&self) -> u64 {
        self.writes.values().sum()
    }

    /// Store writes to one resource.
    pub fn writes_to(&self, resource: &str) -> u64 {
        self.writes
            .iter()
            .filter(|((_, r), _)| r == resource)
            .map(|(_, n)| n)
            .sum()
    }
}

/// Runs the phases on `backend`.
pub async fn run_on(bench: &FleetBench, backend: Backend) -> anyhow::Result<BackendReport> {
    let mut control_plane = ControlPlane::start(backend, bench.logs.as_deref()).await?;
    let admin = admin_client(&control_plane)?;
    fixture::create_app(&admin, bench.components).await?;
    control_plane.start_controllers().await?;
    let release = wait_for_release(&admin, NAMESPACE, APP, None, bench.timeout).await?;

    eprintln!("admission: {} installs", bench.installs);
    let started = Instant::now();
    let installs = Api::<Install>::namespaced(admin.clone(), NAMESPACE);
    futures::stream::iter(0..bench.installs)
        .map(|i| {
            let installs = installs.clone();
            async move {
                installs
                    .create(&PostParams::default(), &fixture::install(i))
                    .await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .context("creating the installs")?;
    let installs_created = started.elapsed();
    let names: Vec<String> = (0..bench.installs).map(fixture::install_name).collect();
    let fleet = Fleet::start(&control_plane.url, &admin, NAMESPACE, &names).await?;
    let runners_watching = started.elapsed();
    eprintln!(
        "  {} runners watching after {runners_watching:.1?}",
        names.len()
    );
    wait_rolled_out(&admin, &release, bench.installs, bench.timeout).await?;
    let admitted = started.elapsed();
    let admission_plans = fleet.shared.applied();
    eprintln!("  admitted after {admitted:.1?} ({admission_plans} plans)");
    control_plane.check_alive()?;

    eprintln!("one-component rollout");
    let rollout = rollout(bench, &control_plane, &admin, &fleet.shared, &release).await?;
    eprintln!(
        "  {} plans gated and seen after {:.1?}, rolled out after {:.1?}",
        rollout.plans, rollout.gated, rollout.rolled_out
    );
    control_plane.check_alive()?;

    eprintln!(
        "dispatch: {} approvals",
        bench.dispatch_samples.min(bench.installs)
    );
    let (dispatch, dispatch_written) = dispatch(bench, &admin, &fleet.shared).await?;
    control_plane.check_alive()?;
    let (apiserver, controllers) = control_plane.memory();
    let caches = control_plane.cache_bytes(&admin).await?;
    let shared = &fleet.shared;
    use std::sync::atomic::Ordering::Relaxed;
    let report = BackendReport {
        backend,
        installs_created,
        runners_watching,
        admitted,
        admission_plans,
        rollout,
        dispatch,
        dispatch_written,
        apiserver,
        controllers,
        caches,
        claims_lost: shared.claims_lost.load(Relaxed),
        applied_twice: shared.applied_twice.load(Relaxed),
        watch_errors: shared.watch_errors.load(Relaxed),
        runner_errors: shared.errors.load(Relaxed),
    };
    // The runners first, so none is left retrying against a stopping server.
    drop(fleet);
    control_plane.stop().await;
    Ok(report)
}

fn admin_client(control_plane: &ControlPlane) -> anyhow::Result<Client> {
    let mut config = kube_client::Config::new(control_plane.url.parse()?);
    config.auth_info.token = Some(control_plane.admin_token.clone().into());
    config.read_timeout = Some(Duration::from_secs(120));
    Ok(Client::try_from(config)?)
}

/// Changes one component and measures until every install is on the new release.
async fn rollout(
    bench: &FleetBench,
    control_plane: &ControlPlane,
    admin: &Client,
    shared: &Shared,
    previous: &str,
) -> anyhow::Result<Rollout> {
    // From when the admission's writes stopped: a write is counted when the store's
    // answer reaches the server, which may be after its watch event showed the bench the
    // last install Active, and that write is the admission's, not the rollout's.
    let (before, _) = quiet_writes(control_plane, admin, Instant::now()).await?;
    let cpu_before = control_plane.cpu();
    let started = Instant::now();
    fixture::change_one_component(admin, bench.components, 2).await?;
    let release = wait_for_release(admin, NAMESPACE, APP, Some(previous), bench.timeout).await?;
    let deadline = started + bench.timeout;
    shared.count_from(started);
    let sightings = loop {
        let gated = shared.counts().gated;
        if gated >= bench.installs {
            break shared.sightings_since(started);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {gated} of {} new plans were seen gated in {:?}",
            bench.installs,
            bench.timeout
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let last = |f: &dyn Fn(&super::runners::Sighting) -> Option<Instant>| {
        sightings
            .values()
            .filter_map(f)
            .max()
            .map_or(Duration::ZERO, |t| t - started)
    };
    let created = last(&|s| Some(s.first));
    let gated = last(&|s| s.gated);
    let rolled = wait_rolled_out(admin, &release, bench.installs, bench.timeout).await?;
    // Status writes trail the last Plan: count until the writes stop.
    let (after, writing) = quiet_writes(control_plane, admin, started).await?;
    let cpu = control_plane.cpu() - cpu_before;
    let writes = after
        .into_iter()
        .map(|(key, n)| {
            let before = before.get(&key).copied().unwrap_or(0);
            (key, n - before)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    Ok(Rollout {
        plans: sightings.len(),
        created,
        gated,
        rolled_out: rolled - started,
        writes,
        writing,
        cpu,
    })
}

/// The store writes once they have not moved for a second (30 s at most), and when
/// they last moved (since `started`).
async fn quiet_writes(
    control_plane: &ControlPlane,
    admin: &Client,
    started: Instant,
) -> anyhow::Result<(BTreeMap<(String, String), u64>, Duration)> {
    let mut last = control_plane.store_writes(admin).await?;
    let mut moved = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut still_since = Instant::now();
    while Instant::now() < deadline && still_since.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = control_plane.store_writes(admin).await?;
        if now != last {
            moved = started.elapsed();
            still_since = Instant::now();
            last = now;
        }
    }
    Ok((last, moved))
}

/// Asks for a manual Plan on some installs, switched to approval by hand, and approves
/// them one at a time: approval sent → the runner's watch brought it, and approval sent
/// → its write answered (both sorted).
async fn dispatch(
    bench: &FleetBench,
    admin: &Client,
    shared: &Shared,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let samples = bench.dispatch_samples.min(bench.installs);
    if samples == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let started = Instant::now();
    let installs = Api::<Install>::namespaced(admin.clone(), NAMESPACE);
    futures::stream::iter(0..samples)
        .map(|i| {
            let installs = installs.clone();
            async move {
                let request =
                    PlanRequest::new(Operation::Trigger, ACTION, None, Some("bench".into()));
                let patch = json!({"spec": {"approvalMode": "prompt", "requests": [request]}});
                installs
                    .patch(
                        &fixture::install_name(i),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .context("asking for manual plans")?;
    let deadline = started + bench.timeout;
    shared.count_from(started);
    let waiting: Vec<String> = loop {
        let awaiting = shared.counts().awaiting;
        if awaiting >= samples {
            break shared
                .sightings_since(started)
                .into_iter()
                .filter(|(_, s)| s.awaiting.is_some())
                .map(|(name, _)| name)
                .collect();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {awaiting} of {samples} manual plans were seen awaiting approval"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let plans = Api::<Plan>::namespaced(admin.clone(), NAMESPACE);
    let mut sent = Vec::with_capacity(waiting.len());
    let mut written = Vec::with_capacity(waiting.len());
    let mut gap = tokio::time::interval(bench.dispatch_gap);
    for name in waiting {
        gap.tick().await;
        let plan = plans.get(&name).await?;
        let status = plan.status.clone().unwrap_or_default();
        anyhow::ensure!(
            status.phase == Some(PlanPhase::AwaitingApproval),
            "plan {name} is {:?}, not awaiting approval",
            status.phase
        );
        let at = Instant::now();
        approve(&plans, &plan)
            .await
            .with_context(|| format!("approving {name}"))?;
        written.push(at.elapsed());
        sent.push((name, at));
    }
    let deadline = Instant::now() + bench.timeout;
    loop {
        let seen: Vec<Option<Duration>> = sent
            .iter()
            .map(|(name, at)| {
                shared
                    .approved_at(name)
                    .map(|t| t.saturating_duration_since(*at))
            })
            .collect();
        if seen.iter().all(Option::is_some) {
            let mut latencies: Vec<Duration> = seen.into_iter().flatten().collect();
            // Which approval was slowest, and whether its own write was: a tail is
            // told from a stall of the server at one moment or of one path.
            if let Some((i, slowest)) = latencies.iter().enumerate().max_by_key(|(_, l)| **l) {
                eprintln!(
                    "  slowest: approval {} of {}, {:.1} ms to its runner (its write {:.1} ms; \
                     slowest write {:.1} ms)",
                    i + 1,
                    latencies.len(),
                    slowest.as_secs_f64() * 1e3,
                    written[i].as_secs_f64() * 1e3,
                    written
                        .iter()
                        .max()
                        .unwrap_or(&Duration::ZERO)
                        .as_secs_f64()
                        * 1e3,
                );
            }
            latencies.sort();
            written.sort();
            return Ok((latencies, written));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {} approvals reached their runners",
            seen.iter().filter(|s| s.is_some()).count(),
            sent.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Approves the diff an `AwaitingApproval` Plan shows, as a person would: bound to its
/// content hash and `status.diff.hash`. The one place the bench approves.
async fn approve(plans: &Api<Plan>, plan: &Plan) -> Result<Plan, kube_client::Error> {
    let hash = plan
        .status
        .as_ref()
        .and_then(|s| s.diff.as_ref())
        .map(|d| d.hash.clone())
        .unwrap_or_default();
    plans
        .patch_subresource(
            "approval",
            plan.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(json!({"decision": "approve", "diffHash": hash})),
        )
        .await
}
