//! Deploy: one step of a live install towards its App's release. Sandbox `provision`
//! (or `reprovision`) first, then a `deploy` Plan per component in dependency order
//! ([`deploy_steps`]), action hooks around them, requested Plans, cron-triggered
//! actions once the install is up, and the status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_client::ResourceExt as _;
use kube_client::runtime::controller::Action;
use outpost_api::condition::{HELD, RELEASE_PINNED};
use outpost_api::{
    Action as AppAction, App, Component, ComponentPhase, ComponentState, EntityKind, EntityRef,
    Install, InstallPhase, Operation, Plan, PlanPhase, TriggerKind,
};

use super::component_pins::{self, ComponentPins};
use super::rendering::Renderer;
use super::status::{set_status, set_status_with};
use super::steps::{
    PlanMaker, Progress, Step, create_plan, create_ready, outputs_of, phase_in, requested_plans,
    short, trigger_step, with_triggers,
};
use super::{Context, InstallError};
use crate::caches::plan_index::PlanIndex;
use crate::logic::drift::component_drift;
use crate::logic::graph::ComponentGraph;
use crate::logic::maintenance::is_open;

/// Moves a live install one step towards its App's release. Returns when to look again.
pub(super) async fn deploy(install: &Install, ctx: &Context) -> Result<Action, InstallError> {
    let index = &ctx.plans;
    let namespace = install.namespace().unwrap_or_default();
    let name = install.name_any();
    let mut plans: BTreeMap<String, Arc<Plan>> = index.of(&namespace, &name);
    let Some(release) = ctx.apps.release(&namespace, &install.spec.app) else {
        set_status(install, ctx, InstallPhase::Pending, vec![], None, None).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    let maker = PlanMaker::new(ctx, &namespace, &release);
    // The release of the objects just read, not the App's status: the App controller
    // records a change a moment after it is made, and rendering the new objects under the
    // old release's name would move a pinned install, and leave an unpinned one's status
    // (and `{{ app.release }}` in what it renders) at the old release for good.
    let live = release.hash.clone();
    let mut app = release.app.clone();
    let components = &release.components;
    let actions = release.actions.clone();
    let pins = ComponentPins::of(install, &live, components, &plans, false);
    if let Some(pinned) = &install.spec.release
        && live != *pinned
        && pins.is_none()
    {
        hold_on_release(install, ctx, pinned, &live).await?;
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    app.status.get_or_insert_default().release = Some(live);
    let Ok(graph) = &release.graph else {
        set_status(install, ctx, InstallPhase::Degraded, vec![], None, None).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let outputs = outputs_of(&plans);
    let renderer = Renderer::new(&ctx.renders, &app, install, &outputs, &release);
    let (steps, all_rendered) = deploy_steps(&name, graph, components, &renderer, &plans);
    let steps = with_triggers(steps, &actions, &renderer);
    let steps = component_pins::select(pins.as_ref(), steps, &plans);
    let actions = component_pins::actions(pins.as_ref(), actions);

    let window_open = is_open(&install.spec.maintenance_windows, jiff::Timestamp::now());
    let Progress {
        blocked,
        failed,
        mut held,
    } = create_ready(
        &steps,
        &mut plans,
        &maker,
        index,
        install,
        &app,
        window_open,
    )
    .await?;
    requested_plans(install, &app, &steps, &actions, &renderer, &maker, index).await?;
    let done = !blocked && failed.is_none() && all_rendered;
    // Cron-triggered actions run on schedule once the install is up.
    let mut next_cron: Option<jiff::Timestamp> = None;
    if done {
        let cron = Cron {
            install,
            app: &app,
            renderer: &renderer,
            maker: &maker,
            index,
            window_open,
        };
        for action in &actions {
            cron.run(action, &mut plans, &mut next_cron, &mut held)
                .await?;
        }
    }
    let phase = match (&failed, done, phase_in(&plans, &steps[0].name)) {
        (Some(_), _, _) => InstallPhase::Degraded,
        (None, true, _) => InstallPhase::Active,
        (None, false, Some(PlanPhase::Succeeded)) => InstallPhase::Deploying,
        _ => InstallPhase::Provisioning,
    };
    let reports = ctx.drift.of(&namespace, &name);
    let states = component_states(
        graph,
        &steps,
        &plans,
        app.status.as_ref().and_then(|s| s.release.clone()),
    );
    let (phase, mut states) = component_pins::hold_states(pins.as_ref(), phase, states, install);
    let drift = component_drift(reports.values().map(Arc::as_ref));
    for state in &mut states {
        if let Some((drift, fields)) = drift.get(&state.name) {
            state.drift = Some(*drift);
            state.drifted_fields = Some(*fields);
        }
    }
    let held_condition = held.as_ref().map(|step| Condition {
        type_: HELD.into(),
        status: "True".into(),
        reason: "OutsideMaintenanceWindow".into(),
        message: format!("plan {step} waits for the install's next maintenance window"),
        observed_generation: install.metadata.generation,
        last_transition_time: Time(jiff::Timestamp::now()),
    });
    let last = steps
        .iter()
        .rev()
        .find(|s| plans.contains_key(&s.name))
        .map(|s| s.name.clone());
    let ours = held_condition
        .into_iter()
        .chain(component_pins::condition(pins.as_ref(), install));
    set_status_with(install, ctx, phase, states, last, ours.collect(), None).await?;
    let again = if done {
        300
    } else if held.is_some() {
        60
    } else {
        5
    };
    let until_cron = next_cron.map(|next| {
        let wait = next.as_millisecond() - jiff::Timestamp::now().as_millisecond();
        Duration::from_millis(wait.clamp(50, 300_000) as u64)
    });
    let again = Duration::from_secs(again);
    Ok(Action::requeue(until_cron.map_or(again, |c| c.min(again))))
}

/// The steps that deploy the install: the sandbox's `provision` (`reprovision` once an
/// earlier sandbox Plan succeeded), then each component's `deploy` in dependency order,
/// each waiting for the sandbox and its dependencies. A Plan's name carries the hash of
/// what it deploys. The list stops at the first component that cannot be rendered yet
/// (its dependencies' outputs are missing); the flag says whether all were rendered.
fn deploy_steps(
    name: &str,
    graph: &ComponentGraph,
    components: &[Component],
    renderer: &Renderer<'_>,
    plans: &BTreeMap<String, Arc<Plan>>,
) -> (Vec<Step>, bool) {
    // The sandbox's desired state is its rendered definition: only inputs it uses
    // re-provision it.
    let (sandbox_desired, sandbox_hash) = renderer.sandbox();
    let sandbox = format!("{name}-provision-{}", short(&sandbox_hash));
    let provisioned_before = plans.values().any(|p| {
        p.spec.entity.kind == EntityKind::Sandbox
            && matches!(
                p.spec.operation,
                Operation::Provision | Operation::Reprovision
            )
            && p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Succeeded)
            && p.name_any() != sandbox
    });
    let mut steps = vec![Step {
        name: sandbox.clone(),
        operation: if provisioned_before {
            Operation::Reprovision
        } else {
            Operation::Provision
        },
        entity: EntityRef {
            kind: EntityKind::Sandbox,
            name: "sandbox".into(),
        },
        desired: sandbox_desired,
        waits_for: vec![],
    }];
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    let mut step_names: BTreeMap<String, String> = BTreeMap::new();
    for component in graph.deploy_order() {
        let Some(object) = components.iter().find(|c| c.name_any() == *component) else {
            return (steps, false);
        };
        let deps: Vec<String> = graph
            .dependencies_of(component)
            .map(str::to_owned)
            .collect();
        let dep_keys: Vec<&String> = deps.iter().filter_map(|d| keys.get(d)).collect();
        // Rendering needs the dependencies' outputs: until they are deployed, wait.
        let Some((rendered, key)) = renderer.component(object, &dep_keys) else {
            return (steps, false);
        };
        keys.insert(component.clone(), key.clone());
        let step = format!("{name}-deploy-{component}-{}", short(&key));
        step_names.insert(component.clone(), step.clone());
        let mut waits_for = vec![sandbox.clone()];
        waits_for.extend(deps.iter().filter_map(|d| step_names.get(d).cloned()));
        steps.push(Step {
            name: step,
            operation: Operation::Deploy,
            entity: EntityRef {
                kind: EntityKind::Component,
                name: component.clone(),
            },
            desired: rendered,
            waits_for,
        });
    }
    (steps, true)
}

/// Cron-triggered actions of an install that is up: a `trigger` Plan per schedule
/// that came due since the last one (or since the install was made), named after the
/// due time so it is made once.
struct Cron<'a> {
    install: &'a Install,
    app: &'a App,
    renderer: &'a Renderer<'a>,
    maker: &'a PlanMaker<'a>,
    index: &'a PlanIndex,
    window_open: bool,
}

impl Cron<'_> {
    /// Plans `action`'s due schedules (held outside a maintenance window) and brings
    /// `next_cron` forward to its next due time.
    async fn run(
        &self,
        action: &AppAction,
        plans: &mut BTreeMap<String, Arc<Plan>>,
        next_cron: &mut Option<jiff::Timestamp>,
        held: &mut Option<String>,
    ) -> Result<(), InstallError> {
        let name = self.install.name_any();
        let now = jiff::Timestamp::now();
        let schedules = action
            .spec
            .triggers
            .iter()
            .filter(|t| t.kind() == Some(TriggerKind::Cron))
            .filter_map(|t| t.schedule.as_deref())
            .filter_map(|text| crate::logic::cron::Schedule::parse(text).ok());
        for schedule in schedules {
            let prefix = format!("{name}-cron-{}-", action.name_any());
            let last = plans
                .keys()
                .filter_map(|n| n.strip_prefix(&prefix)?.parse::<i64>().ok())
                .max()
                .and_then(|s| jiff::Timestamp::from_second(s).ok())
                .or_else(|| {
                    self.install
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0)
                })
                .unwrap_or(now);
            let Ok((due, next)) = schedule.due(last, now) else {
                continue;
            };
            *next_cron = Some(next_cron.map_or(next, |n| n.min(next)));
            let Some(time) = due else { continue };
            let step = trigger_step(
                &format!("{prefix}{}", time.as_second()),
                action,
                self.renderer,
                vec![],
            );
            if self.window_open {
                if let Some(plan) =
                    create_plan(self.maker, self.index, self.install, self.app, &step).await?
                {
                    plans.insert(plan.name_any(), Arc::new(plan));
                }
            } else {
                *held = Some(step.name);
            }
        }
        Ok(())
    }
}

