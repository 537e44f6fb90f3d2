//! `outpost wait INSTALL`: blocks until an install has converged on its latest spec,
//! printing each of its Plans as it finishes (what `outpost up` shows, for scripts and
//! for a second terminal).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::bail;
use kube_client::api::{Api, ListParams};
use outpost_api::{Install, InstallPhase, Plan, PlanPhase};

use crate::client::Common;

/// Arguments of `outpost wait`.
#[derive(clap::Args)]
pub struct WaitArgs {
    /// The install to wait for.
    install: String,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    #[command(flatten)]
    common: Common,
}

/// Whether a Plan is in a phase it never leaves.
pub fn finished(plan: &Plan) -> bool {
    plan.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(PlanPhase::is_terminal)
}

/// One line for a finished Plan: `deploy web-image Succeeded in 2 s (PLAN)`.
pub fn describe(plan: &Plan) -> String {
    let status = plan.status.clone().unwrap_or_default();
    // Plan timestamps have whole seconds, so durations are whole seconds too.
    let seconds = match (&status.started_at, &status.finished_at) {
        (Some(started), Some(finished)) => match finished.0.duration_since(started.0).as_secs() {
            0 => " in <1 s".to_owned(),
            secs => format!(" in {secs} s"),
        },
        _ => String::new(),
    };
    let message = status
        .message
        .filter(|_| status.phase != Some(PlanPhase::Succeeded))
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    format!(
        "{} {} {:?}{seconds} ({}){message}",
        plan.spec.operation,
        plan.spec.entity.name,
        status.phase.unwrap_or(PlanPhase::Pending),
        plan.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The Plans of install `name` that finished since the last call, oldest first: the first
/// call only records what had finished already.
pub struct FinishedPlans {
    plans: Api<Plan>,
    selector: ListParams,
    seen: Option<BTreeSet<String>>,
}

impl FinishedPlans {
    pub fn new(client: &kube_client::Client, namespace: &str, name: &str) -> Self {
        FinishedPlans {
            plans: Api::namespaced(client.clone(), namespace),
            selector: ListParams::default().labels(&format!("outpost.dev/install={name}")),
            seen: None,
        }
    }

    /// Lists the install's Plans; returns the newly finished ones and all of them.
    pub async fn poll(&mut self) -> kube_client::Result<(Vec<Plan>, Vec<Plan>)> {
        let all = self.plans.list(&self.selector).await?.items;
        let mut done: Vec<Plan> = all.iter().filter(|p| finished(p)).cloned().collect();
        done.sort_by_key(|p| p.status.as_ref().and_then(|s| s.finished_at.clone()));
        let uid = |p: &Plan| p.metadata.uid.clone().unwrap_or_default();
        let new = match &mut self.seen {
            None => {
                self.seen = Some(done.iter().map(uid).collect());
                Vec::new()
            }
            Some(seen) => done.into_iter().filter(|p| seen.insert(uid(p))).collect(),
        };
        Ok((new, all))
    }

    /// How many Plans had finished when the first poll ran.
    pub fn finished_before(&self) -> usize {
        self.seen.as_ref().map_or(0, BTreeSet::len)
    }
}

/// Waits until the install's controller has seen its latest spec, none of its Plans is
/// unfinished and it is Active; fails when it turns Degraded or the timeout passes.
pub async fn run(args: WaitArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let name = &args.install;
    let installs: Api<Install> = Api::namespaced(client.clone(), &namespace);
    let mut plans = FinishedPlans::new(&client, &namespace, name);
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut phase = None;
    let mut awaiting_told = BTreeSet::new();
    loop {
        let Some(install) = installs.get_opt(name).await? else {
            bail!(
                "install {namespace}/{name} not found: list installs with `outpost status -n {namespace}`"
            );
        };
        let (new, all) = plans.poll().await?;
        for plan in &new {
            println!("plan {}", describe(plan));
        }
        let status = install.status.clone().unwrap_or_default();
        if status.phase != phase {
            if let Some(now) = status.phase {
                println!("install {namespace}/{name} is {now:?}");
            }
            phase = status.phase;
        }
        let unfinished: Vec<&Plan> = all.iter().filter(|p| !finished(p)).collect();
        for plan in &unfinished {
            let plan_name = plan.metadata.name.clone().unwrap_or_default();
            let awaiting =
                plan.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::AwaitingApproval);
            // Told again when the runner planned again and shows another diff.
            let diff = plan.status.as_ref().and_then(|s| s.diff.as_ref());
            let hash = diff.map(|d| d.hash.clone()).unwrap_or_default();
            if awaiting && awaiting_told.insert((plan_name.clone(), hash)) {
                let summary =
                    diff.map_or_else(String::new, |d| format!(" of its diff ({})", d.summary));
                println!(
                    "plan {plan_name} awaits approval{summary}: `outpost approve {plan_name} -n {namespace}` (or `outpost deny`)"
                );
            }
        }
        let seen_latest = status.observed_generation >= install.metadata.generation;
        if seen_latest && unfinished.is_empty() {
            match status.phase {
                Some(InstallPhase::Active) => return Ok(()),
                Some(InstallPhase::Degraded) => {
                    let failed = all
                        .iter()
                        .filter(|p| {
                            matches!(
                                p.status.as_ref().and_then(|s| s.phase),
                                Some(PlanPhase::Failed | PlanPhase::Denied)
                            )
                        })
                        .max_by_key(|p| p.status.as_ref().and_then(|s| s.finished_at.clone()));
                    match failed {
                        Some(plan) => bail!(
                            "install {namespace}/{name} is Degraded: plan {}; see `outpost logs {} -n {namespace}`, fix the cause and `outpost deploy`",
                            describe(plan),
                            plan.metadata.name.as_deref().unwrap_or_default()
                        ),
                        None => bail!(
                            "install {namespace}/{name} is Degraded: see its conditions with `kubectl describe install {name} -n {namespace}`"
                        ),
                    }
                }
                _ => {}
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "install {namespace}/{name} did not converge within {} s (phase {:?}, {} unfinished Plans): see `outpost status -n {namespace}` and `kubectl get plans -l outpost.dev/install={name} -n {namespace}`",
                args.timeout,
                status.phase,
                unfinished.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
