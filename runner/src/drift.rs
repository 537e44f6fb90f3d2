//! Drift detection: is what this runner deployed still what is live?
//!
//! * After each successful `deploy` of a component, the runner remembers its
//!   **baseline**: the Plan, its desired state and what the executor reported as applied
//!   (normalised). Baselines are kept in `STATE/drift/baselines.json`, so a restarted
//!   runner goes on detecting; a successful `teardown` forgets the component.
//! * For each baseline, the executor's `observe` reads live state back on the
//!   component's drift schedule (`spec.drift.intervalSeconds` of the Component, else the
//!   App's, else 300 s) and, for Kubernetes objects, as soon as a watch reports that one
//!   of them changed. Checks wait while a Plan for the component is approved or being
//!   applied.
//! * The field-level [`diff::field_diff`] of live against applied becomes the
//!   `DriftReport` `<install>-<component>` (see [`report`]), with the verdicts of the
//!   policies that take the `drift` input. Each newly found drift, and each return to
//!   sync, is an audit event of type `drift`.
//!
//! * In the customer's AWS account, checks run under the role of the component's deploy
//!   Plan (see [`role`]); one that cannot be assumed skips the check.
//!
//! Remediation is the control plane's: with `remediation: auto` its drift controller
//! creates a `deploy` Plan (reason `drift`) that re-applies the baseline's desired state.

pub mod diff;
pub mod report;
pub mod role;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use kube_client::ResourceExt as _;
use outpost_api::{DriftSettings, EntityKind, Operation, Plan, PlanPhase};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::executor::{Applied, Executor, Purpose, StepContext};
use crate::journal::Stage;
use crate::session::Session;

/// Directory of the drift state, under the state dir.
const DIR: &str = "drift";
/// File of the baselines, under [`DIR`].
const BASELINES_FILE: &str = "baselines.json";
/// How long a check waits while a Plan for the component is in flight.
const BUSY_RETRY: Duration = Duration::from_secs(2);
/// How long a wake-up from a watch waits for more changes to arrive with it.
const SETTLE: Duration = Duration::from_millis(100);

/// What a component's live state is compared with: its last successful deploy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// The component.
    pub component: String,
    /// The deploy Plan.
    pub plan: String,
    /// The Plan's uid.
    pub plan_uid: String,
    /// The executor type (`kubernetes_manifest`, ...).
    pub executor: String,
    /// The Plan's desired state (secret references unresolved).
    pub desired: Value,
    /// What the executor reported as applied, normalised.
    pub last_applied: Value,
    /// The component's working directory.
    pub work_dir: PathBuf,
    /// The role the Plan ran under (rendered name), which checks assume too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The drift state a session shares: baselines (persisted) and the wake-ups of the
/// detector and the reporter.
pub struct Drift {
    path: PathBuf,
    baselines: Mutex<BTreeMap<String, Baseline>>,
    /// Wakes the detector (a baseline changed).
    pub baselines_changed: Notify,
    /// Reports owed to the control plane.
    pub reports: report::OwedReports,
}

