//! The Rollout controller: moves a release across the installs a Rollout selects, wave
//! by wave, by setting each install's `spec.release` — or, for a rollout of one
//! component (`spec.component`), that component's entry in `spec.componentReleases`;
//! the Install controller (which holds a pinned install until its release, or the
//! component's, is the App's current one) does the rest, through the gate, approval
//! mode and maintenance windows as for any Plan.
//!
//! * The release (the App's current one unless `spec.release` names it), the component
//!   and the waves ([`form_waves`]) are fixed in the status when the rollout starts.
//!   A wave of a component the App does not have does not start (halt
//!   `ComponentNotFound`).
//! * Each reconcile counts every started wave's installs ([`outcome`], [`tally`]) and
//!   takes the [`next_step`]: halt, wait, pause, start the next wave or complete.
//! * A halt is recorded in `status.halt` and stays until `outpost rollout resume` clears
//!   it; the rollout then halts again if the reason still holds. Status writes are
//!   fenced by the resourceVersion so they never undo a resume.
//! * `spec.paused` starts no new wave; `spec.aborted` stops for good. Neither touches
//!   installs already moved. A `Completed` or `Aborted` rollout is not looked at again
//!   (its counts are those of when it finished).
//! * Deleting a Rollout leaves every install's `spec.release` (and
//!   `spec.componentReleases`) as it is. A whole-release rollout clears the
//!   `spec.componentReleases` of each install it moves.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_client::api::{Api, ListParams, Patch, PatchParams};
use kube_client::core::{Selector, SelectorExt as _};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{
    App, Component, Halt, Install, Plan, Rollout, RolloutPhase, RolloutStatus, WaveStatus,
};
use serde_json::json;

use outpost_api::labels::INSTALL as INSTALL_LABEL;

use crate::caches::installs::{Change, touched};
use crate::logic::rollout_waves::{Next, Outcome, form_waves, next_step, outcome, tally};

/// Condition: the rollout halted by itself (reason and failing installs in the message).
pub use outpost_api::condition::HALTED;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
}

struct Context {
    client: Client,
}

/// Runs the Rollout controller until the stream ends; `changes` follows the shared watch
/// of Installs ([`crate::caches::installs::InstallCache`]).
pub async fn run(client: Client, changes: impl Stream<Item = Change> + Send + 'static) {
    let ctx = Arc::new(Context {
        client: client.clone(),
    });
    // An install's status moving (a Plan succeeded or failed) may complete or halt a wave.
    Controller::new(Api::<Rollout>::all(client), crate::watch_config())
        .reconcile_all_on(touched(changes))
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "rollout reconcile");
            }
        })
        .await;
}

