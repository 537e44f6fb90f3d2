//! The Plan gate: for a new Plan, resolve its role by the precedence chain and record
//! the name and the level that chose it, evaluate policies on its rendered desired state,
//! then apply the install's approval mode. Verdicts and approval bind to the Plan's
//! content hash. An undeclared role, a denying policy or a missing install denies the
//! Plan with a reason — never a silent fallback.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Api, ListParams, Patch, PatchParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::watcher;
use kube_client::{Client, ResourceExt as _};
use outpost_api::{
    Action as AppAction, App, Approval, ApprovalMode, Component, Install, OperationRole, Plan,
    PlanPhase, PlanStatus, Verdict,
};

use crate::app_objects::AppObjects;
use crate::role_chain::resolve_role;
use crate::template::{InstallOutputs, TemplateContext};

/// Why a gate reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
}

/// Evaluates policies on a Plan; returns the verdicts (a denying one denies the Plan).
pub type PolicyCheck = Arc<dyn Fn(&Plan, &[outpost_api::Policy]) -> Vec<Verdict> + Send + Sync>;

struct Context {
    client: Client,
    policies: PolicyCheck,
}

/// Runs the Plan gate until the stream ends.
pub async fn run(client: Client, policies: PolicyCheck) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        policies,
    });
    Controller::new(Api::<Plan>::all(client), watcher::Config::default())
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "plan gate");
            }
        })
        .await;
}

/// The gate's decision for one Plan.
async fn decide(plan: &Plan, ctx: &Context) -> Result<PlanStatus, GateError> {
    let namespace = plan.namespace().unwrap_or_default();
    let client = &ctx.client;
    let mut status = PlanStatus::default();
    let deny = |mut status: PlanStatus, message: String| {
        status.phase = Some(PlanPhase::Denied);
        status.message = Some(message);
        status
    };
    let Some(install) = Api::<Install>::namespaced(client.clone(), &namespace)
        .get_opt(&plan.spec.install)
        .await?
    else {
        return Ok(deny(
            status,
            format!("install {:?} does not exist", plan.spec.install),
        ));
    };
    let Some(app) = Api::<App>::namespaced(client.clone(), &namespace)
        .get_opt(&install.spec.app)
        .await?
    else {
        return Ok(deny(
            status,
            format!("app {:?} does not exist", install.spec.app),
        ));
    };
    let of_app = ListParams::default().fields(&format!("spec.app={}", install.spec.app));
    let components = Api::<Component>::namespaced(client.clone(), &namespace)
        .list(&of_app)
        .await?
        .items;
    let actions = Api::<AppAction>::namespaced(client.clone(), &namespace)
        .list(&of_app)
        .await?
        .items;
    let roles = Api::<OperationRole>::namespaced(client.clone(), &namespace)
        .list(&of_app)
        .await?
        .items;
    let objects = AppObjects {
        app: &app,
        components: &components,
        actions: &actions,
        operation_roles: &roles,
    };
    let context = match TemplateContext::new(&app, &install, &InstallOutputs::default()) {
        Ok(context) => context,
        Err(err) => {
            return Ok(deny(
                status,
                format!(
                    "cannot render templates for install {}: {err}",
                    plan.spec.install
                ),
            ));
        }
    };
    match resolve_role(&plan.spec, &objects, &context) {
        Ok(role) => status.role = Some(role),
        Err(err) => return Ok(deny(status, err.to_string())),
    }

    let policies = Api::<outpost_api::Policy>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| outpost_policy::applies_to_install(p, &install))
        .collect::<Vec<_>>();
    status.verdicts = (ctx.policies)(plan, &policies);
    let denials: Vec<String> = status
        .verdicts
        .iter()
        .filter(|v| v.denied)
        .flat_map(|v| v.messages.iter().map(move |m| format!("{}: {m}", v.policy)))
        .collect();
    if !denials.is_empty() {
        return Ok(deny(
            status,
            format!("denied by policy: {}", denials.join("; ")),
        ));
    }

    let content_hash = plan.spec.content_hash.clone().unwrap_or_default();
    match install.spec.approval_mode() {
        ApprovalMode::ApproveAll => {
            status.phase = Some(PlanPhase::Approved);
            status.approval = Some(Approval {
                by: "approval mode approve-all".into(),
                at: Time(jiff::Timestamp::now()),
                content_hash,
            });
        }
        ApprovalMode::Prompt => status.phase = Some(PlanPhase::AwaitingApproval),
    }
    Ok(status)
}

async fn reconcile(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, GateError> {
    // The gate decides once: a Plan past Pending belongs to operators and the runner.
    let pending = plan
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_none_or(|phase| phase == PlanPhase::Pending);
    if !pending {
        return Ok(Action::await_change());
    }
    let status = decide(&plan, &ctx).await?;
    // Conditioned on the resourceVersion the decision was made on: a concurrent change
    // (say an operator's) wins, and the Plan is looked at again.
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": plan.resource_version()},
        "status": status,
    });
    match Api::<Plan>::namespaced(ctx.client.clone(), &plan.namespace().unwrap_or_default())
        .patch_status(
            &plan.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube_client::Error::Api(e)) if e.code == 409 => {
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        Err(err) => Err(err.into()),
    }
}

fn error_policy(_: Arc<Plan>, err: &GateError, _: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "plan gate failed; retrying");
    Action::requeue(Duration::from_secs(2))
}