impl Drift {
    /// Opens the drift state in `state_dir` (empty on first start).
    pub fn open(state_dir: &Path) -> anyhow::Result<Self> {
        let dir = state_dir.join(DIR);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join(BASELINES_FILE);
        let baselines = read_json(&path)?.unwrap_or_default();
        Ok(Drift {
            path,
            baselines: Mutex::new(baselines),
            baselines_changed: Notify::new(),
            reports: report::OwedReports::open(&dir)?,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Baseline>> {
        self.baselines
            .lock()
            .expect("drift lock is never poisoned: updates do not panic")
    }

    /// The baselines, by component.
    pub fn baselines(&self) -> BTreeMap<String, Baseline> {
        self.lock().clone()
    }

    /// Records what a finished step means for drift: a component `deploy` becomes its
    /// baseline (with `role`, the Plan's), a `teardown` removes it. Anything else
    /// changes nothing.
    pub fn record_step(
        &self,
        ctx: &StepContext,
        executor: &str,
        applied: &Applied,
        role: Option<&str>,
    ) {
        let mut baselines = self.lock();
        match ctx.operation {
            Operation::Deploy => {
                baselines.insert(
                    ctx.entity.clone(),
                    Baseline {
                        component: ctx.entity.clone(),
                        plan: ctx.plan.clone(),
                        plan_uid: ctx.plan_uid.clone(),
                        executor: executor.to_owned(),
                        desired: ctx.desired.clone(),
                        last_applied: applied.last_applied.clone(),
                        work_dir: ctx.work_dir.clone(),
                        role: role.map(str::to_owned),
                    },
                );
            }
            Operation::Teardown => {
                baselines.remove(&ctx.entity);
            }
            _ => return,
        }
        write_json(&self.path, &*baselines).expect("the drift state in the state dir is writable");
        drop(baselines);
        self.baselines_changed.notify_one();
    }
}

/// Reads a JSON file; `None` when it does not exist.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is corrupt", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes a JSON file whole (a temporary file renamed over it).
fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// Runs forever: one detection loop per baseline, restarted when its baseline changes.
pub async fn detect(session: Arc<Session>) {
    let mut running: BTreeMap<String, (Baseline, JoinHandle<()>)> = BTreeMap::new();
    loop {
        let baselines = session.drift.baselines();
        running.retain(|component, (baseline, task)| {
            let keep = baselines.get(component) == Some(baseline) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for (component, baseline) in baselines {
            running.entry(component).or_insert_with(|| {
                let task = tokio::spawn(follow(session.clone(), baseline.clone()));
                (baseline, task)
            });
        }
        // Components torn down get no more checks; their last report stays as it was.
        let _ = tokio::time::timeout(
            Duration::from_secs(60),
            session.drift.baselines_changed.notified(),
        )
        .await;
    }
}

/// Checks one component on its schedule and whenever its live state changes.
async fn follow(session: Arc<Session>, baseline: Baseline) {
    let Some(executor) = session.executors.get(&baseline.executor) else {
        tracing::warn!(component = %baseline.component, executor = %baseline.executor,
            "no executor for the component's type: drift is not checked");
        return;
    };
    let interval = interval(&session, &baseline).await;
    let mut changes: Option<BoxStream<'static, ()>> =
        match executor.changes(&baseline.last_applied).await {
            Ok(changes) => changes,
            Err(e) => {
                tracing::warn!(component = %baseline.component, error = %format!("{e:#}"),
                    "cannot watch the component's objects; checking on schedule only");
                None
            }
        };
    tracing::info!(component = %baseline.component, plan = %baseline.plan, ?interval,
        watched = changes.is_some(), "checking drift");
    let mut role = None;
    loop {
        let wait = if busy(&session, &baseline.component) {
            BUSY_RETRY
        } else {
            check(&session, &baseline, executor.as_ref(), &mut role).await;
            interval
        };
        let changed = async {
            match changes.as_mut() {
                Some(stream) => {
                    if stream.next().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                    // Let a burst of changes settle into one check.
                    tokio::time::sleep(SETTLE).await;
                    while let Some(Some(())) = futures::FutureExt::now_or_never(stream.next()) {}
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = changed => {}
        }
    }
}

/// Whether a Plan for `component` is approved, or claimed and not finished here: its
/// live state is about to change, so comparing it with the current baseline means
/// nothing. The journal says what this runner finished even while the control plane,
/// offline, still shows the Plan running.
fn busy(session: &Session, component: &str) -> bool {
    let plans = session.store.state();
    let journal = session
        .journal
        .lock()
        .expect("journal lock is never poisoned");
    plans.iter().any(|plan: &Arc<Plan>| {
        if plan.spec.install != session.install
            || plan.spec.entity.kind != EntityKind::Component
            || plan.spec.entity.name != component
        {
            return false;
        }
        match journal.stage(&plan.uid().unwrap_or_default()) {
            Some(Stage::Applied { .. } | Stage::Failed { .. } | Stage::Reported | Stage::Lost) => {
                false
            }
            Some(Stage::Claiming { .. } | Stage::Claimed | Stage::Applying { .. }) => true,
            // A diff waiting for a person changes nothing live; once approved it will.
            Some(Stage::Awaiting { .. }) => false,
            Some(Stage::Released { .. }) => matches!(
                plan.status.as_ref().and_then(|s| s.phase),
                Some(PlanPhase::Approved | PlanPhase::Applying)
            ),
            None => matches!(
                plan.status.as_ref().and_then(|s| s.phase),
                Some(
                    PlanPhase::Ready
                        | PlanPhase::Approved
                        | PlanPhase::Claimed
                        | PlanPhase::Planning
                        | PlanPhase::Applying
                )
            ),
        }
    })
}

/// The component's drift interval: its rendered `drift` settings, else the App's, else
/// the default. The App is read once per baseline; if it cannot be, the default holds.
async fn interval(session: &Session, baseline: &Baseline) -> Duration {
    let own: Option<DriftSettings> = baseline
        .desired
        .get("drift")
        .and_then(|d| serde_json::from_value(d.clone()).ok());
    if let Some(seconds) = own.as_ref().and_then(|d| d.interval_seconds) {
        return Duration::from_secs(seconds.into());
    }
    match tokio::time::timeout(Duration::from_secs(10), session.app()).await {
        Ok(Ok(app)) => app.spec.drift.unwrap_or_default().interval(),
        _ => DriftSettings::default().interval(),
    }
}

/// The customer's local policies on the static configuration a check would run (a
/// terraform refresh-only plan runs providers, with the role's credentials), before it
/// runs: `Err` with the reason when the configuration cannot be read, needs a provider
/// not allowed, or a local policy denies it. Verdicts are audited (`verdict`, with
/// `drift: true`) when a policy took the input.
async fn gate(
    session: &Session,
    baseline: &Baseline,
    executor: &dyn Executor,
    ctx: &StepContext,
) -> Result<(), String> {
    let config = executor
        .configuration(ctx, Purpose::Observe)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let Some(config) = config else {
        return Ok(());
    };
    let subject = crate::audit::Subject {
        plan: Some(baseline.plan.clone()),
        entity: Some(outpost_api::EntityRef {
            kind: EntityKind::Component,
            name: baseline.component.clone(),
        }),
        role: baseline.role.clone(),
    };
    let drift = serde_json::json!({"drift": true});
    crate::worker::policies::local_verdicts(session, &config, &subject, drift, false).map(drop)
}

/// One check under the component's role: observe, compare, report (buffered), audit a
/// new drift.
async fn check(
    session: &Session,
    baseline: &Baseline,
    executor: &dyn Executor,
    role: &mut Option<role::DriftRole>,
) {
    let assumed = match role::assume(session, baseline, role).await {
        Ok(assumed) => assumed,
        Err(reason) => {
            tracing::warn!(component = %baseline.component, %reason, "drift check skipped");
            return;
        }
    };
    let mut env = assumed.map(|r| r.env.clone()).unwrap_or_default();
    // Masked in the report and its audit event (`crate::mask`).
    let held = session.masks.hold();
    let source = assumed
        .and_then(|r| r.secrets.as_deref())
        .unwrap_or_else(|| session.secrets.as_ref());
    match crate::secrets::resolve(&baseline.desired, source).await {
        Ok(secrets) => env.extend(
            secrets
                .iter()
                .map(|(k, v)| (crate::secrets::env_name(k), v.clone())),
        ),
        Err(e) => {
            tracing::warn!(component = %baseline.component, error = %e, "drift check skipped");
            return;
        }
    }
    held.add(&crate::mask::Masker::of_env(&env));
    let ctx = StepContext {
        plan: baseline.plan.clone(),
        plan_uid: baseline.plan_uid.clone(),
        operation: Operation::Deploy,
        entity: baseline.component.clone(),
        desired: baseline.desired.clone(),
        work_dir: baseline.work_dir.clone(),
        env,
        timeout: Duration::from_secs(600),
    };
    if let Err(reason) = gate(session, baseline, executor, &ctx).await {
        tracing::warn!(component = %baseline.component, %reason, "drift check skipped");
        return;
    }
    let observed = match tokio::time::timeout(
        ctx.timeout,
        executor.observe(&ctx, &baseline.last_applied),
    )
    .await
    {
        Ok(Ok(observed)) => observed,
        Ok(Err(e)) => {
            tracing::warn!(component = %baseline.component, error = %format!("{e:#}"), "cannot observe live state");
            return;
        }
        Err(_) => {
            tracing::warn!(component = %baseline.component, "observing live state timed out");
            return;
        }
    };
    let diff = diff::field_diff(&baseline.last_applied, &observed);
    report::record(session, baseline, diff).await;
}
