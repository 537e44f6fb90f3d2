//! Applying a Plan's diff: journaled `applying` with what it is cleared to do, then the
//! executor's apply and the one `apply` audit event; an approved Plan's saved diff,
//! applied only while live state has not moved; the diffs kept for a person, by hash.

use outpost_api::{AuditEventType, EntityKind, Plan, PlanDiff};
use serde_json::{Value, json};

use super::execute::{Cut, Failure, Outcome, failed};
use crate::audit::Subject;
use crate::executor::{Applied, Diff, Executor, ExecutorError, Moved, StepContext};
use crate::journal::Stage;
use crate::session::Session;

/// What an apply is cleared to do, journaled with it (`applying`).
pub(super) struct Clearance {
    /// The diff a person approved, or the policies passed.
    pub(super) diff: PlanDiff,
    /// Whether a person approved it.
    pub(super) approved: bool,
}

impl Clearance {
    /// A resumed apply's clearance: its first attempt's, kept through any number of cuts
    /// (the re-plan's, where an older runner journaled none).
    pub(super) fn carried(cut: Cut, replan: &PlanDiff) -> Self {
        Clearance {
            diff: cut.cleared.unwrap_or_else(|| replan.clone()),
            approved: cut.approved,
        }
    }
}

/// The diff a resumed Plan reports with its result: an approved Plan keeps the one it
/// shows (the approval binds to it); another reports the diff it was cleared to apply
/// when the re-plan stayed within it (the whole of what the Plan did), else the re-plan.
pub(super) fn resumed_diff(
    plan: &Plan,
    cut: &Cut,
    within: bool,
    replan: &PlanDiff,
) -> Option<PlanDiff> {
    let shown = plan.status.as_ref().and_then(|s| s.diff.clone());
    if cut.approved {
        return shown.or_else(|| cut.cleared.clone());
    }
    match (&cut.cleared, within) {
        (Some(cleared), true) => Some(cleared.clone()),
        _ => Some(replan.clone()),
    }
}

/// Drops the saved diff of a resumed apply's approval: it is applied now.
pub(super) fn forget_approved(ctx: &StepContext, cleared: &Clearance) {
    if cleared.approved {
        forget_diff(ctx, &cleared.diff.hash);
    }
}

/// Applies the saved diff a person approved, if it is still what live state would get:
/// `None` when it is gone, of another hash, or live state moved (nothing was applied;
/// the caller plans again and asks again).
pub(super) async fn apply_approved(
    session: &Session,
    plan: &Plan,
    executor: &dyn Executor,
    ctx: &StepContext,
    type_name: &str,
    subject: &Subject,
) -> Result<Option<Outcome>, Failure> {
    let status = plan.status.as_ref();
    let approved = status
        .and_then(|s| s.approval.as_ref())
        .and_then(|a| a.diff_hash.clone());
    let shown = status.and_then(|s| s.diff.clone());
    let why_not = |reason: String| {
        tracing::info!(plan = %ctx.plan, %reason, "not applying the approved diff; planning again");
        session.audit(
            AuditEventType::Plan,
            subject.clone(),
            json!({"approvedDiff": approved, "applied": false, "reason": reason}),
        );
        Ok(None)
    };
    let (Some(approved), Some(shown)) = (approved.clone(), shown) else {
        return why_not("the approval names no diff".into());
    };
    if shown.hash != approved {
        return why_not(format!(
            "the approval is of {approved}, the Plan shows {}",
            shown.hash
        ));
    }
    let Some(saved) = load_diff(ctx, &approved) else {
        return why_not(format!("the approved diff {approved} is not saved here"));
    };
    match executor.moved(ctx, &saved).await {
        Ok(None) => {}
        Ok(Some(moved)) => return why_not(moved.to_string()),
        Err(e) => return Err(failed(format!("cannot read live state: {e:#}"))),
    }
    let cleared = Clearance {
        diff: shown.clone(),
        approved: true,
    };
    match apply(session, executor, ctx, &saved, &cleared, false, subject).await {
        Ok(applied) => {
            forget_diff(ctx, &approved);
            record_outputs(session, plan, ctx, type_name, &applied, subject);
            Ok(Some(Outcome::Applied {
                outputs: applied.outputs,
                log: applied.log,
                diff: Some(shown),
                reason: None,
            }))
        }
        Err(ApplyError::Moved(moved)) => {
            forget_diff(ctx, &approved);
            why_not(moved.to_string())
        }
        Err(ApplyError::Failed(failure)) => Err(failure),
    }
}

/// Why an apply did not complete.
pub(super) enum ApplyError {
    /// Live state moved since planning; nothing was applied.
    Moved(Moved),
    /// It failed.
    Failed(Failure),
}

