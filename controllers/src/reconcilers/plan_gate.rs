//! The Plan gate: for a new Plan, resolve its role by the precedence chain and record
//! the name and the level that chose it, evaluate the vendor's policies on its rendered
//! desired state (recording `approvalRequired` of `approve`-enforced ones), then pass it
//! as `Ready` to the install's runner — for `prompt` installs too: the runner plans first
//! and asks a person to approve the real diff. The gate never approves. An undeclared role, a denying policy or a missing install denies the
//! Plan with a reason — never a silent fallback.
//!
//! What it decides on (installs, apps, their objects, policies) is read from watched
//! caches ([`AppCache`]), not asked of the API server per Plan; a Plan made from objects
//! the caches have not seen yet waits for them.
//!
//! The decision itself is [`judge`]: the Install controller calls it on the objects
//! it renders a Plan from and creates the Plan with it (`Ready` or `Denied` at once, one
//! store write where a create and this gate's status write were two; the server admits
//! only the gate's fields on a create). This gate decides the Plans made otherwise (an
//! operator's, the drift controller's).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube_client::api::{Api, Patch, PatchParams};
use kube_client::runtime::WatchStreamExt as _;
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::reflector::{self, ObjectRef, Store};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Install, Plan, PlanPhase, PlanStatus};

use crate::caches::app_cache::AppCache;
use crate::logic::gate::{deny, judge};

/// Why a gate reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
}

pub use crate::logic::gate::PolicyCheck;

struct Context {
    client: Client,
    policies: PolicyCheck,
    apps: AppCache,
    installs: Store<Install>,
}

/// Runs the Plan gate until the stream ends; it reads Installs from the shared store
/// (`installs`, [`crate::caches::installs::InstallCache`]).
pub async fn run(client: Client, policies: PolicyCheck, installs: Store<Install>) {
    let (apps, app_changes) = AppCache::new(&client);
    let ctx = Arc::new(Context {
        client: client.clone(),
        policies,
        apps,
        installs,
    });
    // The gate keeps every Plan in memory; once a Plan is decided, it reads nothing of it
    // but its phase again, so neither its rendered state nor the rest of its status (a
    // role, verdicts, the runner's diff, outputs and log) is kept.
    let (plans, plans_writer) = reflector::store();
    let plan_events = outpost_api::lean::watcher(Api::all(client), crate::watch_config())
        .default_backoff()
        .modify(trim)
        .reflect(plans_writer)
        .applied_objects();
    let gate = Controller::for_stream(plan_events, plans)
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "plan gate");
            }
        });
    // The caches' watches run as long as the gate does.
    tokio::join!(gate, app_changes.for_each(|_| std::future::ready(())));
}

/// What the gate keeps of a Plan: all it decides on while the Plan is pending, and its
/// phase after that.
fn trim(plan: &mut Plan) {
    if !is_pending(plan) {
        plan.spec.desired_state = None;
        plan.status = plan.status.take().map(|status| PlanStatus {
            phase: status.phase,
            ..PlanStatus::default()
        });
    }
}

/// Whether the gate has yet to decide `plan`.
fn is_pending(plan: &Plan) -> bool {
    plan.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_none_or(|phase| phase == PlanPhase::Pending)
}

/// How long the gate waits for its caches to reach the release a Plan was made from
/// before it decides on what it has (the App moved on meanwhile).
const CATCH_UP: Duration = Duration::from_secs(10);