async fn reconcile(rollout: Arc<Rollout>, ctx: Arc<Context>) -> Result<Action, RolloutError> {
    let namespace = rollout.namespace().unwrap_or_default();
    let client = &ctx.client;
    let spec = &rollout.spec;
    let previous = rollout.status.clone().unwrap_or_default();
    // Finished rollouts are left alone (every install change would otherwise recount them).
    let finished = match previous.phase {
        Some(RolloutPhase::Completed) => true,
        Some(RolloutPhase::Aborted) => spec.aborted,
        _ => false,
    };
    if finished {
        return Ok(Action::await_change());
    }
    let mut status = RolloutStatus {
        observed_generation: rollout.metadata.generation,
        ..previous.clone()
    };
    let app = Api::<App>::namespaced(client.clone(), &namespace)
        .get_opt(&spec.app)
        .await?;
    let app_release = app
        .as_ref()
        .and_then(|a| a.status.as_ref())
        .and_then(|s| s.release.clone());
    let Some(release) = previous
        .release
        .clone()
        .or_else(|| spec.release.clone())
        .or_else(|| app_release.clone())
    else {
        status.phase = Some(if spec.aborted {
            RolloutPhase::Aborted
        } else {
            RolloutPhase::Pending
        });
        write_status(&rollout, client, status).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    let installs: BTreeMap<String, Install> =
        Api::<Install>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default().fields(&format!("spec.app={}", spec.app)))
            .await?
            .items
            .into_iter()
            .map(|i| (i.name_any(), i))
            .collect();

    if previous.release.is_none() {
        // Starting: fix the release and the waves.
        let selector = spec
            .selector
            .clone()
            .map(Selector::try_from)
            .transpose()
            .unwrap_or_else(|err| {
                // Admission refuses such selectors; an object stored before would select nothing.
                tracing::warn!(rollout = %rollout.name_any(), error = %err, "invalid selector");
                Some(Selector::from_iter([("outpost.dev/invalid-selector", "")]))
            });
        let selected: Vec<&Install> = installs
            .values()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
            .filter(|i| selector.as_ref().is_none_or(|s| s.matches(i.labels())))
            .collect();
        let size = spec.wave_size_of(selected.len());
        status.release = Some(release.clone());
        status.component = spec.component.clone();
        status.waves = form_waves(&selected, spec.order_by.as_deref(), size)
            .into_iter()
            .map(|installs| WaveStatus {
                pending: installs.len() as u32,
                installs,
                ..WaveStatus::default()
            })
            .collect();
    }

    let component = status.component.clone();

    // Count every started wave.
    let now = jiff::Timestamp::now();
    let mut waves = Vec::with_capacity(status.waves.len());
    for wave in &status.waves {
        if wave.started_at.is_none() {
            waves.push(tally(wave, &vec![Outcome::Waiting; wave.installs.len()]));
            continue;
        }
        let mut outcomes = Vec::with_capacity(wave.installs.len());
        for name in &wave.installs {
            let install = installs.get(name);
            let mut result = outcome(install, &[], &release, component.as_deref());
            if result.needs_plans() {
                let plans = Api::<Plan>::namespaced(client.clone(), &namespace)
                    .list(&ListParams::default().labels(&format!("{INSTALL_LABEL}={name}")))
                    .await?
                    .items;
                result = outcome(install, &plans, &release, component.as_deref());
            }
            outcomes.push(result);
        }
        let mut counted = tally(wave, &outcomes);
        if counted.pending == 0 && counted.completed_at.is_none() {
            counted.completed_at = Some(Time(now));
        }
        waves.push(counted);
    }
    status.waves = waves;

    let next = next_step(spec, &status.waves, now);
    let superseded = app_release.as_deref() != Some(release.as_str());
    // Checked as a wave is about to start (a resume after this halt checks again).
    let missing_component = match (&next, &component) {
        (Next::Start(_), Some(component)) if !superseded && status.halt.is_none() => {
            !has_component(client, &namespace, &spec.app, component).await?
        }
        _ => false,
    };
    let mut again = Duration::from_secs(30);
    if status.halt.is_none() && !spec.aborted {
        status.halt = match &next {
            Next::Halt(i) => {
                let wave = &status.waves[*i];
                Some(Halt {
                    wave: *i as u32 + 1,
                    reason: "WaveFailed".into(),
                    message: format!(
                        "wave {} has {} failed and {} denied of {} installs, more than the {} allowed (spec.maxFailures): {}",
                        i + 1,
                        wave.failed,
                        wave.denied,
                        wave.installs.len(),
                        spec.max_failures_of(wave.installs.len()),
                        wave.failures.join("; ")
                    ),
                    installs: failing_installs(wave),
                    at: Time(now),
                })
            }
            Next::Completed => None,
            _ if superseded => Some(Halt {
                wave: status
                    .waves
                    .iter()
                    .filter(|w| w.started_at.is_some())
                    .count() as u32,
                reason: "ReleaseSuperseded".into(),
                message: format!(
                    "the App's release is now {}, not {release}: only the App's current release can be deployed; abort this rollout and start another",
                    app_release.as_deref().unwrap_or("unknown")
                ),
                installs: vec![],
                at: Time(now),
            }),
            Next::Start(i) if missing_component => Some(Halt {
                wave: *i as u32 + 1,
                reason: "ComponentNotFound".into(),
                message: format!(
                    "App {} has no component {} at release {release}: no install is moved; abort this rollout",
                    spec.app,
                    component.as_deref().unwrap_or_default()
                ),
                installs: vec![],
                at: Time(now),
            }),
            _ => None,
        };
    }
    status.phase = Some(if spec.aborted {
        RolloutPhase::Aborted
    } else if status.halt.is_some() {
        RolloutPhase::Halted
    } else if next == Next::Completed {
        RolloutPhase::Completed
    } else if spec.paused {
        RolloutPhase::Paused
    } else {
        match next {
            Next::Start(i) => {
                move_wave(
                    client,
                    &namespace,
                    &status.waves[i],
                    &release,
                    component.as_deref(),
                )
                .await?;
                status.waves[i].started_at = Some(Time(now));
                again = Duration::from_secs(1);
            }
            Next::PauseBefore(_, left) => again = left.max(Duration::from_millis(100)),
            _ => again = Duration::from_secs(5),
        }
        RolloutPhase::Progressing
    });
    status.current_wave = status
        .waves
        .iter()
        .filter(|w| w.started_at.is_some())
        .count() as u32;
    status.wave_count = status.waves.len() as u32;
    status.updated = status.waves.iter().map(|w| w.succeeded).sum();
    status.total = status.waves.iter().map(|w| w.installs.len() as u32).sum();
    status.conditions = halted_condition(&previous, status.halt.as_ref(), &rollout);
    write_status(&rollout, client, status).await?;
    Ok(Action::requeue(again))
}