impl From<ApplyError> for Failure {
    fn from(e: ApplyError) -> Self {
        match e {
            ApplyError::Moved(moved) => failed(format!("apply failed: {moved}")),
            ApplyError::Failed(failure) => failure,
        }
    }
}

/// Journals `applying` (with what the apply is cleared to do), then applies `diff` and
/// audits it; `resumed`: the Plan's first apply was cut (the runner killed during it) and
/// this finishes it.
pub(super) async fn apply(
    session: &Session,
    executor: &dyn Executor,
    ctx: &StepContext,
    diff: &Diff,
    cleared: &Clearance,
    resumed: bool,
    subject: &Subject,
) -> Result<Applied, ApplyError> {
    let applying = Stage::Applying {
        summary: diff.summary.clone(),
        cleared: Some(Box::new(cleared.diff.clone())),
        approved: cleared.approved,
    };
    session
        .journal
        .lock()
        .expect("journal lock is never poisoned")
        .record(
            &ctx.plan,
            &ctx.plan_uid,
            applying.masked(&session.masks.current()),
        )
        .expect("the journal in the state dir is writable");
    let applied = tokio::time::timeout(ctx.timeout, executor.apply(ctx, diff))
        .await
        .map_err(|_| {
            ApplyError::Failed(failed(format!("apply timed out after {:?}", ctx.timeout)))
        })?
        .map_err(|e| match e {
            ExecutorError::Moved(moved) => ApplyError::Moved(moved),
            e => ApplyError::Failed(failed(format!("apply failed: {e:#}"))),
        })?;
    audit_apply(session, subject, diff, cleared, resumed, &applied);
    Ok(applied)
}

/// The Plan's one `apply` event, written when its apply completed: what was applied
/// (`summary`, `changes`), whether a person `approved` it, the `outputs` (so that a
/// runner killed right after this event knows the apply completed and reports them),
/// and the executor's details. A resumed apply (the first attempt was cut, which wrote
/// no `apply` event) says `resumed: true` and names the cut apply's cleared diff
/// (`cut: {diffHash, summary}`); what it applied is the re-plan (`changes: false` when
/// the cut apply had completed all of it).
pub(super) fn audit_apply(
    session: &Session,
    subject: &Subject,
    diff: &Diff,
    cleared: &Clearance,
    resumed: bool,
    applied: &Applied,
) {
    let mut details = applied.audit.clone();
    details.extend([
        ("summary".to_owned(), json!(diff.summary)),
        ("changes".to_owned(), json!(diff.changes)),
        ("resumed".to_owned(), json!(resumed)),
        ("approved".to_owned(), json!(cleared.approved)),
        ("outputs".to_owned(), json!(applied.outputs)),
    ]);
    if resumed {
        details.insert(
            "cut".to_owned(),
            json!({"diffHash": cleared.diff.hash, "summary": cleared.diff.summary}),
        );
    }
    session.audit(
        AuditEventType::Apply,
        subject.clone(),
        Value::Object(details),
    );
}

/// Audits the outputs and records the drift baseline of an applied (or unchanged) step.
pub(super) fn record_outputs(
    session: &Session,
    plan: &Plan,
    ctx: &StepContext,
    type_name: &str,
    applied: &Applied,
    subject: &Subject,
) {
    session.audit(
        AuditEventType::Outputs,
        subject.clone(),
        json!({"outputs": applied.outputs}),
    );
    if plan.spec.entity.kind == EntityKind::Component {
        session
            .drift
            .record_step(ctx, type_name, applied, subject.role.as_deref());
    }
}

/// Where the executor's diff waiting for a person is kept: the entity's work dir, by hash.
fn saved_diff_path(ctx: &StepContext, hash: &str) -> std::path::PathBuf {
    let hex = hash.trim_start_matches("sha256:");
    ctx.work_dir.join("approvals").join(format!("{hex}.json"))
}

pub(super) fn save_diff(ctx: &StepContext, hash: &str, diff: &Diff) -> Result<(), String> {
    let path = saved_diff_path(ctx, hash);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(path.parent().unwrap_or(&ctx.work_dir))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(diff)?)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| format!("cannot save the diff to {}: {e}", path.display()))
}

/// The saved diff of `hash`, if it is here and still hashes to it.
fn load_diff(ctx: &StepContext, hash: &str) -> Option<Diff> {
    let bytes = std::fs::read(saved_diff_path(ctx, hash)).ok()?;
    let diff: Diff = serde_json::from_slice(&bytes).ok()?;
    (crate::plan_diff::hash(&diff) == hash).then_some(diff)
}

fn forget_diff(ctx: &StepContext, hash: &str) {
    let _ = std::fs::remove_file(saved_diff_path(ctx, hash));
}
