//! The steps of an install and how they become Plans: a [`Step`] per Plan the install
//! needs, the action hooks around each, the Plans created once their prerequisites
//! succeeded, and the outputs of the succeeded ones. Shared by [`deploy`](super::deploy)
//! and [`teardown`](super::teardown).

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_client::api::{Api, PostParams};
use kube_client::{Resource as _, ResourceExt as _};
use outpost_api::{
    Action as AppAction, App, EntityKind, EntityRef, Install, Lean, Operation, Plan, PlanPhase,
    PlanSpec, TriggerKind, content_hash,
};
use serde_json::Value;

use super::rendering::Renderer;
use super::{Context, InstallError};
use crate::caches::app_cache::Release;
use crate::caches::plan_index::PlanIndex;
use crate::logic::gate::judge;
use crate::logic::maintenance::is_maintenance;
use crate::logic::template::InstallOutputs;

/// One step towards the install's desired state: the Plan it needs.
pub(super) struct Step {
    pub(super) name: String,
    pub(super) operation: Operation,
    pub(super) entity: EntityRef,
    pub(super) desired: Value,
    pub(super) waits_for: Vec<String>,
}

/// What an install's Plans are made with: the API they are created through and what
/// the gate decides on (the release they are rendered from, the namespace's policies).
/// A Plan is created with the gate's decision ([`judge`]): one store write where a
/// create and the gate's status write were two, and the decision is made on exactly the
/// objects the Plan was rendered from. (The gate still decides Plans made elsewhere: by
/// an operator, or the drift controller.) The policies are read only when a Plan is made,
/// not on every reconcile.
pub(super) struct PlanMaker<'a> {
    /// Created Plans are sent and answered without managed fields.
    api: Api<Lean<Plan>>,
    namespace: &'a str,
    release: &'a Release,
    ctx: &'a Context,
}

impl<'a> PlanMaker<'a> {
    pub(super) fn new(ctx: &'a Context, namespace: &'a str, release: &'a Release) -> Self {
        PlanMaker {
            api: Api::namespaced(ctx.client.clone(), namespace),
            namespace,
            release,
            ctx,
        }
    }
}

/// The first ten characters of a hash (or uid), as Plan names carry it.
pub(super) fn short(hash: &str) -> String {
    hash.trim_start_matches("sha256:")
        .chars()
        .take(10)
        .collect()
}

/// Where an install's steps stand once the ready ones have their Plan.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Some step is not finished (or not started yet).
    pub(super) blocked: bool,
    /// A step whose Plan failed or was denied.
    pub(super) failed: Option<String>,
    /// A maintenance step that is ready but waits for the install's next window.
    pub(super) held: Option<String>,
}

/// Creates the Plan of every step whose prerequisites succeeded (a maintenance step
/// only while a window is open), adding each to `plans`, and says what is still in
/// flight.
pub(super) async fn create_ready(
    steps: &[Step],
    plans: &mut BTreeMap<String, Arc<Plan>>,
    maker: &PlanMaker<'_>,
    index: &PlanIndex,
    install: &Install,
    app: &App,
    window_open: bool,
) -> Result<Progress, InstallError> {
    let mut progress = Progress::default();
    for step in steps {
        match phase_in(plans, &step.name) {
            Some(PlanPhase::Succeeded) => continue,
            Some(PlanPhase::Failed | PlanPhase::Denied) => {
                progress.failed = Some(step.name.clone());
                continue;
            }
            Some(_) => {
                progress.blocked = true;
                continue;
            }
            // Created, not gated yet.
            None if plans.contains_key(&step.name) => {
                progress.blocked = true;
                continue;
            }
            None => {}
        }
        let ready = step
            .waits_for
            .iter()
            .all(|w| phase_in(plans, w) == Some(PlanPhase::Succeeded));
        if ready && is_maintenance(step.operation) && !window_open {
            progress.held = Some(step.name.clone());
        } else if ready && let Some(plan) = create_plan(maker, index, install, app, step).await? {
            // Counted in the status written next, so it does not take a second write.
            plans.insert(plan.name_any(), Arc::new(plan));
        }
        progress.blocked = true;
    }
    if let Some(step) = &progress.held {
        tracing::info!(install = %install.name_any(), plan = %step, "held until the next maintenance window");
    }
    Ok(progress)
}

/// Makes the Plans operators requested in `spec.requests` (`outpost deploy`, `outpost
/// trigger`), each once: `<install>-<id>`, a component's desired state as this reconcile
/// rendered it, an action's rendered for the install. A component not rendered yet (its
/// dependencies are not deployed) or an unknown entity gets no Plan; the CLI says so.
pub(super) async fn requested_plans(
    install: &Install,
    app: &App,
    steps: &[Step],
    actions: &[AppAction],
    renderer: &Renderer<'_>,
    maker: &PlanMaker<'_>,
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
            maker,
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
pub(super) fn trigger_step(
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
pub(super) fn with_triggers(
    steps: Vec<Step>,
    actions: &[AppAction],
    renderer: &Renderer<'_>,
) -> Vec<Step> {
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
pub(super) fn phase_in(plans: &BTreeMap<String, Arc<Plan>>, name: &str) -> Option<PlanPhase> {
    plans
        .get(name)
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase)
}

/// Outputs of the latest succeeded provision and deploy Plans. `finishedAt` has whole
/// seconds, so Plans of one entity that finished in the same second are ordered by
/// resourceVersion (the store revision of their last write, which made them succeed).
pub(super) fn outputs_of(plans: &BTreeMap<String, Arc<Plan>>) -> InstallOutputs {
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
pub(super) async fn create_plan(
    maker: &PlanMaker<'_>,
    index: &PlanIndex,
    install: &Install,
    app: &App,
    step: &Step,
) -> Result<Option<Plan>, InstallError> {
    create_plan_with(maker, index, install, app, step, "converge".into(), None).await
}

/// Creates the Plan of `step` with `reason` and a runtime role override; the Plan as
/// created, or `None` if it already existed.
async fn create_plan_with(
    maker: &PlanMaker<'_>,
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
        outpost_api::labels::INSTALL.to_owned(),
        install.name_any(),
    )]));
    plan.status = Some(judge(
        &plan,
        install,
        &maker.release.app,
        &maker.release.objects(),
        maker.ctx.apps.policies(maker.namespace),
        &maker.ctx.policies,
    ));
    match maker.api.create(&PostParams::default(), &Lean(plan)).await {
        Ok(Lean(created)) => {
            // The watch brings it too, but a reconcile before that must not create it again.
            index.remember(created.clone());
            Ok(Some(created))
        }
        // Already created by an earlier reconcile (or a replica before a restart).
        Err(kube_client::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
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
