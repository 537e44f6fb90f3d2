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
//!   component's drift in the Install status ([`component_drift`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube_client::api::{Api, ListParams, PostParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::{Client, Resource as _, ResourceExt as _};
use outpost_api::{
    App, Component, DriftRemediation, DriftReport, DriftState, EntityKind, Install, Operation,
    Plan, PlanPhase, PlanSpec, content_hash,
};
use serde_json::json;

use crate::install_controller::INSTALL_LABEL;
use crate::maintenance::is_open;

/// The reason of a remediation Plan.
pub const REASON: &str = "drift";
/// The annotation naming the DriftReport a remediation Plan answers.
pub const REPORT_ANNOTATION: &str = "outpost.dev/drift-report";

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

/// Each component's drift as the latest reports say: the state and how many fields
/// differ. Components without a report are absent.
pub fn component_drift<'a>(
    reports: impl IntoIterator<Item = &'a DriftReport>,
) -> BTreeMap<String, (DriftState, u32)> {
    reports
        .into_iter()
        .filter(|r| r.spec.entity.kind == EntityKind::Component)
        .map(|r| {
            let state = if r.spec.in_sync {
                DriftState::InSync
            } else {
                DriftState::Drifted
            };
            let fields = u32::try_from(r.spec.diff.len()).unwrap_or(u32::MAX);
            (r.spec.entity.name.clone(), (state, fields))
        })
        .collect()
}

/// The remediation in effect for `component`: its own, else the App's, else `report`.
pub fn remediation(app: &App, component: Option<&Component>) -> DriftRemediation {
    component
        .and_then(|c| c.spec.drift.as_ref())
        .and_then(|d| d.remediation)
        .or_else(|| app.spec.drift.as_ref().and_then(|d| d.remediation))
        .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(component: &str, in_sync: bool, fields: usize) -> DriftReport {
        let diff: Vec<_> = (0..fields)
            .map(|i| json!({"path": format!("Deployment/web.spec.f{i}"), "op": "changed", "desired": 1, "live": 2}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "DriftReport",
            "metadata": {"name": format!("acme-{component}")},
            "spec": {"install": "acme", "entity": {"kind": "component", "name": component},
                     "inSync": in_sync, "observedAt": "2025-01-15T10:00:00Z", "diff": diff},
        }))
        .expect("a DriftReport")
    }

    #[test]
    fn component_drift_counts_fields_per_component() {
        let drift = component_drift(&[report("web", false, 2), report("db", true, 0)]);
        assert_eq!(drift["web"], (DriftState::Drifted, 2));
        assert_eq!(drift["db"], (DriftState::InSync, 0));
        assert_eq!(drift.len(), 2);
    }

    #[test]
    fn remediation_is_the_components_then_the_apps_then_report() {
        let app = |drift: serde_json::Value| -> App {
            serde_json::from_value(json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "App", "metadata": {"name": "shop"},
                "spec": {"sandbox": {"type": "terraform_module", "source": "/m"}, "drift": drift},
            }))
            .expect("an App")
        };
        let component = |drift: serde_json::Value| -> Component {
            serde_json::from_value(json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "Component", "metadata": {"name": "web"},
                "spec": {"app": "shop", "type": "kubernetes_manifest",
                         "manifest": {"content": ""}, "drift": drift},
            }))
            .expect("a Component")
        };
        let auto = json!({"remediation": "auto"});
        let report_ = json!({"remediation": "report"});
        assert_eq!(remediation(&app(json!({})), None), DriftRemediation::Report);
        assert_eq!(
            remediation(&app(auto.clone()), None),
            DriftRemediation::Auto
        );
        assert_eq!(
            remediation(&app(auto.clone()), Some(&component(report_))),
            DriftRemediation::Report
        );
        assert_eq!(
            remediation(&app(json!({})), Some(&component(auto))),
            DriftRemediation::Auto
        );
    }
}