fn component_states(
    graph: &ComponentGraph,
    steps: &[Step],
    plans: &BTreeMap<String, Arc<Plan>>,
    release: Option<String>,
) -> Vec<ComponentState> {
    graph
        .deploy_order()
        .iter()
        .map(|component| {
            let step = steps
                .iter()
                .find(|s| s.entity.name == *component && s.entity.kind == EntityKind::Component);
            let plan = step.and_then(|s| plans.get(&s.name));
            let phase = plan.and_then(|p| p.status.as_ref()).and_then(|s| s.phase);
            ComponentState {
                name: component.clone(),
                release: (phase == Some(PlanPhase::Succeeded))
                    .then(|| release.clone())
                    .flatten(),
                phase: Some(match (plan, phase) {
                    (_, Some(PlanPhase::Succeeded)) => ComponentPhase::Deployed,
                    (_, Some(PlanPhase::Failed | PlanPhase::Denied)) => ComponentPhase::Failed,
                    (Some(_), _) => ComponentPhase::Deploying,
                    (None, _) => ComponentPhase::Pending,
                }),
                last_plan: step
                    .filter(|s| plans.contains_key(&s.name))
                    .map(|s| s.name.clone()),
                drift: None,
                drifted_fields: None,
            }
        })
        .collect()
}

