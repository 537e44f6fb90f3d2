//! Simulated runners: one per install, in this process, each with the install's own
//! runner token, its own client and its own watch of the install's Plans, as
//! `outpost runner` has. Each client speaks HTTP/2 over one connection of its own (h2c:
//! the bench server is plain HTTP on loopback), so the watch and the calls share it: one
//! file descriptor per runner on each end instead of two, which is what lets 10,000
//! runners fit under a 20,000 open-files limit. Each claims a `Ready` Plan with the real
//! runner's fenced claim and at once reports it succeeded with a one-resource diff — or,
//! on a `prompt` install, posts that diff as `AwaitingApproval` and applies once it is
//! `Approved`: they stand in for the runner's session, not for its executors.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Api, PostParams};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{
    ApprovalMode, ChangeAction, Install, Lean, Plan, PlanDiff, PlanPhase, ResourceChange,
};
use outpost_runner::claim::{Claim, claim, refusal};
use serde_json::json;

use outpost_api::labels::INSTALL as INSTALL_LABEL;

/// Runners connecting at once.
const CONNECTING: usize = 64;

/// When a runner first saw a Plan, and first saw it gated and approved.
#[derive(Clone, Copy, Debug)]
pub struct Sighting {
    /// The Plan's first event at its runner.
    pub first: Instant,
    /// The first event past `Pending` (the gate decided).
    pub gated: Option<Instant>,
    /// The first event in phase `AwaitingApproval` (the runner posted the diff).
    pub awaiting: Option<Instant>,
    /// The first event in phase `Approved`.
    pub approved: Option<Instant>,
}

/// Every Plan's sighting, and how many of those first seen since a phase began were seen
/// gated and awaiting approval: the phases poll the counts, where a scan of every
/// sighting (120,000 at 10,000 installs, ten times a second, under the runners' lock) had
/// been a sixth of the bench process's CPU in a rollout, counted as the runners'.
#[derive(Default)]
struct Sightings {
    by_plan: HashMap<String, Sighting>,
    counting_from: Option<Instant>,
    counts: Counts,
}

/// Plans first seen since [`Shared::count_from`], by what they were seen as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Seen past `Pending`.
    pub gated: usize,
    /// Seen in phase `AwaitingApproval`.
    pub awaiting: usize,
}

impl Counts {
    fn add(&mut self, sighting: &Sighting) {
        self.gated += usize::from(sighting.gated.is_some());
        self.awaiting += usize::from(sighting.awaiting.is_some());
    }
}

/// What every runner records.
#[derive(Default)]
pub struct Shared {
    sightings: Mutex<Sightings>,
    applied: Mutex<HashSet<String>>,
    /// Plans a runner reported succeeded more than once (must stay 0).
    pub applied_twice: AtomicU64,
    /// Claims lost to a conflict (another writer moved the Plan first).
    pub claims_lost: AtomicU64,
    /// Errors of the runners' watches: a 410 (the watch resumed from a revision the
    /// window no longer holds, so the runner relists) or a failed call (must stay 0).
    pub watch_errors: AtomicU64,
    /// Calls that failed (claims, reports, reading the install).
    pub errors: AtomicU64,
}

impl Shared {
    fn see(&self, plan: &Plan, now: Instant) {
        let phase = plan.status.as_ref().and_then(|s| s.phase);
        let mut sightings = self.sightings.lock().expect("not poisoned");
        let counting_from = sightings.counting_from;
        let sighting = sightings
            .by_plan
            .entry(plan.name_any())
            .or_insert(Sighting {
                first: now,
                gated: None,
                awaiting: None,
                approved: None,
            });
        let before = *sighting;
        if phase.is_some_and(|p| p != PlanPhase::Pending) {
            sighting.gated.get_or_insert(now);
        }
        if phase == Some(PlanPhase::AwaitingApproval) {
            sighting.awaiting.get_or_insert(now);
        }
        if phase == Some(PlanPhase::Approved) {
            sighting.approved.get_or_insert(now);
        }
        let after = *sighting;
        if counting_from.is_some_and(|from| after.first >= from) {
            let counts = &mut sightings.counts;
            counts.gated += usize::from(before.gated.is_none() && after.gated.is_some());
            counts.awaiting += usize::from(before.awaiting.is_none() && after.awaiting.is_some());
        }
    }

    /// Counts from now on the Plans first seen at or after `from` (those already seen
    /// included).
    pub fn count_from(&self, from: Instant) {
        let mut sightings = self.sightings.lock().expect("not poisoned");
        let mut counts = Counts::default();
        for sighting in sightings.by_plan.values().filter(|s| s.first >= from) {
            counts.add(sighting);
        }
        sightings.counting_from = Some(from);
        sightings.counts = counts;
    }

