//! The worker: the runner's one home for running Plans. It recovers what the journal
//! says was in flight, then takes claimable Plans (`Ready`, or `Approved` by a person)
//! one at a time, in the order they were approved, as the watch reports them, claims
//! each and executes it:
//!
//! * [`execute`]: one claimed Plan from start to journaled result (the flow);
//! * `apply`: journaled, audited apply, and the saved diffs a person approves;
//! * `policies`: the vendor's and the customer's policies on the diff;
//! * `role`: the role the Plan runs under.
//!
//! The executors it calls, one per component type, are in [`crate::executor`].

use std::sync::Arc;
use std::time::Duration;

use kube_client::ResourceExt as _;
use outpost_api::{AuditEventType, Plan, PlanPhase};
use serde_json::json;

use crate::audit::Subject;
use crate::claim::{Claim, claim, refusal, refuse};
use crate::journal::Stage;
use crate::session::Session;
use execute::{Resume, execute};

mod apply;
pub mod execute;
pub(crate) mod policies;
pub(crate) mod role;

/// Runs forever: recovery first, then every approved Plan as it is seen.
pub async fn work(session: Arc<Session>) {
    recover(&session).await;
    loop {
        match next_approved(&session) {
            Some(plan) => take(&session, &plan).await,
            // The watch wakes us; the timeout only guards against a lost wake-up.
            None => {
                let _ =
                    tokio::time::timeout(Duration::from_secs(30), session.plans_changed.notified())
                        .await;
            }
        }
    }
}

fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
}

fn journal_stage(session: &Session, uid: &str) -> Option<Stage> {
    session
        .journal
        .lock()
        .expect("journal lock is never poisoned")
        .stage(uid)
        .cloned()
}

fn record(session: &Session, plan: &Plan, stage: Stage) {
    session
        .journal
        .lock()
        .expect("journal lock is never poisoned")
        .record(&plan.name_any(), &plan.uid().unwrap_or_default(), stage)
        .expect("the journal in the state dir is writable");
}

/// The first claimable Plan (`Ready`, or `Approved` by a person; by approval time, then
/// creation, then name) that this runner has not handled. A Plan whose claim may or may
/// not have been sent (`claiming`) and that is still claimable is tried again; one
/// released to a person (`released`) is taken again once approved.
fn next_approved(session: &Session) -> Option<Plan> {
    let mut approved: Vec<Arc<Plan>> = session
        .store
        .state()
        .into_iter()
        .filter(|p| crate::claim::claimable(phase(p)))
        .filter(|p| p.spec.install == session.install)
        .filter(|p| {
            matches!(
                journal_stage(session, &p.uid().unwrap_or_default()),
                None | Some(Stage::Claiming { .. } | Stage::Released { .. })
            )
        })
        .collect();
    approved.sort_by_key(|p| {
        (
            p.status
                .as_ref()
                .and_then(|s| s.approval.as_ref())
                .map(|a| a.at.0),
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.name_any(),
        )
    });
    approved.first().map(|p| Plan::clone(p))
}

fn subject(plan: &Plan) -> Subject {
    Subject {
        plan: Some(plan.name_any()),
        entity: Some(plan.spec.entity.clone()),
        role: plan
            .status
            .as_ref()
            .and_then(|s| s.role.as_ref())
            .map(|r| r.name.clone()),
    }
}

/// How often a Plan that changed under a claim but is still approved is claimed again at
/// once, as stored now, before the worker goes back to its watched copy.
const CLAIM_ROUNDS: usize = 3;

/// Claims `plan` (or refuses it as stale) and executes it if the claim is won.
///
/// A claim whose answer never came (the API server died after committing it, or before)
/// is sent again, with the same resourceVersion, until an answer comes — from this
/// server or the next one: the store lets at most one of the two through, and a `409`
/// is resolved by reading the Plan (claimed by this runner: the lost answer had won).
async fn take(session: &Session, plan: &Plan) {
    let name = plan.name_any();
    let uid = plan.uid();
    let mut plan = plan.clone();
    for _ in 0..CLAIM_ROUNDS {
        record(
            session,
            &plan,
            Stage::Claiming {
                resource_version: plan.resource_version().unwrap_or_default(),
            },
        );
        let stale = refusal(&plan);
        let attempt = crate::retry::retry(usize::MAX, || async {
            match stale {
                Some(reason) => refuse(&session.plans, &plan, &session.name, reason).await,
                None => claim(&session.plans, &plan, &session.name).await,
            }
        })
        .await;
        let lost = match (attempt, stale) {
            (Ok(Claim::Won(_)), Some(reason)) => {
                refused(session, &plan, reason);
                return;
            }
            (Ok(Claim::Won(claimed)), None) => {
                record(session, &plan, Stage::Claimed);
                session.audit(AuditEventType::Claim, subject(&plan), json!({}));
                let resume = resume_of(&claimed);
                execute(session, *claimed, resume).await;
                return;
            }
            (Ok(Claim::Lost), _) => get(session, &name).await,
            (Err(e), _) => {
                // Not transient (the server's answer, not its absence): the journal
                // says `claiming`, and the worker tries again.
                tracing::warn!(plan = %name, error = %e, "cannot claim; will retry");
                tokio::time::sleep(Duration::from_secs(1)).await;
                return;
            }
        };
        // Lost — unless an earlier attempt whose answer never came did win.
        match (lost, stale) {
            // Deleted, and the name taken by another Plan: that one is taken afresh.
            (Some(current), _) if current.uid() != uid => {}
            (Some(current), None) if ours(session, &current) => {
                record(session, &current, Stage::Claimed);
                session.audit(AuditEventType::Claim, subject(&current), json!({}));
                let resume = resume_of(&current);
                execute(session, current, resume).await;
                return;
            }
            (Some(current), Some(reason)) if refused_by_us(session, &current, reason) => {
                refused(session, &current, reason);
                return;
            }
            (Some(current), _) if crate::claim::claimable(phase(&current)) => {
                // Changed under us but still approved: claim it as it is now.
                plan = current;
                continue;
            }
            _ => {}
        }
        record(session, &plan, Stage::Lost);
        return;
    }
}