/// An install pinned (`spec.release`) to a release other than that of the App's
/// current objects (their `release_hash`, computed here from the objects read, as the
/// App controller computes `status.release`) stays where it is: the controller renders
/// only the App's current objects, so it
/// makes no Plan at all (converge, cron or requested) until `spec.release` moves (a
/// Rollout moves it) or is removed. Its status is kept, with each component's drift
/// brought up to date, and the `ReleasePinned` condition says why nothing moves.
async fn hold_on_release(
    install: &Install,
    ctx: &Context,
    pinned: &str,
    current: &str,
) -> Result<(), InstallError> {
    let namespace = install.namespace().unwrap_or_default();
    let previous = install.status.clone().unwrap_or_default();
    let reports = ctx.drift.of(&namespace, &install.name_any());
    let drift = component_drift(reports.values().map(Arc::as_ref));
    let mut components = previous.components.clone();
    for state in &mut components {
        if let Some((drift, fields)) = drift.get(&state.name) {
            state.drift = Some(*drift);
            state.drifted_fields = Some(*fields);
        }
    }
    let message = format!(
        "pinned to release {pinned}; the App is at {current}: nothing is planned until spec.release moves (a Rollout moves it) or is removed"
    );
    let pinned_condition = Condition {
        type_: RELEASE_PINNED.into(),
        status: "True".into(),
        reason: "ReleaseNotCurrent".into(),
        message,
        observed_generation: install.metadata.generation,
        last_transition_time: Time(jiff::Timestamp::now()),
    };
    let held = previous
        .conditions
        .iter()
        .find(|c| c.type_ == HELD)
        .cloned();
    // The status is kept, not recomputed: fenced by the resourceVersion it was read at,
    // so a stale copy of the install (the watch not caught up with this controller's
    // last write) is never written back; a conflict is retried with the fresh one.
    set_status_with(
        install,
        ctx,
        previous.phase.unwrap_or(InstallPhase::Pending),
        components,
        previous.last_plan.clone(),
        held.into_iter().chain([pinned_condition]).collect(),
        install.resource_version(),
    )
    .await
}

#[cfg(test)]
#[path = "deploy_tests.rs"]
mod tests;
