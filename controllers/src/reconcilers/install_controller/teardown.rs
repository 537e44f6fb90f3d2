//! Teardown: one step of a deleted install towards its removal. A `teardown` Plan per
//! component in reverse dependency order, each after the previous one, then the
//! sandbox's `deprovision` ([`teardown_steps`]), with their action hooks. The finalizer
//! goes once the last Plan succeeded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube_client::ResourceExt as _;
use kube_client::runtime::controller::Action;
use outpost_api::{App, Component, EntityKind, EntityRef, Install, InstallPhase, Operation, Plan};
use serde_json::json;

use super::rendering::Renderer;
use super::status::set_status;
use super::steps::{
    PlanMaker, Progress, Step, create_ready, outputs_of, requested_plans, short, with_triggers,
};
use super::{Context, InstallError};
use crate::logic::graph::ComponentGraph;
use crate::logic::maintenance::is_open;

/// Moves a deleted install one step towards removal. `Ok` means done (the finalizer
/// goes); until the last Plan succeeded it is an error, so the controller looks again
/// soon and the finalizer stays.
pub(super) async fn teardown(install: &Install, ctx: &Context) -> Result<Action, InstallError> {
    let index = &ctx.plans;
    let namespace = install.namespace().unwrap_or_default();
    let name = install.name_any();
    let mut plans: BTreeMap<String, Arc<Plan>> = index.of(&namespace, &name);
    let Some(release) = ctx.apps.release(&namespace, &install.spec.app) else {
        return Ok(Action::await_change()); // nothing was ever deployed from a missing app
    };
    let maker = PlanMaker::new(ctx, &namespace, &release);
    let mut app = release.app.clone();
    app.status.get_or_insert_default().release = Some(release.hash.clone());
    let Ok(graph) = &release.graph else {
        set_status(install, ctx, InstallPhase::Degraded, vec![], None, None).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let outputs = outputs_of(&plans);
    let renderer = Renderer::new(&ctx.renders, &app, install, &outputs, &release);
    let uid = install.uid().unwrap_or_default();
    let steps = teardown_steps(&name, &uid, graph, &release.components, &app);
    let steps = with_triggers(steps, &release.actions, &renderer);

    let window_open = is_open(&install.spec.maintenance_windows, jiff::Timestamp::now());
    let Progress {
        blocked, failed, ..
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
    requested_plans(
        install,
        &app,
        &steps,
        &release.actions,
        &renderer,
        &maker,
        index,
    )
    .await?;
    set_status(
        install,
        ctx,
        InstallPhase::Deprovisioning,
        vec![],
        None,
        None,
    )
    .await?;
    if !blocked && failed.is_none() {
        ctx.written.forget(install);
        ctx.renders.forget(install);
        Ok(Action::await_change())
    } else {
        Err(InstallError::Finalizer(
            "waiting for the teardown plans".into(),
        ))
    }
}

/// The steps that remove the install: each component's `teardown` in reverse
/// dependency order, each waiting for the previous one, then the sandbox's
/// `deprovision` after the last. Names carry the install's uid, so a new install of
/// the same name gets new Plans. The runner tears down what it last applied; the
/// desired state names the component and its type (which picks the executor).
fn teardown_steps(
    name: &str,
    uid: &str,
    graph: &ComponentGraph,
    components: &[Component],
    app: &App,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut previous: Vec<String> = Vec::new();
    for component in graph.teardown_order() {
        let step = format!("{name}-teardown-{component}-{}", short(uid));
        steps.push(Step {
            name: step.clone(),
            operation: Operation::Teardown,
            entity: EntityRef {
                kind: EntityKind::Component,
                name: component.clone(),
            },
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
        name: format!("{name}-deprovision-{}", short(uid)),
        operation: Operation::Deprovision,
        entity: EntityRef {
            kind: EntityKind::Sandbox,
            name: "sandbox".into(),
        },
        desired: json!({"sandbox": app.spec.sandbox}),
        waits_for: previous,
    });
    steps
}

#[cfg(test)]
#[path = "teardown_tests.rs"]
mod tests;
