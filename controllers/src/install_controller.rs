//! The Install controller: drives an install towards its App's release through Plans.
//!
//! * A finalizer on every Install.
//! * Sandbox `provision` first, then a `deploy` Plan per component in dependency order,
//!   each created once its dependencies' Plans succeeded (their outputs feed its templates).
//! * A Plan's name carries a key: the hash of the component's rendered desired state and
//!   of its dependencies' keys. An input change therefore re-plans exactly the components
//!   whose rendered state changed and their dependents, and names are deterministic, so a
//!   restarted controller never creates a Plan twice (a second create is a 409).
//! * Deleting the Install: `teardown` Plans in reverse order, then sandbox `deprovision`,
//!   then the finalizer goes.
//!
//! * An install pinned (`spec.release`) to a release other than the App's current one
//!   gets no new Plan and keeps its status (condition `ReleasePinned`): only the App's
//!   current objects can be rendered. A Rollout moves `spec.release` wave by wave.
//! * Unless some of its components are pinned to the current release
//!   (`spec.componentReleases`, set by a component Rollout): then only those are
//!   planned and the rest is held (condition `ComponentsHeld`), a separate step of
//!   converge (`install_controller/component_pins.rs`).
//!
//! Plans are owned by the Install and labelled `outpost.dev/install`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_client::api::{Api, PostParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::finalizer::{Event, finalizer};
use kube_client::runtime::{WatchStreamExt as _, reflector, watcher};
use kube_client::{Client, Resource as _, ResourceExt as _};
use outpost_api::{
    Action as AppAction, App, ComponentPhase, ComponentState, DriftReport, EntityKind, EntityRef,
    Install, InstallPhase, Operation, Plan, PlanPhase, PlanSpec, TriggerKind, content_hash,
};
use serde_json::{Value, json};

use crate::app_cache::AppCache;
use crate::graph::ComponentGraph;
use crate::maintenance::{is_maintenance, is_open};
use crate::plan_index::{InstallIndex, PlanIndex};
use crate::template::InstallOutputs;
use rendering::{Renderer, Renders};
use status::{WrittenStatus, set_status, set_status_with};

mod component_pins;
mod rendering;
mod status;

pub use component_pins::COMPONENTS_HELD;

/// The Install finalizer.
pub const FINALIZER: &str = "outpost.dev/install";
/// The label naming a Plan's Install.
pub const INSTALL_LABEL: &str = "outpost.dev/install";
/// Condition: a Plan waits for the install's next maintenance window.
pub const HELD: &str = "Held";
/// Condition: the install is pinned (`spec.release`) to a release other than the
/// App's current one, so nothing new is planned for it.
pub const RELEASE_PINNED: &str = "ReleasePinned";
/// Condition: the install's inputs no longer hold against its App's declarations (the
/// App changed them after the Install was written).
pub const INPUTS_INVALID: &str = "InputsInvalid";

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

struct Context {
    client: Client,
    plans: Arc<PlanIndex>,
    drift: Arc<InstallIndex<DriftReport>>,
    apps: AppCache,
    written: WrittenStatus,
    renders: Renders,
}

/// Runs the Install controller until the stream ends.
pub async fn run(client: Client) {
    let plans = Arc::new(PlanIndex::default());
    let drift = Arc::new(InstallIndex::<DriftReport>::default());
    // A change to an App or its objects rolls the new release out to every install.
    let (apps, app_changes) = AppCache::new(&client);
    let ctx = Arc::new(Context {
        client: client.clone(),
        plans: plans.clone(),
        drift: drift.clone(),
        apps,
        written: WrittenStatus::default(),
        renders: Renders::default(),
    });
    // An Install's own status (this controller's writes, the runner token's hash) changes
    // nothing it decides: only its spec, deletion and finalizers do.
    let (installs, installs_writer) = reflector::store();
    let install_events = watcher(Api::<Install>::all(client.clone()), crate::watch_config())
        .default_backoff()
        .reflect(installs_writer)
        .applied_objects()
        .predicate_filter(spec_or_lifecycle, Default::default());
    Controller::for_stream(install_events, installs)
        .reconcile_on(plans.watch(client.clone()))
        // A component's drift shows in the Install status as its DriftReport changes.
        .reconcile_on(drift.watch(client))
        .reconcile_all_on(app_changes)
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "install reconcile");
            }
        })
        .await;
}

