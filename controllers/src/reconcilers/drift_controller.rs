//! The drift controller: what the control plane does about a `DriftReport`.
//!
//! * A report that is not in sync, for a component whose remediation is `auto`
//!   (`Component.spec.drift`, else the App's `spec.drift`), gets a `deploy` Plan with
//!   reason `drift` that re-applies the desired state of the Plan the report compared
//!   with. The Plan goes through the gate like any other and the runner applies it.
//!   Its name is `<install>-drift-<component>-<hash>`, the hash of the baseline Plan,
//!   when the drift began and the diff: repeated reconciles of one drift never create a
//!   second Plan, and a new drift (after a return to sync) gets a new one.
//! * No Plan is made while another Plan for the component is unfinished, when the
//!   report compared with an older deploy than the component's latest, or outside the
//!   install's maintenance windows (the report is looked at again later).
//! * With `report` (the default) nothing is changed; the Install controller shows each
//!   component's drift in the Install status
//!   ([`component_drift`](crate::logic::drift::component_drift)).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube_client::api::{Api, ListParams, PostParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::{Client, Resource as _, ResourceExt as _};
use outpost_api::{
    App, Component, DriftRemediation, DriftReport, EntityKind, Install, Operation, Plan, PlanPhase,
    PlanSpec, content_hash,
};
use serde_json::json;

use outpost_api::labels::INSTALL as INSTALL_LABEL;

use crate::logic::drift::remediation;
use crate::logic::maintenance::is_open;

/// The reason of a remediation Plan.
pub const REASON: &str = "drift";
/// The annotation naming the DriftReport a remediation Plan answers.
pub use outpost_api::annotations::DRIFT_REPORT as REPORT_ANNOTATION;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
}

struct Context {
    client: Client,
}

/// Runs the drift controller until the stream ends.
pub async fn run(client: Client) {
    let ctx = Arc::new(Context {
        client: client.clone(),
    });
    Controller::new(
        Api::<DriftReport>::all(client.clone()),
        crate::watch_config(),
    )
    .with_config(crate::controller_config())
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        if let Err(err) = result {
            tracing::debug!(error = %err, "drift reconcile");
        }
    })
    .await;
}

fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
}

async fn reconcile(report: Arc<DriftReport>, ctx: Arc<Context>) -> Result<Action, DriftError> {
    let spec = &report.spec;
    if spec.in_sync || spec.entity.kind != EntityKind::Component {
        return Ok(Action::await_change());
    }
    let namespace = report.namespace().unwrap_or_default();
    let client = &ctx.client;
    let component = &spec.entity.name;
    let later = Action::requeue(Duration::from_secs(5));
    let Some(install) = Api::<Install>::namespaced(client.clone(), &namespace)
        .get_opt(&spec.install)
        .await?
    else {
        return Ok(Action::await_change());
    };
    if install.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(app) = Api::<App>::namespaced(client.clone(), &namespace)
        .get_opt(&install.spec.app)
        .await?
    else {
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let own = Api::<Component>::namespaced(client.clone(), &namespace)
        .get_opt(component)
        .await?
        .filter(|c| c.spec.app == install.spec.app);
    if remediation(&app, own.as_ref()) != DriftRemediation::Auto {
        return Ok(Action::await_change());
    }
    let plans = Api::<Plan>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&format!("{INSTALL_LABEL}={}", spec.install)))
        .await?
        .items;
    let of_component: Vec<&Plan> = plans
        .iter()
        .filter(|p| p.spec.install == spec.install)
        .filter(|p| p.spec.entity.kind == EntityKind::Component && p.spec.entity.name == *component)
        .collect();
    if of_component
        .iter()
        .any(|p| !phase(p).is_some_and(PlanPhase::is_terminal))
    {
        return Ok(later); // a Plan for the component is under way: its result comes first
    }
    let latest_deploy = of_component
        .iter()
        .filter(|p| p.spec.operation == Operation::Deploy && phase(p) == Some(PlanPhase::Succeeded))
        .max_by_key(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.finished_at.as_ref())
                .map(|t| t.0)
        });
    let Some(baseline) = latest_deploy.filter(|p| Some(p.name_any()) == spec.plan) else {
        // Compared with an older deploy than the latest (or one we do not know): the
        // runner's next check compares with the latest.
        return Ok(later);
    };
    let key = content_hash(&json!({
        "plan": spec.plan,
        "since": spec.drifted_since,
        "diff": spec.diff,
    }));
    let short: String = key.trim_start_matches("sha256:").chars().take(10).collect();
    let name = format!("{}-drift-{component}-{short}", spec.install);
    if plans.iter().any(|p| p.name_any() == name) {
        return Ok(Action::await_change());
    }
    if !is_open(&install.spec.maintenance_windows, jiff::Timestamp::now()) {
        tracing::info!(install = %spec.install, %component, "drift remediation held until the next maintenance window");
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    let desired = baseline.spec.desired_state.clone();
    let mut plan = Plan::new(
        &name,
        PlanSpec {
            install: spec.install.clone(),
            operation: Operation::Deploy,
            entity: spec.entity.clone(),
            reason: Some(REASON.into()),
            release: baseline.spec.release.clone(),
            role_override: None,
            content_hash: desired.as_ref().map(content_hash),
            desired_state: desired,
            base_revision: install.resource_version(),
        },
    );
    plan.metadata.owner_references = Some(vec![
        install
            .controller_owner_ref(&())
            .expect("a stored Install has a name and uid"),
    ]);
    plan.metadata.labels = Some(BTreeMap::from([(
        INSTALL_LABEL.to_owned(),
        spec.install.clone(),
    )]));
    plan.metadata.annotations = Some(BTreeMap::from([(
        REPORT_ANNOTATION.to_owned(),
        report.name_any(),
    )]));
    match Api::<Plan>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &plan)
        .await
    {
        Ok(_) => {
            let fields: Vec<&str> = spec.diff.iter().map(|d| d.path.as_str()).collect();
            tracing::info!(install = %spec.install, %component, plan = %name, ?fields, "drift: remediation planned");
        }
        Err(kube_client::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<DriftReport>, err: &DriftError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %err, "drift reconcile: retrying");
    Action::requeue(Duration::from_secs(2))
}