/// Where a claimed Plan starts: claimed from `Approved` (now `Applying`, nothing applied
/// yet), it applies the approved diff; claimed from `Ready`, it plans.
fn resume_of(plan: &Plan) -> Resume {
    match phase(plan) {
        Some(PlanPhase::Applying) => Resume::Approved,
        _ => Resume::Claimed,
    }
}

/// Records that this runner's refusal of `plan` landed.
fn refused(session: &Session, plan: &Plan, reason: &str) {
    session.audit(
        AuditEventType::Refuse,
        subject(plan),
        json!({"reason": reason}),
    );
    record(session, plan, Stage::Reported);
}

/// Whether the Plan was failed by this runner's refusal for `reason`.
fn refused_by_us(session: &Session, plan: &Plan, reason: &str) -> bool {
    let status = plan.status.as_ref();
    phase(plan) == Some(PlanPhase::Failed)
        && status.and_then(|s| s.claimed_by.as_deref()) == Some(session.name.as_str())
        && status.and_then(|s| s.message.as_deref()) == Some(reason)
}

/// Whether the Plan is claimed by this runner and not finished.
fn ours(session: &Session, plan: &Plan) -> bool {
    plan.status.as_ref().and_then(|s| s.claimed_by.as_deref()) == Some(session.name.as_str())
        && matches!(
            phase(plan),
            Some(
                PlanPhase::Claimed | PlanPhase::Planning | PlanPhase::Planned | PlanPhase::Applying
            )
        )
}

/// The Plan as stored now, waiting for the control plane as long as it takes; `None`
/// when it no longer exists.
async fn get(session: &Session, name: &str) -> Option<Plan> {
    loop {
        match crate::retry::retry(usize::MAX, || session.plans.get_opt(name)).await {
            Ok(plan) => return plan,
            Err(e) => {
                tracing::warn!(plan = %name, error = %e, "cannot read plan; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// Finishes what the journal says was in flight when the runner last stopped:
///
/// | last stage | what the runner does |
/// |---|---|
/// | `claiming` | if the Plan is claimed by this runner, runs it; if still claimable, claims it again; else nothing |
/// | `claimed` | nothing was applied yet: plans (claimed from `Ready`) or applies the approved diff (claimed from `Approved`, phase `Applying`) |
/// | `applying` | the apply was audited → report it; else re-plan and resume: within what the cut apply was cleared to do → apply the re-plan (`Resumed`); a person approved and it is outside that → ask again; a job (not resumable) with changes → fail "interrupted during apply; re-plan required" |
/// | `applied` / `failed` / `awaiting` | reports (the reporter does this) |
/// | `released` | nothing: the worker takes the Plan again once it is approved |
async fn recover(session: &Session) {
    let unfinished = session
        .journal
        .lock()
        .expect("journal lock is never poisoned")
        .unfinished();
    for entry in unfinished {
        let interrupted = match entry.stage {
            Stage::Claiming { .. } | Stage::Claimed => false,
            Stage::Applying { .. } => true,
            _ => continue,
        };
        let Some(plan) = get(session, &entry.plan).await else {
            session
                .journal
                .lock()
                .expect("journal lock is never poisoned")
                .record(&entry.plan, &entry.uid, Stage::Lost)
                .expect("the journal in the state dir is writable");
            continue;
        };
        if plan.uid().as_deref() != Some(entry.uid.as_str()) {
            record(session, &plan, Stage::Lost);
            continue;
        }
        let claiming = matches!(entry.stage, Stage::Claiming { .. });
        if claiming && crate::claim::claimable(phase(&plan)) {
            continue; // the claim never landed: the worker loop claims it again
        }
        if !ours(session, &plan) {
            // Someone else's, or already final (e.g. a refusal that landed).
            let stage = if claiming {
                Stage::Lost
            } else {
                Stage::Reported
            };
            record(session, &plan, stage);
            continue;
        }
        tracing::info!(plan = %entry.plan, stage = ?entry.stage, "resuming after restart");
        if claiming {
            record(session, &plan, Stage::Claimed);
            session.audit(AuditEventType::Claim, subject(&plan), json!({}));
        }
        let resume = if interrupted {
            Resume::Interrupted
        } else {
            resume_of(&plan)
        };
        execute(session, plan, resume).await;
    }
}