/// The installs a wave's failures name (each failure starts with the install's name).
fn failing_installs(wave: &WaveStatus) -> Vec<String> {
    wave.failures
        .iter()
        .filter_map(|f| f.split_once(':').map(|(install, _)| install.to_owned()))
        .collect()
}

/// Whether the App's current objects have `component`.
async fn has_component(
    client: &Client,
    namespace: &str,
    app: &str,
    component: &str,
) -> Result<bool, RolloutError> {
    let of_app = ListParams::default().fields(&format!("spec.app={app}"));
    Ok(Api::<Component>::namespaced(client.clone(), namespace)
        .list(&of_app)
        .await?
        .items
        .iter()
        .any(|c| c.name_any() == component))
}

/// Moves every install of `wave` to `release`: its `spec.release` (clearing its
/// `spec.componentReleases`, which the whole release supersedes), or only
/// `component`'s entry in `spec.componentReleases`. A merge patch of those fields only,
/// so setting them again (a status write lost to a conflict) changes nothing.
async fn move_wave(
    client: &Client,
    namespace: &str,
    wave: &WaveStatus,
    release: &str,
    component: Option<&str>,
) -> Result<(), RolloutError> {
    let api = Api::<Install>::namespaced(client.clone(), namespace);
    let patch = match component {
        None => json!({"spec": {"release": release, "componentReleases": null}}),
        Some(component) => json!({"spec": {"componentReleases": {component: release}}}),
    };
    for name in &wave.installs {
        let patch = patch.clone();
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => tracing::info!(install = %name, %release, ?component, "moved to the release"),
            // Deleted since the rollout started: nothing to move.
            Err(kube_client::Error::Api(e)) if e.code == 404 => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// `Halted`, present only while halted, keeping its transition time while it stays.
fn halted_condition(
    previous: &RolloutStatus,
    halt: Option<&Halt>,
    rollout: &Rollout,
) -> Vec<Condition> {
    let mut conditions: Vec<Condition> = previous
        .conditions
        .iter()
        .filter(|c| c.type_ != HALTED)
        .cloned()
        .collect();
    if let Some(halt) = halt {
        conditions.push(Condition {
            type_: HALTED.into(),
            status: "True".into(),
            reason: halt.reason.clone(),
            message: halt.message.clone(),
            observed_generation: rollout.metadata.generation,
            last_transition_time: halt.at.clone(),
        });
    }
    conditions
}

/// Writes the status if it changed, fenced by the resourceVersion it was computed from:
/// a resume (which clears `status.halt`) made meanwhile wins, and the rollout is looked
/// at again.
async fn write_status(
    rollout: &Rollout,
    client: &Client,
    status: RolloutStatus,
) -> Result<(), RolloutError> {
    if rollout.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut body = serde_json::to_value(&status).unwrap_or_default();
    // A merge patch leaves out what serialises to nothing; say explicitly that it is gone.
    body["halt"] = json!(status.halt);
    body["conditions"] = json!(status.conditions);
    let patch = json!({
        "metadata": {"resourceVersion": rollout.resource_version()},
        "status": body,
    });
    match Api::<Rollout>::namespaced(client.clone(), &rollout.namespace().unwrap_or_default())
        .patch_status(
            &rollout.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube_client::Error::Api(e)) if e.code == 409 => {
            tracing::debug!(rollout = %rollout.name_any(), "rollout changed meanwhile; looking again");
            Err(kube_client::Error::Api(e).into())
        }
        Err(err) => Err(err.into()),
    }
}

fn error_policy(_: Arc<Rollout>, err: &RolloutError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %err, "rollout reconcile: retrying");
    Action::requeue(Duration::from_millis(500))
}
