//! Claiming a Plan: a status update conditioned on the Plan's resourceVersion (the
//! fencing token). Of several runners racing for one Plan, exactly one update
//! succeeds; the others get 409 Conflict.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Api, PostParams};
use outpost_api::{Lean, Plan, PlanPhase};

/// The reason a stale Plan fails with.
pub const STALE: &str = "stale plan: content hash moved since approval";

/// What a claim attempt came to.
#[derive(Debug)]
pub enum Claim {
    /// The Plan is ours, as stored after the claim.
    Won(Box<Plan>),
    /// Another runner (or a change to the Plan) got there first.
    Lost,
}

/// Whether a runner may claim a Plan in `phase`: `Ready` (passed the gate) or
/// `Approved` (a person approved it).
pub fn claimable(phase: Option<PlanPhase>) -> bool {
    matches!(phase, Some(PlanPhase::Ready | PlanPhase::Approved))
}

/// Why the Plan must not run even though it is claimable, if it must not: its desired
/// state does not match its content hash, or an approval is of other content.
pub fn refusal(plan: &Plan) -> Option<&'static str> {
    let status = plan.status.as_ref();
    let approved = status
        .and_then(|s| s.approval.as_ref())
        .map(|a| a.content_hash.as_str());
    let desired = plan
        .spec
        .desired_state
        .as_ref()
        .map(outpost_api::content_hash);
    let spec = plan.spec.content_hash.as_deref();
    if spec.is_none() || desired.as_deref() != spec {
        return Some(STALE);
    }
    match (status.and_then(|s| s.phase), approved) {
        (Some(PlanPhase::Approved), Some(approved)) if Some(approved) == spec => None,
        (Some(PlanPhase::Approved), _) => Some(STALE),
        _ => None,
    }
}

/// The phase a claim moves a Plan to: `Ready` → `Claimed` (the runner plans),
/// `Approved` → `Applying` (the runner applies the approved diff).
pub fn claimed_phase(phase: Option<PlanPhase>) -> PlanPhase {
    match phase {
        Some(PlanPhase::Approved) => PlanPhase::Applying,
        _ => PlanPhase::Claimed,
    }
}

/// Claims `plan` (as last seen, in phase `Ready` or `Approved`) for `runner`: phase
/// [`claimed_phase`], `claimedBy`, `startedAt`, sent with the seen resourceVersion.
pub async fn claim(
    api: &Api<Plan>,
    plan: &Plan,
    runner: &str,
) -> Result<Claim, kube_client::Error> {
    let mut claimed = plan.clone();
    let status = claimed.status.get_or_insert_with(Default::default);
    if !claimable(status.phase) {
        return Ok(Claim::Lost);
    }
    status.phase = Some(claimed_phase(status.phase));
    status.claimed_by = Some(runner.to_owned());
    status.started_at = Some(Time(jiff::Timestamp::now()));
    fenced_update(api, claimed).await
}

/// Fails `plan` (as last seen, in phase `Ready` or `Approved`) with `message`, fenced like a claim:
/// a refused Plan is also claimed by exactly one runner.
pub async fn refuse(
    api: &Api<Plan>,
    plan: &Plan,
    runner: &str,
    message: &str,
) -> Result<Claim, kube_client::Error> {
    let mut refused = plan.clone();
    let status = refused.status.get_or_insert_with(Default::default);
    if !claimable(status.phase) {
        return Ok(Claim::Lost);
    }
    let now = Time(jiff::Timestamp::now());
    status.phase = Some(PlanPhase::Failed);
    status.claimed_by = Some(runner.to_owned());
    status.started_at = Some(now.clone());
    status.finished_at = Some(now);
    status.message = Some(message.to_owned());
    fenced_update(api, refused).await
}

async fn fenced_update(api: &Api<Plan>, mut plan: Plan) -> Result<Claim, kube_client::Error> {
    debug_assert!(
        plan.metadata.resource_version.is_some(),
        "claims are fenced"
    );
    // Sent and answered without managed fields: a status write that sends none keeps
    // the stored ones, and the runner reads none.
    plan.metadata.managed_fields = None;
    let name = plan.metadata.name.clone().unwrap_or_default();
    let lean: Api<Lean<Plan>> = Api::namespaced(
        api.clone().into_client(),
        api.namespace().unwrap_or_default(),
    );
    match lean
        .replace_status(&name, &PostParams::default(), &Lean(plan))
        .await
    {
        Ok(Lean(stored)) => Ok(Claim::Won(Box::new(stored))),
        Err(kube_client::Error::Api(status)) if status.code == 409 || status.code == 404 => {
            Ok(Claim::Lost)
        }
        Err(e) => Err(e),
    }
}
