//! A person's decision on a Plan's real diff, in one place: tests (and the fleet bench)
//! approve or deny through [`approve`] and [`deny`] only, so that the way a decision is
//! written changes here alone.
//!
//! Today it is a status write ([`PlanStatus::approval_patch`] with the diff's hash); the
//! `plans/NAME/approval` subresource replaces it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{Plan, PlanStatus};
use serde_json::json;

/// Who the tests' approvals are by.
pub const APPROVER: &str = "e2e-approver";

/// Approves the diff `plan` (as last read, `AwaitingApproval`) shows: phase `Approved`,
/// bound to its content hash and `status.diff.hash`. Returns the Plan as stored.
pub async fn approve(plans: &Api<Plan>, plan: &Plan) -> Result<Plan, kube_client::Error> {
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let content_hash = plan.spec.content_hash.clone().unwrap_or_default();
    let diff_hash = plan
        .status
        .as_ref()
        .and_then(|s| s.diff.as_ref())
        .map(|d| d.hash.clone());
    let mut status =
        PlanStatus::approval_patch(APPROVER, &content_hash, Time(jiff::Timestamp::now()));
    status["approval"]["diffHash"] = json!(diff_hash);
    let patch = json!({
        "metadata": {"resourceVersion": plan.metadata.resource_version},
        "status": status,
    });
    plans
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Approves Plan `name` as it is stored now.
pub async fn approve_named(plans: &Api<Plan>, name: &str) -> Result<Plan, kube_client::Error> {
    let plan = plans.get(name).await?;
    approve(plans, &plan).await
}

/// Denies Plan `name` (`AwaitingApproval`) with `reason`: phase `Denied`.
pub async fn deny(plans: &Api<Plan>, name: &str, reason: &str) -> Result<Plan, kube_client::Error> {
    let status = PlanStatus::denial_patch(APPROVER, reason, Time(jiff::Timestamp::now()));
    plans
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
}
