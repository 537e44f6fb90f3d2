//! High availability end to end: a 3-member etcd cluster (Debian's `etcd`), two
//! `outpost server` replicas on it, two `outpost controllers` replicas (one elected
//! leader), and a simulated runner per install (200 tasks in this process), each given
//! both API servers. A Rollout moves the 200 installs to a new release in 4 waves of
//! 50; mid-rollout the etcd leader is killed, then the controller leader and the API
//! server it used. The rollout completes, every Plan was applied exactly once according
//! to the runners' journals, and no Plan was made twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use outpost_api::labels::INSTALL as INSTALL_LABEL;
use outpost_api::{App, Install, Plan, PlanPhase, Rollout, RolloutPhase, RolloutStatus};
use outpost_runner::claim::{Claim, claim, refusal, refuse};
use outpost_runner::journal::{JOURNAL_FILE, Record};
use outpost_runner::{Journal, Stage};
use outpost_testing::phase;
use outpost_testing::shop::{
    create_app, create_install, deployed_release, release_after, set_version,
};
use outpost_testing::{ControlPlane, EtcdCluster, eventually};
use serde_json::json;

const INSTALLS: usize = 200;
const WAVE: usize = 50;
/// The controllers' lease: a killed leader is replaced within about this long. Shorter
/// than the product's 15 s to keep the test short, but not so short that a leader on a
/// loaded machine (this test beside another, on 2 cores) misses renewals: with 4 s the
/// replicas took the lease from each other every few seconds under load, and each
/// takeover restarts every controller (a rollout wave then outlasted its wait).
const LEASE_SECONDS: u64 = 10;

/// A runner for one install, simulated: it watches its install's Plans and claims each
/// approved one as the real runner does (`outpost_runner::claim`, a status update fenced
/// by the resourceVersion, with the real runner's journal fsync'd before each step),
/// "applies" it by journaling `applied`, and reports `Succeeded`. It is given both API
/// servers and moves to the other whenever a call or its watch fails; after a move its
/// watch lists the Plans again, which also retries what failed (a claim or report whose
/// answer never came, resolved from the journal as the real runner's recovery does).
struct SimulatedRunner {
    install: String,
    name: String,
    journal: Journal,
    servers: [Api<Plan>; 2],
    using: usize,
    moves: Arc<AtomicUsize>,
}

