//! A person's decision on a Plan's real diff, in one place: tests (and the fleet bench)
//! approve or deny through [`approve`] and [`deny`] only, through the
//! `plans/NAME/approval` subresource, so the server records the client's user (an
//! approver or an admin) as who decided.

use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::Plan;
use serde_json::json;

/// The diff hash `plan` (as last read) shows.
fn diff_hash(plan: &Plan) -> String {
    plan.status
        .as_ref()
        .and_then(|s| s.diff.as_ref())
        .map(|d| d.hash.clone())
        .unwrap_or_default()
}

async fn decide(
    plans: &Api<Plan>,
    plan: &Plan,
    decision: serde_json::Value,
) -> Result<Plan, kube_client::Error> {
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    plans
        .patch_subresource(
            "approval",
            name,
            &PatchParams::default(),
            &Patch::Merge(decision),
        )
        .await
}

/// Approves the diff `plan` (as last read, `AwaitingApproval`) shows: the server binds
/// the approval to its content hash and `status.diff.hash`. Returns the Plan as stored.
pub async fn approve(plans: &Api<Plan>, plan: &Plan) -> Result<Plan, kube_client::Error> {
    decide(
        plans,
        plan,
        json!({"decision": "approve", "diffHash": diff_hash(plan)}),
    )
    .await
}

/// Approves Plan `name` as it is stored now.
pub async fn approve_named(plans: &Api<Plan>, name: &str) -> Result<Plan, kube_client::Error> {
    let plan = plans.get(name).await?;
    approve(plans, &plan).await
}

/// Denies Plan `name` (`AwaitingApproval`, as stored now) with `reason`: phase `Denied`.
pub async fn deny(plans: &Api<Plan>, name: &str, reason: &str) -> Result<Plan, kube_client::Error> {
    let plan = plans.get(name).await?;
    decide(
        plans,
        &plan,
        json!({"decision": "deny", "diffHash": diff_hash(&plan), "reason": reason}),
    )
    .await
}

/// The resources of `plan`'s posted diff with what each changes, as an approver sees
/// them. Panics when the Plan has no diff yet.
pub fn diff_changes(plan: &Plan) -> Vec<(String, outpost_api::ChangeAction)> {
    let diff = plan.status.as_ref().and_then(|s| s.diff.as_ref());
    diff.expect("a diff")
        .resources
        .iter()
        .map(|r| (r.address.clone(), r.action))
        .collect()
}