async fn reconcile(install: Arc<Install>, ctx: Arc<Context>) -> Result<Action, InstallError> {
    let api =
        Api::<Install>::namespaced(ctx.client.clone(), &install.namespace().unwrap_or_default());
    if !ctx.plans.is_ready() || !ctx.drift.is_ready() || !ctx.apps.ready().await {
        // Until the indexes and caches listed once, every object would look missing.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    finalizer(&api, FINALIZER, install, |event| async {
        match event {
            Event::Apply(install) => converge(&install, &ctx, false).await,
            Event::Cleanup(install) => converge(&install, &ctx, true).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube_client::runtime::finalizer::Error::ApplyFailed(e)
        | kube_client::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => InstallError::Finalizer(other.to_string()),
    })
}

/// What of an Install makes the controller look at it again: its spec (generation),
/// deletion and finalizers.
fn spec_or_lifecycle(install: &Install) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    install.metadata.generation.hash(&mut hasher);
    install
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    install.metadata.finalizers.hash(&mut hasher);
    Some(hasher.finish())
}

/// One step towards the install's desired state: the Plan it needs.
struct Step {
    name: String,
    operation: Operation,
    entity: EntityRef,
    desired: Value,
    waits_for: Vec<String>,
}

/// Moves the install one step on (or, when `deleting`, towards removal). Returns when
/// to look again; `Ok(await_change)` in the cleanup case means done (finalizer goes).
async fn converge(
    install: &Install,
    ctx: &Context,
    deleting: bool,
) -> Result<Action, InstallError> {
    let client = &ctx.client;
    let index = &ctx.plans;
    let namespace = install.namespace().unwrap_or_default();
    let name = install.name_any();
    let plans_api = Api::<Plan>::namespaced(client.clone(), &namespace);
    let mut plans: BTreeMap<String, Arc<Plan>> = index.of(&namespace, &name);
    let Some(release) = ctx.apps.release(&namespace, &install.spec.app) else {
        if deleting {
            return Ok(Action::await_change()); // nothing was ever deployed from a missing app
        }
        set_status(install, ctx, InstallPhase::Pending, vec![], None, None).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    // The release of the objects just read, not the App's status: the App controller
    // records a change a moment after it is made, and rendering the new objects under the
    // old release's name would move a pinned install, and leave an unpinned one's status
    // (and `{{ app.release }}` in what it renders) at the old release for good.
    let live = release.hash.clone();
    let mut app = release.app.clone();
    let components = &release.components;
    let actions = release.actions.clone();
    let pins = component_pins::ComponentPins::of(install, &live, components, &plans, deleting);
    if let Some(pinned) = &install.spec.release
        && !deleting
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
    let uid = install.uid().unwrap_or_default();
    let short = |s: &str| {
        s.trim_start_matches("sha256:")
            .chars()
            .take(10)
            .collect::<String>()
    };

    let renderer = Renderer::new(&ctx.renders, &app, install, &outputs, &release);
    let mut all_rendered = true;
    let steps: Vec<Step> = if deleting {
        let mut steps = Vec::new();
        let mut previous: Vec<String> = Vec::new();
        for component in graph.teardown_order() {
            let step = format!("{name}-teardown-{component}-{}", short(&uid));
            steps.push(Step {
                name: step.clone(),
                operation: Operation::Teardown,
                entity: EntityRef {
                    kind: EntityKind::Component,
                    name: component.clone(),
                },
                // The runner tears down what it last applied; the type picks its executor.
                desired: json!({
                    "component": component,
                    "type": components
                        .iter()
                        .find(|c| c.name_any() == *component)
                        .map(|c| c.spec.type_),
                }),
                waits_for: previous.clone(),
            });
            previous = vec![step];
        }
        steps.push(Step {
            name: format!("{name}-deprovision-{}", short(&uid)),
            operation: Operation::Deprovision,
            entity: EntityRef {
                kind: EntityKind::Sandbox,
                name: "sandbox".into(),
            },
            desired: json!({"sandbox": app.spec.sandbox}),
            waits_for: previous,
        });
        steps
    } else {
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
                all_rendered = false;
                break;
            };
            let deps: Vec<String> = graph
                .dependencies_of(component)
                .map(str::to_owned)
                .collect();
            let dep_keys: Vec<&String> = deps.iter().filter_map(|d| keys.get(d)).collect();
            // Rendering needs the dependencies' outputs: until they are deployed, wait.
            let Some((rendered, key)) = renderer.component(object, &dep_keys) else {
                all_rendered = false;
                break;
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
        steps
    };

    let steps = with_triggers(steps, &actions, &renderer);
    let steps = component_pins::select(pins.as_ref(), steps, &plans);
    let actions = component_pins::actions(pins.as_ref(), actions);

    // Create every step whose prerequisites succeeded; note what is still in flight.
    let mut blocked = false;
    let mut failed = None;
    let mut held = None;
    let window_open = is_open(&install.spec.maintenance_windows, jiff::Timestamp::now());
    for step in &steps {
        match phase_in(&plans, &step.name) {
            Some(PlanPhase::Succeeded) => continue,
            Some(PlanPhase::Failed | PlanPhase::Denied) => {
                failed = Some(step.name.clone());
                continue;
            }
            Some(_) => {
                blocked = true;
                continue;
            }
            // Created, not gated yet.
            None if plans.contains_key(&step.name) => {
                blocked = true;
                continue;
            }
            None => {}
        }
        let ready = step
            .waits_for
            .iter()
            .all(|w| phase_in(&plans, w) == Some(PlanPhase::Succeeded));
        if ready && is_maintenance(step.operation) && !window_open {
            held = Some(step.name.clone());
        } else if ready
            && let Some(plan) = create_plan(&plans_api, index, install, &app, step).await?
        {
            // Counted in the status written below, so it does not take a second write.
            plans.insert(plan.name_any(), Arc::new(plan));
        }
        blocked = true;
    }
    if let Some(step) = &held {
        tracing::info!(install = %name, plan = %step, "held until the next maintenance window");
    }
    requested_plans(
        install, &app, &steps, &actions, &renderer, &plans_api, index,
    )
    .await?;
    let done = !blocked && failed.is_none() && all_rendered;
    if deleting {
        set_status(
            install,
            ctx,
            InstallPhase::Deprovisioning,
            vec![],
            None,
            None,
        )
        .await?;
        // Ok removes the finalizer; until the last Plan succeeded, keep it (an error
        // makes the controller look again soon).
        return if done {
            ctx.written.forget(install);
            ctx.renders.forget(install);
            Ok(Action::await_change())
        } else {
            Err(InstallError::Finalizer(
                "waiting for the teardown plans".into(),
            ))
        };
    }
    // Cron-triggered actions run on schedule once the install is up.
    let mut next_cron: Option<jiff::Timestamp> = None;
    if done {
        let now = jiff::Timestamp::now();
        for action in &actions {
            let schedules = action
                .spec
                .triggers
                .iter()
                .filter(|t| t.kind() == Some(TriggerKind::Cron))
                .filter_map(|t| t.schedule.as_deref())
                .filter_map(|text| crate::cron::Schedule::parse(text).ok());
            for schedule in schedules {
                let prefix = format!("{name}-cron-{}-", action.name_any());
                let last = plans
                    .keys()
                    .filter_map(|n| n.strip_prefix(&prefix)?.parse::<i64>().ok())
                    .max()
                    .and_then(|s| jiff::Timestamp::from_second(s).ok())
                    .or_else(|| install.metadata.creation_timestamp.as_ref().map(|t| t.0))
                    .unwrap_or(now);
                let Ok((due, next)) = schedule.due(last, now) else {
                    continue;
                };
                next_cron = Some(next_cron.map_or(next, |n| n.min(next)));
                let Some(time) = due else { continue };
                let step = trigger_step(
                    &format!("{prefix}{}", time.as_second()),
                    action,
                    &renderer,
                    vec![],
                );
                if window_open {
                    if let Some(plan) = create_plan(&plans_api, index, install, &app, &step).await?
                    {
                        plans.insert(plan.name_any(), Arc::new(plan));
                    }
                } else {
                    held = Some(step.name);
                }
            }
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
    let drift = crate::drift_controller::component_drift(reports.values().map(Arc::as_ref));
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

/// Makes the Plans operators requested in `spec.requests` (`outpost deploy`, `outpost
/// trigger`), each once: `<install>-<id>`, a component's desired state as this converge
/// rendered it, an action's rendered for the install. A component not rendered yet (its
/// dependencies are not deployed) or an unknown entity gets no Plan; the CLI says so.
async fn requested_plans(
    install: &Install,
    app: &App,
    steps: &[Step],
    actions: &[AppAction],
    renderer: &Renderer<'_>,
    api: &Api<Plan>,
    index: &PlanIndex,
) -> Result<(), InstallError> {
    let name = install.name_any();
    for request in &install.spec.requests {
        let plan = format!("{name}-{}", request.id);
        let step = match request.operation {
            Operation::Deploy => steps
                .iter()
                .find(|s| {
                    s.operation == Operation::Deploy
                        && s.entity.kind == EntityKind::Component
                        && s.entity.name == request.name
                })
                .map(|s| Step {
                    name: plan,
                    operation: Operation::Deploy,
                    entity: s.entity.clone(),
                    desired: s.desired.clone(),
                    waits_for: vec![],
                }),
            Operation::Trigger => actions
                .iter()
                .find(|a| a.name_any() == request.name)
                .map(|action| trigger_step(&plan, action, renderer, vec![])),
            _ => None,
        };
        let Some(step) = step else { continue };
        let reason = match &request.requested_by {
            Some(by) => format!("manual: requested by {by}"),
            None => "manual".into(),
        };
        create_plan_with(
            api,
            index,
            install,
            app,
            &step,
            reason,
            request.role_override.clone(),
        )
        .await?;
    }
    Ok(())
}

/// The trigger kinds that run before and after a step.
fn hooks(step: &Step) -> Option<(TriggerKind, TriggerKind)> {
    use TriggerKind::*;
    Some(match step.operation {
        Operation::Provision => (PreProvision, PostProvision),
        Operation::Reprovision => (PreReprovision, PostReprovision),
        Operation::Deprovision => (PreDeprovision, PostDeprovision),
        Operation::Deploy => (PreDeployComponent, PostDeployComponent),
        Operation::Teardown => (PreTeardownComponent, PostTeardownComponent),
        Operation::Trigger => return None,
    })
}

/// A `trigger` Plan of `action`, its desired state the action rendered for the install.
fn trigger_step(
    name: &str,
    action: &AppAction,
    renderer: &Renderer<'_>,
    waits_for: Vec<String>,
) -> Step {
    let spec = serde_json::to_value(&action.spec).unwrap_or_default();
    Step {
        name: name.to_owned(),
        operation: Operation::Trigger,
        entity: EntityRef {
            kind: EntityKind::Action,
            name: action.name_any(),
        },
        desired: renderer
            .context()
            .and_then(|c| c.render_value(&spec).ok())
            .unwrap_or(spec),
        waits_for,
    }
}

/// Adds `trigger` Plans for the actions hooked to each step: a pre-hook runs first and
/// the step waits for it; a post-hook runs once the step succeeded.
fn with_triggers(steps: Vec<Step>, actions: &[AppAction], renderer: &Renderer<'_>) -> Vec<Step> {
    let mut out = Vec::with_capacity(steps.len());
    for mut step in steps {
        let Some((pre, post)) = hooks(&step) else {
            out.push(step);
            continue;
        };
        let entity = step.entity.name.clone();
        let hooked = |kind: TriggerKind| -> Vec<&AppAction> {
            actions
                .iter()
                .filter(|action| {
                    action.spec.triggers.iter().any(|t| {
                        t.kind() == Some(kind)
                            && (!kind.requires_component()
                                || t.component.as_deref() == Some(entity.as_str()))
                    })
                })
                .collect()
        };
        let trigger = |action: &AppAction, when: &str, waits_for: Vec<String>| {
            let name = format!("{}-{when}-{}", step.name, action.name_any());
            trigger_step(&name, action, renderer, waits_for)
        };
        let pre_steps: Vec<Step> = hooked(pre)
            .into_iter()
            .map(|a| trigger(a, "pre", step.waits_for.clone()))
            .collect();
        let post_steps: Vec<Step> = hooked(post)
            .into_iter()
            .map(|a| trigger(a, "post", vec![step.name.clone()]))
            .collect();
        step.waits_for
            .extend(pre_steps.iter().map(|s| s.name.clone()));
        out.extend(pre_steps);
        out.push(step);
        out.extend(post_steps);
    }
    out
}

/// The phase of Plan `name` among `plans`, if it exists and has one.
fn phase_in(plans: &BTreeMap<String, Arc<Plan>>, name: &str) -> Option<PlanPhase> {
    plans
        .get(name)
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase)
}

/// Outputs of the latest succeeded provision and deploy Plans. `finishedAt` has whole
/// seconds, so Plans of one entity that finished in the same second are ordered by
/// resourceVersion (the store revision of their last write, which made them succeed).
fn outputs_of(plans: &BTreeMap<String, Arc<Plan>>) -> InstallOutputs {
    let mut outputs = InstallOutputs::default();
    let mut succeeded: Vec<&Plan> = plans
        .values()
        .map(Arc::as_ref)
        .filter(|p| p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Succeeded))
        .collect();
    succeeded.sort_by_key(|p| {
        let finished = p
            .status
            .as_ref()
            .and_then(|s| s.finished_at.clone())
            .map(|t| t.0);
        let revision = p
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<i64>().ok());
        (finished, revision)
    });
    for plan in succeeded {
        let values = plan
            .status
            .as_ref()
            .map(|s| s.outputs.clone())
            .unwrap_or_default();
        match (plan.spec.operation, plan.spec.entity.kind) {
            (Operation::Provision | Operation::Reprovision, EntityKind::Sandbox) => {
                outputs.sandbox = values
            }
            (Operation::Deploy, EntityKind::Component) => {
                outputs
                    .components
                    .insert(plan.spec.entity.name.clone(), values);
            }
            _ => {}
        }
    }
    outputs
}

/// Creates the Plan of `step`; the Plan as created, or `None` if it already existed.
async fn create_plan(
    api: &Api<Plan>,
    index: &PlanIndex,
    install: &Install,
    app: &App,
    step: &Step,
) -> Result<Option<Plan>, InstallError> {
    create_plan_with(api, index, install, app, step, "converge".into(), None).await
}

/// Creates the Plan of `step` with `reason` and a runtime role override; the Plan as
/// created, or `None` if it already existed.
async fn create_plan_with(
    api: &Api<Plan>,
    index: &PlanIndex,
    install: &Install,
    app: &App,
    step: &Step,
    reason: String,
    role_override: Option<String>,
) -> Result<Option<Plan>, InstallError> {
    let owner = install
        .controller_owner_ref(&())
        .expect("a stored Install has a name and uid");
    let mut plan = Plan::new(
        &step.name,
        PlanSpec {
            install: install.name_any(),
            operation: step.operation,
            entity: step.entity.clone(),
            reason: Some(reason),
            release: app.status.as_ref().and_then(|s| s.release.clone()),
            role_override,
            desired_state: Some(step.desired.clone()),
            content_hash: Some(content_hash(&step.desired)),
            base_revision: install.resource_version(),
        },
    );
    plan.metadata.owner_references = Some(vec![owner]);
    plan.metadata.labels = Some(BTreeMap::from([(
        INSTALL_LABEL.to_owned(),
        install.name_any(),
    )]));
    match api.create(&PostParams::default(), &plan).await {
        Ok(created) => {
            // The watch brings it too, but a reconcile before that must not create it again.
            index.remember(created.clone());
            Ok(Some(created))
        }
        // Already created by an earlier reconcile (or a replica before a restart).
        Err(kube_client::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
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
    let drift = crate::drift_controller::component_drift(reports.values().map(Arc::as_ref));
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

fn error_policy(_: Arc<Install>, err: &InstallError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %err, "install reconcile: retrying");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn succeeded(name: &str, revision: &str, finished: &str, reference: &str) -> Arc<Plan> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
                "metadata": {"name": name, "resourceVersion": revision},
                "spec": {"install": "i", "operation": "deploy",
                         "entity": {"kind": "component", "name": "web-image"}},
                "status": {"phase": "Succeeded", "finishedAt": finished,
                           "outputs": {"reference": reference}},
            }))
            .expect("a valid Plan"),
        )
    }

    #[test]
    fn outputs_are_the_last_succeeded_plans_even_within_one_second() {
        let second = "2026-01-01T00:00:07Z";
        // Plan names are hashes: the later Plan may sort first.
        let plans: BTreeMap<String, Arc<Plan>> = [
            succeeded("i-deploy-web-image-aaa", "41", second, "new"),
            succeeded("i-deploy-web-image-bbb", "30", second, "old"),
            succeeded(
                "i-deploy-web-image-ccc",
                "50",
                "2026-01-01T00:00:06Z",
                "older",
            ),
        ]
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
        let outputs = outputs_of(&plans);
        assert_eq!(outputs.components["web-image"]["reference"], "new");
    }
}