impl SimulatedRunner {
    async fn run(mut self) {
        loop {
            // Whatever failed (the watch, a claim, a report), the other server may answer.
            let _failed = self.follow().await;
            self.using = 1 - self.using;
            self.moves.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn follow(&mut self) -> anyhow::Result<()> {
        let plans = self.servers[self.using].clone();
        let config =
            watcher::Config::default().labels(&format!("{INSTALL_LABEL}={}", self.install));
        let mut events = watcher(plans.clone(), config).applied_objects().boxed();
        while let Some(plan) = events.next().await {
            self.handle(&plans, plan?).await?;
        }
        anyhow::bail!("the watch ended")
    }

    fn record(&mut self, plan: &Plan, stage: Stage) {
        self.journal
            .record(&plan.name_any(), &plan.uid().unwrap_or_default(), stage)
            .expect("the runner's journal is writable");
    }

    fn ours(&self, plan: &Plan) -> bool {
        plan.status.as_ref().and_then(|s| s.claimed_by.as_deref()) == Some(self.name.as_str())
            && matches!(
                phase(plan),
                Some(PlanPhase::Claimed | PlanPhase::Planning | PlanPhase::Applying)
            )
    }

    async fn handle(&mut self, plans: &Api<Plan>, plan: Plan) -> anyhow::Result<()> {
        let stage = self.journal.stage(&plan.uid().unwrap_or_default()).cloned();
        match (phase(&plan), stage) {
            // Like the real runner, a Plan it has handled is never taken again, even
            // if it were approved again.
            (Some(PlanPhase::Ready | PlanPhase::Approved), None | Some(Stage::Claiming { .. })) => {
                self.take(plans, &plan).await
            }
            // A claim whose answer never came, or that was never applied.
            (_, Some(Stage::Claiming { .. } | Stage::Claimed)) if self.ours(&plan) => {
                self.apply(plans, &plan).await
            }
            // Applied, the report never answered.
            (_, Some(Stage::Applied { .. })) if self.ours(&plan) => self.report(plans, &plan).await,
            _ => Ok(()),
        }
    }

    async fn take(&mut self, plans: &Api<Plan>, plan: &Plan) -> anyhow::Result<()> {
        let resource_version = plan.resource_version().unwrap_or_default();
        self.record(plan, Stage::Claiming { resource_version });
        if let Some(reason) = refusal(plan) {
            if let Claim::Won(_) = refuse(plans, plan, &self.name, reason).await? {
                self.record(plan, Stage::Reported);
            }
            return Ok(());
        }
        match claim(plans, plan, &self.name).await? {
            Claim::Won(claimed) => self.apply(plans, &claimed).await,
            // Lost — unless an earlier attempt whose answer never came did win.
            Claim::Lost => match plans.get_opt(&plan.name_any()).await? {
                Some(current) if self.ours(&current) => self.apply(plans, &current).await,
                Some(current) if outpost_runner::claim::claimable(phase(&current)) => Ok(()),
                _ => {
                    self.record(plan, Stage::Lost);
                    Ok(())
                }
            },
        }
    }

    async fn apply(&mut self, plans: &Api<Plan>, plan: &Plan) -> anyhow::Result<()> {
        self.record(plan, Stage::Claimed);
        let outputs = BTreeMap::from([("ok".to_owned(), json!(true))]);
        self.record(
            plan,
            Stage::Applied {
                outputs,
                log: String::new(),
                diff: None,
                reason: None,
            },
        );
        self.report(plans, plan).await
    }

    async fn report(&mut self, plans: &Api<Plan>, plan: &Plan) -> anyhow::Result<()> {
        let done = json!({"status": {"phase": "Succeeded",
            "finishedAt": jiff::Timestamp::now().to_string(), "outputs": {"ok": true}}});
        plans
            .patch_status(
                &plan.name_any(),
                &PatchParams::default(),
                &Patch::Merge(done),
            )
            .await?;
        self.record(plan, Stage::Reported);
        Ok(())
    }
}

/// `applied` records in every runner's journal under `dir`: (runner, Plan uid).
fn applied(dir: &Path) -> Vec<(String, String)> {
    let mut applied = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let state = entry.unwrap().path();
        let runner = state.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(state.join(JOURNAL_FILE)).unwrap_or_default();
        for line in text.lines() {
            let record: Record = serde_json::from_str(line).expect("a journal record");
            if matches!(record.stage, Stage::Applied { .. }) {
                applied.push((runner.clone(), record.uid));
            }
        }
    }
    applied
}

async fn rollout_status(rollouts: &Api<Rollout>) -> Option<RolloutStatus> {
    rollouts.get("ha").await.ok()?.status
}

/// Waits until wave `wave` (from 0) of the rollout completed.
async fn wave_completed(rollouts: &Api<Rollout>, wave: usize, secs: u64) {
    eventually(secs, &format!("wave {} completed", wave + 1), async || {
        let status = rollout_status(rollouts).await?;
        status.waves.get(wave)?.completed_at.as_ref().map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_completes_through_etcd_and_controller_leader_failures() {
    let started = Instant::now();
    let lap = |what: &str| eprintln!("{:>6.1} s  {what}", started.elapsed().as_secs_f64());
    let mut etcd = EtcdCluster::start(3).await;
    let first = ControlPlane::start_on(&etcd).await;
    let second = first.start_replica().await;
    let mut servers = [first, second];
    let mut controllers = [
        servers[0].start_controllers_with_lease("controllers-0", LEASE_SECONDS),
        servers[1].start_controllers_with_lease("controllers-1", LEASE_SECONDS),
    ];
    let clients = [servers[0].client().await, servers[1].client().await];
    lap("etcd cluster, 2 API servers, 2 controller replicas");

    create_app(&clients[0]).await;
    let apps = Api::<App>::namespaced(clients[1].clone(), "default");
    let release1 = release_after(&apps, None).await;

    // A runner per install, every other one first on the other API server.
    let state = tempfile::tempdir().unwrap();
    let moves: Vec<Arc<AtomicUsize>> = (0..INSTALLS).map(|_| Arc::default()).collect();
    let names: Vec<String> = (0..INSTALLS).map(|i| format!("i{i:03}")).collect();
    let runners: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, install)| {
            let dir: PathBuf = state.path().join(format!("{install}-runner"));
            std::fs::create_dir(&dir).unwrap();
            let runner = SimulatedRunner {
                install: install.clone(),
                name: format!("{install}-runner"),
                journal: Journal::open(&dir).unwrap(),
                servers: clients
                    .clone()
                    .map(|client| Api::namespaced(client, "default")),
                using: i % 2,
                moves: moves[i].clone(),
            };
            tokio::spawn(runner.run())
        })
        .collect();

    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(16, |(i, name)| {
            let installs = Api::<Install>::namespaced(clients[i % 2].clone(), "default");
            let release = &release1;
            async move { create_install(&installs, name, json!({"fleet": "ha"}), release).await }
        })
        .await;
    let installs = Api::<Install>::namespaced(clients[0].clone(), "default");
    let on_release = async |installs: &Api<Install>, release: &str| {
        let all = installs.list(&ListParams::default()).await.ok()?.items;
        let done = all
            .iter()
            .filter(|i| deployed_release(i).as_deref() == Some(release))
            .count();
        (done == INSTALLS).then_some(())
    };
    eventually(120, "every install Active on release 1", async || {
        on_release(&installs, &release1).await
    })
    .await;
    lap("200 installs Active on release 1");

    set_version(&clients[1], "2").await;
    let release2 = release_after(&apps, Some(&release1)).await;
    let rollouts = Api::<Rollout>::namespaced(clients[0].clone(), "default");
    let rollout = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "ha"},
        "spec": {"app": "shop", "selector": {"matchLabels": {"fleet": "ha"}},
                 "waveSize": WAVE, "pauseSeconds": 0},
    });
    rollouts
        .create(
            &PostParams::default(),
            &serde_json::from_value(rollout).unwrap(),
        )
        .await
        .unwrap();

    // Wave 1 done: kill the etcd leader.
    wave_completed(&rollouts, 0, 60).await;
    let etcd_leader = etcd.leader().await;
    etcd.kill(etcd_leader);
    lap(&format!(
        "wave 1 completed; killed etcd leader {}",
        etcd.name(etcd_leader)
    ));
    let new_leader = etcd.leader().await;
    assert_ne!(new_leader, etcd_leader);
    lap(&format!("etcd elected {}", etcd.name(new_leader)));

    // The rollout goes on: wave 2 completes. Then kill the controller leader and the
    // API server it used; its runners move to the other one.
    wave_completed(&rollouts, 1, 60).await;
    let status = rollout_status(&rollouts).await.unwrap();
    assert_ne!(
        status.phase,
        Some(RolloutPhase::Completed),
        "still mid-rollout"
    );
    let leases = Api::<Lease>::namespaced(clients[0].clone(), "default");
    let holder = leases
        .get("outpost-controllers")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .expect("the Lease names its holder");
    let dead = ["controllers-0", "controllers-1"]
        .iter()
        .position(|id| *id == holder)
        .unwrap_or_else(|| panic!("unknown holder {holder}"));
    let alive = 1 - dead;
    controllers[dead].kill();
    servers[dead].stop();
    let moved_before: usize = (0..INSTALLS)
        .filter(|i| i % 2 == dead)
        .map(|i| moves[i].load(Ordering::Relaxed))
        .sum();
    lap(&format!(
        "wave 2 completed; killed controller leader {holder} and its API server"
    ));

    let rollouts = Api::<Rollout>::namespaced(clients[alive].clone(), "default");
    let completed = eventually(120, "the rollout Completed", async || {
        let status = rollout_status(&rollouts).await?;
        (status.phase == Some(RolloutPhase::Completed)).then_some(status)
    })
    .await;
    lap("rollout Completed");
    let leases = Api::<Lease>::namespaced(clients[alive].clone(), "default");
    let lease = leases.get("outpost-controllers").await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some(["controllers-0", "controllers-1"][alive]),
        "the surviving replica leads"
    );
    assert!(controllers[alive].is_running());

    // The rollout's outcome.
    assert_eq!(
        (completed.updated, completed.total),
        (INSTALLS as u32, INSTALLS as u32)
    );
    assert!(completed.halt.is_none(), "{completed:?}");
    assert_eq!(completed.release.as_deref(), Some(release2.as_str()));
    let installs = Api::<Install>::namespaced(clients[alive].clone(), "default");
    assert_eq!(on_release(&installs, &release2).await, Some(()));

    // Every runner that used the dead API server moved to the other one.
    for i in (0..INSTALLS).filter(|i| i % 2 == dead) {
        assert!(
            moves[i].load(Ordering::Relaxed) > 0,
            "runner of {} never moved to the live API server (moves before the kill: {moved_before})",
            names[i]
        );
    }

    // No Plan made twice: one per install, entity and release (and content hash).
    let plans = Api::<Plan>::namespaced(clients[alive].clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut made: BTreeMap<(String, String, Option<String>), Vec<String>> = BTreeMap::new();
    let mut hashes = BTreeSet::new();
    for plan in &plans {
        let entity = serde_json::to_string(&plan.spec.entity).unwrap();
        made.entry((
            plan.spec.install.clone(),
            entity.clone(),
            plan.spec.release.clone(),
        ))
        .or_default()
        .push(plan.name_any());
        assert!(
            hashes.insert((
                plan.spec.install.clone(),
                entity,
                plan.spec.content_hash.clone()
            )),
            "two Plans of one content hash: {}",
            plan.name_any()
        );
    }
    let twice: Vec<_> = made.values().filter(|names| names.len() > 1).collect();
    assert!(twice.is_empty(), "Plans made twice: {twice:?}");
    let per_release = |release: &str| {
        plans
            .iter()
            .filter(|p| p.spec.release.as_deref() == Some(release))
            .count()
    };
    eprintln!(
        "{} Plans: {} of release 1, {} of release 2",
        plans.len(),
        per_release(&release1),
        per_release(&release2)
    );
    // A sandbox provision and a web deploy per install, then a web deploy per install.
    assert_eq!(
        (per_release(&release1), per_release(&release2), plans.len()),
        (2 * INSTALLS, INSTALLS, 3 * INSTALLS)
    );

    // Every Plan applied exactly once, by its install's runner, and Succeeded.
    let applied = applied(state.path());
    let mut by_uid: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (runner, uid) in &applied {
        by_uid
            .entry(uid.as_str())
            .or_default()
            .push(runner.as_str());
    }
    let repeated: Vec<_> = by_uid.iter().filter(|(_, r)| r.len() > 1).collect();
    assert!(
        repeated.is_empty(),
        "Plans applied more than once: {repeated:?}"
    );
    for plan in &plans {
        let uid = plan.uid().unwrap();
        assert_eq!(
            phase(plan),
            Some(PlanPhase::Succeeded),
            "Plan {} is not Succeeded: {:?}",
            plan.name_any(),
            plan.status
        );
        let runners = by_uid.remove(uid.as_str()).unwrap_or_default();
        assert_eq!(
            runners,
            [format!("{}-runner", plan.spec.install).as_str()],
            "Plan {} applied by its install's runner, once",
            plan.name_any()
        );
    }
    assert!(
        by_uid.is_empty(),
        "applied Plans that are not in the store: {by_uid:?}"
    );
    lap("checked");
    for runner in runners {
        runner.abort();
    }
}