    /// The Plans first seen since [`Shared::count_from`]'s instant, by what they were
    /// seen as.
    pub fn counts(&self) -> Counts {
        self.sightings.lock().expect("not poisoned").counts
    }

    /// The sightings of every Plan first seen at or after `since`.
    pub fn sightings_since(&self, since: Instant) -> HashMap<String, Sighting> {
        self.sightings
            .lock()
            .expect("not poisoned")
            .by_plan
            .iter()
            .filter(|(_, s)| s.first >= since)
            .map(|(name, s)| (name.clone(), *s))
            .collect()
    }

    /// When `plan` was first seen approved, if it was.
    pub fn approved_at(&self, plan: &str) -> Option<Instant> {
        self.sightings
            .lock()
            .expect("not poisoned")
            .by_plan
            .get(plan)
            .and_then(|s| s.approved)
    }

    /// Plans reported succeeded.
    pub fn applied(&self) -> usize {
        self.applied.lock().expect("not poisoned").len()
    }
}

/// The runners of a fleet, stopped on drop.
pub struct Fleet {
    /// What they recorded.
    pub shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Fleet {
    /// Mints each install's runner token (as `admin`) and starts its runner; returns
    /// once every runner listed its Plans and watches.
    pub async fn start(
        url: &str,
        admin: &Client,
        namespace: &str,
        installs: &[String],
    ) -> anyhow::Result<Fleet> {
        let shared = Arc::new(Shared::default());
        let started: Vec<_> = futures::stream::iter(installs.iter().cloned())
            .map(|install| {
                let shared = shared.clone();
                async move {
                    let token = outpost_runner::token::mint(admin, namespace, &install).await?;
                    let client = runner_client(url, namespace, token)?;
                    let (ready, watching) = tokio::sync::oneshot::channel();
                    let runner = Runner {
                        plans: Api::namespaced(client.clone(), namespace),
                        lean_plans: Api::namespaced(client, namespace),
                        namespace: namespace.to_owned(),
                        name: format!("bench-runner-{install}"),
                        shared,
                    };
                    let task = tokio::spawn(runner.run(install.clone(), ready));
                    watching
                        .await
                        .with_context(|| format!("the runner of {install} stopped"))?;
                    Ok::<_, anyhow::Error>(task)
                }
            })
            .buffer_unordered(CONNECTING)
            .try_collect()
            .await?;
        Ok(Fleet {
            shared,
            tasks: started,
        })
    }
}

/// A client of its own for one runner: HTTP/2 with prior knowledge over one connection,
/// authenticated with the runner's `token`.
fn runner_client(url: &str, namespace: &str, token: String) -> anyhow::Result<Client> {
    use kube_client::client::ConfigExt as _;
    let mut config = kube_client::Config::new(url.parse()?);
    config.auth_info.token = Some(token.into());
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        // The pool forgets a connection 90 s (by default) after its last checkout, even an
        // HTTP/2 one whose watch stream is still open on it; the next call would then open
        // a second connection, and a fleet's rollout 10,000 at once.
        .pool_idle_timeout(None)
        .build_http();
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(Client::new(service, namespace))
}

struct Runner {
    plans: Api<Plan>,
    /// The Plans decoded without managed fields, as the runner watches and writes them.
    lean_plans: Api<Lean<Plan>>,
    namespace: String,
    name: String,
    shared: Arc<Shared>,
}

impl Runner {
    async fn run(self, install: String, ready: tokio::sync::oneshot::Sender<()>) {
        let config = watcher::Config::default().labels(&format!("{INSTALL_LABEL}={install}"));
        let mut events = outpost_api::lean::watcher(self.lean_plans.clone(), config)
            .default_backoff()
            .boxed();
        let mut ready = Some(ready);
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
                Ok(watcher::Event::Apply(plan) | watcher::Event::InitApply(plan)) => {
                    self.handle(plan).await;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(error = %err, runner = %self.name, "plan watch");
                    self.shared.watch_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Records the sighting; claims an approved Plan and reports it succeeded.
    async fn handle(&self, plan: Plan) {
        self.shared.see(&plan, Instant::now());
        if !outpost_runner::claim::claimable(plan.status.as_ref().and_then(|s| s.phase))
            || refusal(&plan).is_some()
        {
            return;
        }
        match claim(&self.plans, &plan, &self.name).await {
            Ok(Claim::Won(claimed)) => {
                // Claimed from Ready, the runner plans; on a `prompt` install it then asks
                // a person (one write, the diff with the phase). Claimed from Approved, it
                // applies.
                let planned =
                    claimed.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Claimed);
                if planned && self.prompt(&claimed.spec.install).await {
                    self.ask(*claimed).await;
                } else {
                    self.succeed(*claimed).await;
                }
            }
            Ok(Claim::Lost) => {
                self.shared.claims_lost.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                tracing::warn!(error = %err, plan = %plan.name_any(), "claim");
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether the install asks a person to approve each diff, as the runner reads it.
    async fn prompt(&self, install: &str) -> bool {
        // Without its managed fields, as the runner reads it.
        let installs: Api<Lean<Install>> =
            Api::namespaced(self.plans.clone().into_client(), self.plans_namespace());
        match installs.get(install).await {
            Ok(Lean(install)) => install.spec.approval_mode() == ApprovalMode::Prompt,
            Err(err) => {
                tracing::warn!(error = %err, %install, "reading the install");
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
                true
            }
        }
    }

    fn plans_namespace(&self) -> &str {
        &self.namespace
    }

    /// Posts a claimed Plan's (simulated) diff for a person's approval, fenced by the
    /// claim's resourceVersion: `AwaitingApproval` and the diff in one write.
    async fn ask(&self, mut plan: Plan) {
        let name = plan.name_any();
        let status = plan.status.get_or_insert_with(Default::default);
        status.phase = Some(PlanPhase::AwaitingApproval);
        status.diff = Some(simulated_diff(&name));
        if let Err(err) = self
            .lean_plans
            .replace_status(&name, &PostParams::default(), &Lean(plan))
            .await
        {
            tracing::warn!(error = %err, plan = %name, "asking for approval");
            self.shared.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reports a claimed Plan succeeded with its diff, fenced by the claim's
    /// resourceVersion.
    async fn succeed(&self, mut plan: Plan) {
        let name = plan.name_any();
        let status = plan.status.get_or_insert_with(Default::default);
        if status.diff.is_none() {
            status.diff = Some(simulated_diff(&name));
        }
        status.phase = Some(PlanPhase::Succeeded);
        status.finished_at = Some(Time(jiff::Timestamp::now()));
        status.outputs = [("ok".to_owned(), json!(true))].into();
        match self
            .lean_plans
            .replace_status(&name, &PostParams::default(), &Lean(plan))
            .await
        {
            Ok(_) => {
                if !self
                    .shared
                    .applied
                    .lock()
                    .expect("not poisoned")
                    .insert(name)
                {
                    self.shared.applied_twice.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, plan = %name, "report");
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The diff a simulated runner reports: one resource to add, hashed by the Plan's name.
fn simulated_diff(plan: &str) -> PlanDiff {
    let mut diff = PlanDiff::new(outpost_api::content_hash(&json!({"plan": plan})), 1, 0, 0);
    diff.resources = vec![ResourceChange {
        address: "terraform_data.bench".into(),
        action: ChangeAction::Create,
        fields: Vec::new(),
        note: None,
    }];
    diff
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn plan(name: &str, phase: &str) -> Plan {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
            "metadata": {"name": name},
            "spec": {"install": "i", "entity": {"kind": "component", "name": "c"},
                     "operation": "deploy"},
            "status": {"phase": phase},
        }))
        .expect("a valid Plan")
    }

    /// The counts are what a scan of the sightings since the instant finds.
    fn scanned(shared: &Shared, from: Instant) -> Counts {
        let mut counts = Counts::default();
        for sighting in shared.sightings_since(from).values() {
            counts.add(sighting);
        }
        counts
    }

    #[test]
    fn counts_follow_the_sightings_first_seen_since_the_phase_began() {
        let shared = Shared::default();
        let start = Instant::now();
        let t = |s: u64| start + Duration::from_secs(s);
        shared.see(&plan("old", "Pending"), t(0));
        let from = t(1);
        shared.count_from(from);
        assert_eq!(shared.counts(), Counts::default());
        let steps = [
            ("new", "Pending", 2, 0, 0),
            ("new", "Ready", 3, 1, 0),
            ("new", "Ready", 4, 1, 0),
            // First seen before the phase: not counted, whatever it becomes.
            ("old", "Ready", 5, 1, 0),
            ("manual", "AwaitingApproval", 6, 2, 1),
            ("manual", "Approved", 7, 2, 1),
        ];
        for (name, phase, at, gated, awaiting) in steps {
            shared.see(&plan(name, phase), t(at));
            assert_eq!(
                shared.counts(),
                Counts { gated, awaiting },
                "{name} {phase}"
            );
            assert_eq!(shared.counts(), scanned(&shared, from));
        }
        // Counting again from the same instant finds the same; from a later one, less.
        shared.count_from(from);
        assert_eq!(
            shared.counts(),
            Counts {
                gated: 2,
                awaiting: 1
            }
        );
        shared.count_from(t(6));
        assert_eq!(
            shared.counts(),
            Counts {
                gated: 1,
                awaiting: 1
            }
        );
        assert_eq!(shared.approved_at("manual"), Some(t(7)));
    }
}