/// The gate's decision for one Plan; `None` while its caches are behind the Plan.
async fn decide(plan: &Plan, ctx: &Context) -> Result<Option<PlanStatus>, GateError> {
    let namespace = plan.namespace().unwrap_or_default();
    if !ctx.apps.ready().await {
        return Ok(None);
    }
    let Some(install) = ctx
        .installs
        .get(&ObjectRef::new(&plan.spec.install).within(&namespace))
    else {
        // A Plan is made after its install: a missing one is deleted, or not seen yet.
        if young(plan) {
            return Ok(None);
        }
        return Ok(Some(deny(
            PlanStatus::default(),
            format!("install {:?} does not exist", plan.spec.install),
        )));
    };
    // The Plan was made from the install at `baseRevision`: its approval mode and
    // maintenance windows are read from that version or a later one, never from an older
    // copy (an install switched to `prompt` with a request in the same write would
    // otherwise have its Plan approved by the mode it had before).
    if older_than(&install, plan.spec.base_revision.as_deref()) && young(plan) {
        return Ok(None);
    }
    let Some(release) = ctx.apps.release(&namespace, &install.spec.app) else {
        return Ok(Some(deny(
            PlanStatus::default(),
            format!("app {:?} does not exist", install.spec.app),
        )));
    };
    if plan
        .spec
        .release
        .as_ref()
        .is_some_and(|r| *r != release.hash)
        && young(plan)
    {
        // Made from objects the caches have not seen yet.
        return Ok(None);
    }
    Ok(Some(judge(
        plan,
        &install,
        &release.app,
        &release.objects(),
        ctx.apps.policies(&namespace),
        &ctx.policies,
    )))
}

/// Whether `plan` was made within [`CATCH_UP`] (its creation time has one-second
/// precision).
/// Whether the cached `install` is of an older revision than `base` (the store revision
/// a Plan was made from).
fn older_than(install: &Install, base: Option<&str>) -> bool {
    let revision = |rv: Option<&str>| rv.and_then(|rv| rv.parse::<i64>().ok());
    match (
        revision(install.metadata.resource_version.as_deref()),
        revision(base),
    ) {
        (Some(cached), Some(base)) => cached < base,
        _ => false,
    }
}

fn young(plan: &Plan) -> bool {
    plan.metadata
        .creation_timestamp
        .as_ref()
        .is_none_or(|created| {
            jiff::Timestamp::now()
                .duration_since(created.0)
                .unsigned_abs()
                < CATCH_UP + Duration::from_secs(1)
        })
}

async fn reconcile(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, GateError> {
    // The gate decides once: a Plan past Pending belongs to operators and the runner.
    if !is_pending(&plan) {
        return Ok(Action::await_change());
    }
    let Some(status) = decide(&plan, &ctx).await? else {
        return Ok(Action::requeue(Duration::from_millis(100)));
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_keeps_a_pending_plan_whole_and_of_a_decided_one_its_phase() {
        let plan = |phase: &str| -> Plan {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
                "metadata": {"name": "p"},
                "spec": {"install": "i", "entity": {"kind": "component", "name": "c"},
                         "operation": "deploy", "desiredState": {"type": "job"}},
                "status": {"phase": phase, "message": "m", "claimedBy": "runner"},
            }))
            .expect("a valid Plan")
        };
        let mut pending = plan("Pending");
        trim(&mut pending);
        assert!(pending.spec.desired_state.is_some());
        assert_eq!(
            pending.status.as_ref().and_then(|s| s.message.as_deref()),
            Some("m")
        );
        let mut decided = plan("Succeeded");
        trim(&mut decided);
        assert_eq!(decided.spec.desired_state, None);
        assert_eq!(
            decided.status,
            Some(PlanStatus {
                phase: Some(PlanPhase::Succeeded),
                ..PlanStatus::default()
            })
        );
    }

    #[test]
    fn a_cached_install_older_than_the_plans_base_is_not_decided_on() {
        let install = |rv: Option<&str>| {
            let mut install: Install = serde_json::from_value(serde_json::json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
                "metadata": {"name": "i"},
                "spec": {"app": "shop",
                         "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
            }))
            .expect("a valid Install");
            install.metadata.resource_version = rv.map(str::to_owned);
            install
        };
        assert!(older_than(&install(Some("99")), Some("100")));
        assert!(!older_than(&install(Some("100")), Some("100")));
        assert!(!older_than(&install(Some("101")), Some("100")));
        // Plans made by hand carry no base: nothing to wait for.
        assert!(!older_than(&install(Some("99")), None));
        assert!(!older_than(&install(None), Some("100")));
    }
}
