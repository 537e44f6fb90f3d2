//! Executing one claimed Plan: secrets, executor, the static configuration the executor
//! is about to run (a terraform module, before `terraform init`) and the vendor and local
//! policies taking the `static` input, plan (the real diff), vendor and local policies,
//! then: no changes → `Succeeded` (`NoChanges`, nothing applied); a person must
//! approve (the install's `prompt` mode, an `approve` policy) → `AwaitingApproval` with
//! the diff, which is saved by its hash; else apply and outputs. An approved Plan applies
//! exactly the saved diff, or plans again and asks again if live state moved. An apply cut
//! by a kill is resumed: planned again against live state and finished when the re-plan
//! is within what was cleared ([`crate::plan_diff::within`]). Every transition is
//! journaled before it is acted on and audited; the result is journaled and reported by
//! the reporter, so it survives the control plane being away and the runner being killed.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams, Patch, PatchParams};
use outpost_api::{
    ApprovalMode, AuditEventType, EntityKind, Install, Plan, PlanDiff, Policy, Verdict,
};
use outpost_policy::{CompiledPolicy, PolicyMeta};
use serde_json::{Value, json};

use crate::audit::Subject;
use crate::executor::{Applied, Diff, Executor, Moved, Purpose, StepContext};
use crate::executors::executor_type;
use crate::journal::Stage;
use crate::secrets::{SecretSource, SecretsManagerSecrets};
use crate::session::Session;

/// The reason a Plan fails with when the runner died during its apply, its executor does
/// not resume (a job's steps: [`crate::executor::Executor::resumable`]) and the re-plan
/// still shows changes: applying again could do a step twice.
pub const INTERRUPTED: &str = "interrupted during apply; re-plan required";

/// Where execution starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Claimed from `Ready`, nothing applied: plan, then apply or ask a person.
    Claimed,
    /// Claimed from `Approved` (phase `Applying`), nothing applied: apply the saved diff a
    /// person approved if live state has not moved, else plan again and ask again.
    Approved,
    /// The runner died during apply: re-plan against live state and finish the apply
    /// within what it was cleared to do (`RECOVERY.md`).
    Interrupted,
}

/// The reason of a Plan that succeeded without applying anything: its diff was empty.
pub const NO_CHANGES: &str = "NoChanges";
/// The reason of a Plan that asks again: live state moved after the approval (or the
/// approved diff is gone), so the runner planned again.
pub const REPLANNED: &str = "Replanned";
/// The reason of a Plan whose apply was cut (the runner killed during it) and resumed by
/// a re-plan against live state: `Succeeded`, the re-plan was applied (within what was
/// cleared); `AwaitingApproval`, the re-plan needs a person (outside what a person
/// approved, or a person is needed as for a fresh Plan).
pub const RESUMED: &str = "Resumed";

/// How a Plan's execution ended, short of failing.
enum Outcome {
    /// Applied (or nothing to apply: reason `NoChanges`).
    Applied {
        outputs: BTreeMap<String, Value>,
        log: String,
        diff: Option<PlanDiff>,
        reason: Option<String>,
    },
    /// The diff waits for a person's approval.
    Awaiting {
        diff: PlanDiff,
        reason: Option<String>,
    },
}

/// Runs the Plan to a journaled result (`applied`, `failed` or `awaiting`) and wakes the
/// reporter.
pub async fn execute(session: &Session, plan: Plan, resume: Resume) {
    let name = plan.name_any();
    let uid = plan.uid().unwrap_or_default();
    let subject = Subject {
        plan: Some(name.clone()),
        entity: Some(plan.spec.entity.clone()),
        role: plan
            .status
            .as_ref()
            .and_then(|s| s.role.as_ref())
            .map(|r| r.name.clone()),
    };
    // The secret values resolved for this Plan, masked in all it reports until it is
    // journaled (`crate::mask`).
    let held = session.masks.hold();
    let cut = match resume {
        Resume::Interrupted => Some(cut_apply(session, &uid)),
        Resume::Claimed | Resume::Approved => None,
    };
    let audited = cut.as_ref().and_then(|_| audited_outputs(session, &name));
    let result = match (audited, cut) {
        (Some(outputs), cut) => {
            tracing::info!(plan = %name, "the apply had completed and was audited before the runner stopped");
            // Its printed output went with the process; the outputs are in the audit log.
            // An approved Plan keeps the diff it shows; another reports what it applied.
            Ok(Outcome::Applied {
                outputs,
                log: String::new(),
                diff: cut.filter(|c| !c.approved).and_then(|c| c.cleared),
                reason: None,
            })
        }
        (None, cut) => run(session, &plan, resume, cut, &subject, &held).await,
    };
    let stage = match result {
        Ok(Outcome::Applied {
            outputs,
            log,
            diff,
            reason,
        }) => Stage::Applied {
            outputs,
            log,
            diff: diff.map(Box::new),
            reason,
        },
        Ok(Outcome::Awaiting { diff, reason }) => Stage::Awaiting {
            diff: Box::new(diff),
            reason,
        },
        Err(Failure { message, refused }) => {
            let type_ = if refused {
                AuditEventType::Refuse
            } else {
                AuditEventType::Apply
            };
            session.audit(type_, subject, json!({"failed": message}));
            Stage::Failed { message }
        }
    }
    .masked(&session.masks.current());
    session
        .journal
        .lock()
        .expect("journal lock is never poisoned")
        .record(&name, &uid, stage)
        .expect("the journal in the state dir is writable");
    session.to_report.notify_one();
}

/// The outputs of the Plan's apply if the audit log shows that apply completed after the
/// Plan's last claim (a successful `apply` event, which carries them): the runner stopped
/// after auditing the apply and before journaling it, so the Plan is done and must not be
/// re-planned (a job would fail as interrupted although it ran to completion, and a
/// resumed apply would be audited twice). An `apply` event of an older runner has no
/// outputs; its `outputs` event, written right after, has them.
fn audited_outputs(session: &Session, plan: &str) -> Option<BTreeMap<String, Value>> {
    let audit = session
        .audit
        .lock()
        .expect("audit lock is never poisoned: appends do not panic");
    let events = audit.events();
    let about = |e: &&outpost_api::AuditEventSpec| e.plan.as_deref() == Some(plan);
    let claimed = events
        .iter()
        .rposition(|e| about(&e) && e.type_ == AuditEventType::Claim)?;
    let mut since = events[claimed..].iter().filter(about);
    let applied = since.find(|e| {
        e.type_ == AuditEventType::Apply
            && e.details
                .as_ref()
                .is_some_and(|d| d.get("failed").is_none())
    })?;
    let outputs = match applied.details.as_ref().and_then(|d| d.get("outputs")) {
        Some(outputs) => outputs,
        None => since
            .find(|e| e.type_ == AuditEventType::Outputs)?
            .details
            .as_ref()?
            .get("outputs")?,
    };
    serde_json::from_value(outputs.clone()).ok()
}

/// What the journal says of an apply the runner was killed during.
struct Cut {
    /// The diff it was cleared to apply (masked as journaled).
    cleared: Option<PlanDiff>,
    /// Whether a person approved `cleared`.
    approved: bool,
}

/// The cut apply of the Plan with `uid`, from its journaled `applying` stage.
fn cut_apply(session: &Session, uid: &str) -> Cut {
    let journal = session
        .journal
        .lock()
        .expect("journal lock is never poisoned");
    match journal.stage(uid) {
        Some(Stage::Applying {
            cleared, approved, ..
        }) => Cut {
            cleared: cleared.as_deref().cloned(),
            approved: *approved,
        },
        _ => Cut {
            cleared: None,
            approved: false,
        },
    }
}

/// Why a Plan failed, and whether the runner refused it (rather than trying and failing).
struct Failure {
    message: String,
    refused: bool,
}

fn refused(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        refused: true,
    }
}

fn failed(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        refused: false,
    }
}

async fn run(
    session: &Session,
    plan: &Plan,
    resume: Resume,
    cut: Option<Cut>,
    subject: &Subject,
    held: &crate::mask::Held<'_>,
) -> Result<Outcome, Failure> {
    let name = plan.name_any();
    let uid = plan.uid().unwrap_or_default();
    let type_name = executor_type(plan).map_err(refused)?;
    let executor = session.executors.get(&type_name).ok_or_else(|| {
        refused(format!(
            "component type {type_name} is not supported by this runner"
        ))
    })?;
    let (mut env, role_secrets) = assume_role(session, plan, subject).await?;
    let desired = plan.spec.desired_state.clone().unwrap_or(Value::Null);
    // After the role is assumed: that read the install stack, with the customer's
    // current parameters, again.
    let desired = crate::customer_inputs::fill(session, &desired)
        .await
        .map_err(refused)?;
    let source = role_secrets
        .as_deref()
        .unwrap_or_else(|| session.secrets.as_ref());
    let secrets = crate::secrets::resolve(&desired, source)
        .await
        .map_err(|e| refused(e.to_string()))?;
    env.extend(
        secrets
            .iter()
            .map(|(k, v)| (crate::secrets::env_name(k), v.clone())),
    );
    held.add(&crate::mask::Masker::of_env(&env));
    let ctx = StepContext {
        plan: name.clone(),
        plan_uid: uid.clone(),
        operation: plan.spec.operation,
        entity: plan.spec.entity.name.clone(),
        desired: desired.clone(),
        work_dir: work_dir(session, plan).map_err(failed)?,
        env,
        timeout: timeout(plan),
    };
    let (vendor, prompt) = read_vendor_policies(session).await?;

    let mut replanned = false;
    match resume {
        Resume::Approved => {
            match apply_approved(session, plan, executor.as_ref(), &ctx, &type_name, subject)
                .await?
            {
                Some(outcome) => return Ok(outcome),
                None => replanned = true,
            }
        }
        Resume::Claimed => set_planning(session, &name).await,
        // The Plan is `Planning` (or `Applying`, approved) already.
        Resume::Interrupted => {}
    }

    // The static configuration first: a deny stops the Plan before any vendor code runs.
    let static_verdicts = match executor.configuration(&ctx, Purpose::Plan).await {
        Ok(Some(config)) => {
            let mut verdicts = vendor_policies(session, vendor.clone(), &config, subject)?;
            verdicts.extend(local_policies(session, &config, subject, false)?);
            verdicts
        }
        Ok(None) => Vec::new(),
        Err(e) => return Err(refused(format!("{e:#}"))),
    };
    let diff = tokio::time::timeout(ctx.timeout, executor.plan(&ctx))
        .await
        .map_err(|_| failed(format!("plan timed out after {:?}", ctx.timeout)))?
        .map_err(|e| failed(format!("plan failed: {e:#}")))?;
    let mut plan_diff = crate::plan_diff::plan_diff(&diff);
    // A resumed apply is held to what its first attempt was cleared to apply (journaled
    // masked, so compared masked).
    let within = cut.as_ref().map(|cut| match &cut.cleared {
        Some(cleared) => crate::plan_diff::within(
            &crate::journal::mask_diff(&session.masks.current(), &plan_diff),
            cleared,
        ),
        None => Err("the journal holds no cleared diff for the cut apply".to_owned()),
    });
    let mut planned = json!({"executor": type_name, "summary": diff.summary,
        "changes": diff.changes, "diffHash": plan_diff.hash, "replanned": replanned});
    if let Some(within) = &within {
        planned["resumed"] = json!(true);
        planned["withinCleared"] = json!(within.is_ok());
        if let Err(why) = within {
            planned["outside"] = json!(why);
        }
    }
    session.audit(AuditEventType::Plan, subject.clone(), planned);
    if cut.is_some() && diff.changes && !executor.resumable() {
        return Err(failed(INTERRUPTED));
    }
    plan_diff.verdicts = static_verdicts;
    plan_diff
        .verdicts
        .extend(vendor_policies(session, vendor, &diff, subject)?);
    plan_diff
        .verdicts
        .extend(local_policies(session, &diff, subject, true)?);

    if !diff.changes {
        // Nothing to apply, on any install: the Plan succeeds without applying.
        let current = tokio::time::timeout(ctx.timeout, executor.unchanged(&ctx, &diff))
            .await
            .map_err(|_| {
                failed(format!(
                    "reading live state timed out after {:?}",
                    ctx.timeout
                ))
            })?
            .map_err(|e| failed(format!("reading live state failed: {e:#}")))?;
        if let Some(cut) = cut {
            // The cut apply had completed: its one `apply` event is written now.
            let reported = resumed_diff(plan, &cut, true, &plan_diff);
            let cleared = Clearance::carried(cut, &plan_diff);
            audit_apply(session, subject, &diff, &cleared, true, &current);
            record_outputs(session, plan, &ctx, &type_name, &current, subject);
            forget_approved(&ctx, &cleared);
            return Ok(Outcome::Applied {
                outputs: current.outputs,
                log: current.log,
                diff: reported,
                reason: Some(RESUMED.to_owned()),
            });
        }
        record_outputs(session, plan, &ctx, &type_name, &current, subject);
        return Ok(Outcome::Applied {
            outputs: current.outputs,
            log: current.log,
            diff: Some(plan_diff),
            reason: Some(NO_CHANGES.to_owned()),
        });
    }
    let gate_asks = plan
        .status
        .as_ref()
        .is_some_and(|s| s.verdicts.iter().any(|v| v.approval_required));
    let needs_person = replanned || prompt || gate_asks || plan_diff.approval_required();
    // A resumed apply a person approved finishes only within that approval; one that
    // needed nobody goes by the rules a fresh Plan would.
    let ask = match (&cut, &within) {
        (Some(cut), Some(within)) if cut.approved => within.is_err(),
        _ => needs_person,
    };
    if ask {
        save_diff(&ctx, &plan_diff.hash, &diff).map_err(failed)?;
        session.audit(
            AuditEventType::Plan,
            subject.clone(),
            json!({"awaitingApproval": true, "diffHash": plan_diff.hash}),
        );
        let reason = match (&cut, replanned) {
            (Some(_), _) => Some(RESUMED.to_owned()),
            (None, true) => Some(REPLANNED.to_owned()),
            (None, false) => None,
        };
        return Ok(Outcome::Awaiting {
            diff: plan_diff,
            reason,
        });
    }
    let (cleared, reported, reason) = match cut {
        None => (
            Clearance {
                diff: plan_diff.clone(),
                approved: false,
            },
            Some(plan_diff),
            None,
        ),
        Some(cut) => {
            let is_within = within.as_ref().is_some_and(Result::is_ok);
            let reported = resumed_diff(plan, &cut, is_within, &plan_diff);
            (
                Clearance::carried(cut, &plan_diff),
                reported,
                Some(RESUMED.to_owned()),
            )
        }
    };
    let resumed = reason.is_some();
    let applied = apply(
        session,
        executor.as_ref(),
        &ctx,
        &diff,
        &cleared,
        resumed,
        subject,
    )
    .await?;
    record_outputs(session, plan, &ctx, &type_name, &applied, subject);
    forget_approved(&ctx, &cleared);
    Ok(Outcome::Applied {
        outputs: applied.outputs,
        log: applied.log,
        diff: reported,
        reason,
    })
}

/// What an apply is cleared to do, journaled with it (`applying`).
struct Clearance {
    /// The diff a person approved, or the policies passed.
    diff: PlanDiff,
    /// Whether a person approved it.
    approved: bool,
}

impl Clearance {
    /// A resumed apply's clearance: its first attempt's, kept through any number of cuts
    /// (the re-plan's, where an older runner journaled none).
    fn carried(cut: Cut, replan: &PlanDiff) -> Self {
        Clearance {
            diff: cut.cleared.unwrap_or_else(|| replan.clone()),
            approved: cut.approved,
        }
    }
}

/// The diff a resumed Plan reports with its result: an approved Plan keeps the one it
/// shows (the approval binds to it); another reports the diff it was cleared to apply
/// when the re-plan stayed within it (the whole of what the Plan did), else the re-plan.
fn resumed_diff(plan: &Plan, cut: &Cut, within: bool, replan: &PlanDiff) -> Option<PlanDiff> {
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
fn forget_approved(ctx: &StepContext, cleared: &Clearance) {
    if cleared.approved {
        forget_diff(ctx, &cleared.diff.hash);
    }
}

/// Applies the saved diff a person approved, if it is still what live state would get:
/// `None` when it is gone, of another hash, or live state moved (nothing was applied;
/// the caller plans again and asks again).
async fn apply_approved(
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
enum ApplyError {
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
async fn apply(
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
        .map_err(|e| match e.downcast::<Moved>() {
            Ok(moved) => ApplyError::Moved(moved),
            Err(e) => ApplyError::Failed(failed(format!("apply failed: {e:#}"))),
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
fn audit_apply(
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
fn record_outputs(
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

fn save_diff(ctx: &StepContext, hash: &str, diff: &Diff) -> Result<(), String> {
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

/// The executor's environment for a Plan's role, and where the Plan's secrets are read
/// when not from the runner's own store.
type RoleEnvironment = (BTreeMap<String, String>, Option<Box<dyn SecretSource>>);

/// Audits the Plan's resolved role and, with a customer AWS account (`--stack`),
/// assumes it: the executor's environment gets its temporary credentials, and the
/// Plan's secrets are read from Secrets Manager under it (unless `--secrets-dir`). A
/// role that cannot be assumed fails the Plan closed; there is no fallback to another
/// role.
async fn assume_role(
    session: &Session,
    plan: &Plan,
    subject: &Subject,
) -> Result<RoleEnvironment, Failure> {
    let Some(role) = &subject.role else {
        return match session.aws {
            Some(_) => Err(refused(
                "the plan has no resolved role, and every plan runs under one in the customer account",
            )),
            None => Ok((BTreeMap::new(), None)),
        };
    };
    let level = plan
        .status
        .as_ref()
        .and_then(|s| s.role.as_ref())
        .map(|r| r.level);
    let Some(account) = &session.aws else {
        session.audit(
            AuditEventType::Role,
            subject.clone(),
            json!({"role": role, "level": level}),
        );
        return Ok((BTreeMap::new(), None));
    };
    let uid = plan.uid().unwrap_or_default();
    match account.assume(role, &uid).await {
        Ok(assumed) => {
            // The identity and ARN only: credentials never enter the audit log.
            session.audit(
                AuditEventType::Role,
                subject.clone(),
                json!({"role": role, "level": level, "roleArn": assumed.role_arn,
                       "assumedRole": assumed.identity, "expires": assumed.expires,
                       "stack": account.stack_name}),
            );
            let secrets = role_secrets(session, account, &assumed);
            Ok((account.environment(&assumed), secrets))
        }
        Err(e) => {
            tracing::warn!(plan = %plan.name_any(), role = %role, reason = %e, "role not assumable; the plan fails closed");
            session.audit(
                AuditEventType::Role,
                subject.clone(),
                json!({"role": role, "level": level, "assumable": false, "reason": e.to_string(),
                       "stack": account.stack_name}),
            );
            Err(refused(crate::aws::RoleError::plan_message(role)))
        }
    }
}

/// Where work under `assumed` reads secrets: the install's Secrets Manager secrets with
/// the role's credentials, or `None` with `--secrets-dir` (the runner's store).
pub(crate) fn role_secrets(
    session: &Session,
    account: &crate::aws::Account,
    assumed: &crate::aws::AssumedRole,
) -> Option<Box<dyn SecretSource>> {
    match session.args.secrets_dir {
        Some(_) => None,
        None => Some(Box::new(SecretsManagerSecrets::new(
            &account.config_for(assumed),
            &session.namespace,
            &session.install,
        ))),
    }
}

/// Reads the install's vendor policies: the Policies of its App that select it, as the
/// control plane's gate does. Read right after the claim, while the control plane was
/// just reachable; when it is not, the last list read is used, and if none was ever read
/// the Plan fails closed. An install object that is gone selects no policy.
///
/// Also says whether the install asks a person to approve every diff (`approvalMode:
/// prompt`); when the install cannot be read now, it is taken to (a person is asked
/// rather than nobody).
async fn read_vendor_policies(session: &Session) -> Result<(Vec<Policy>, bool), Failure> {
    let client = session.plans.clone().into_client();
    let installs = Api::<Install>::namespaced(client.clone(), &session.namespace);
    let all = Api::<Policy>::namespaced(client, &session.namespace);
    let every = ListParams::default();
    let read = async {
        let Some(install) = crate::retry::retry(2, || installs.get_opt(&session.install)).await?
        else {
            // Gone since the gate passed the Plan (which it does only for an existing
            // install): no policy selects it, and no mode asks for a person.
            return Ok((Vec::new(), false));
        };
        let policies = crate::retry::retry(2, || all.list(&every)).await?;
        Ok::<_, kube_client::Error>((
            policies
                .items
                .into_iter()
                .filter(|p| outpost_policy::applies_to_install(p, &install))
                .collect::<Vec<_>>(),
            install.spec.approval_mode() == ApprovalMode::Prompt,
        ))
    };
    match read.await {
        Ok((policies, prompt)) => {
            *session.vendor_policies.lock().expect("not poisoned") = Some(policies.clone());
            Ok((policies, prompt))
        }
        Err(e) => match session
            .vendor_policies
            .lock()
            .expect("not poisoned")
            .clone()
        {
            Some(policies) => {
                tracing::warn!(error = %e, "cannot read the vendor policies; using the last read");
                Ok((policies, true))
            }
            None => Err(refused(format!(
                "the install's vendor policies cannot be read to check the real diff, so \
                 nothing is applied: {e}"
            ))),
        },
    }
}

/// Evaluates the vendor policies on the real diff too: the gate saw only the desired
/// state (a terraform plan, for one, exists only here). A deny fails the Plan; the
/// verdicts (an `approve` policy's asks a person) go with the diff.
fn vendor_policies(
    session: &Session,
    policies: Vec<Policy>,
    diff: &Diff,
    subject: &Subject,
) -> Result<Vec<Verdict>, Failure> {
    let policies: Vec<Policy> = policies
        .into_iter()
        .filter(|p| p.spec.inputs.contains(&diff.input))
        .collect();
    if policies.is_empty() {
        return Ok(Vec::new());
    }
    let mut compiled = Vec::new();
    let mut denials = Vec::new();
    for policy in &policies {
        let meta = PolicyMeta::from_policy(policy);
        match outpost_policy::compile(&meta.name, &policy.spec.module) {
            Ok(module) => compiled.push((meta, module)),
            Err(e) => denials.push(format!("{}: the policy does not compile: {e}", meta.name)),
        }
    }
    let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> = compiled.iter().map(|(m, c)| (m, c)).collect();
    let verdicts = outpost_policy::evaluate(&pairs, diff.input, &diff.document);
    session.audit(
        AuditEventType::Verdict,
        subject.clone(),
        json!({"vendor": true, "input": diff.input, "verdicts": audited_verdicts(&verdicts)}),
    );
    denials.extend(
        verdicts
            .iter()
            .filter(|v| v.denied())
            .map(|v| format!("{}: {}", v.policy, v.denials.join("; "))),
    );
    if denials.is_empty() {
        Ok(verdicts.into_iter().map(Verdict::from).collect())
    } else {
        Err(refused(format!(
            "denied by vendor policy on the real diff {}",
            denials.join("; ")
        )))
    }
}

/// Evaluates the local policies (if any) on `diff` (the real diff, or the static
/// configuration before it runs); a deny fails the Plan. The verdicts go with the diff,
/// marked `local`; they are audited (with none, only if `audit_none`).
fn local_policies(
    session: &Session,
    diff: &Diff,
    subject: &Subject,
    audit_none: bool,
) -> Result<Vec<Verdict>, Failure> {
    local_verdicts(session, diff, subject, json!({}), audit_none).map_err(refused)
}

/// Evaluates the local policies (if any) on `diff` and audits their verdicts (with
/// `details` added; with none, only if `audit_none`); `Err` with the message of a deny,
/// or of policies that do not load.
pub(crate) fn local_verdicts(
    session: &Session,
    diff: &Diff,
    subject: &Subject,
    details: Value,
    audit_none: bool,
) -> Result<Vec<Verdict>, String> {
    let Some(dir) = &session.args.policies else {
        return Ok(Vec::new());
    };
    // Read on every Plan: the customer may change them without restarting the runner.
    let verdicts = match crate::local_policy::load(dir) {
        Ok(policies) => policies.evaluate(diff),
        Err(e) => {
            return Err(format!(
                "local policies in {} cannot be loaded, so nothing is run: {e:#}",
                dir.display()
            ));
        }
    };
    let mut audited =
        json!({"local": true, "input": diff.input, "verdicts": audited_verdicts(&verdicts)});
    if let (Some(audited), Value::Object(more)) = (audited.as_object_mut(), details) {
        audited.extend(more);
    }
    if audit_none || !verdicts.is_empty() {
        session.audit(AuditEventType::Verdict, subject.clone(), audited);
    }
    let denials: Vec<String> = verdicts
        .iter()
        .filter(|v| v.denied())
        .map(|v| format!("{}: {}", v.policy, v.denials.join("; ")))
        .collect();
    if denials.is_empty() {
        Ok(verdicts
            .into_iter()
            .map(|v| Verdict {
                local: true,
                ..Verdict::from(v)
            })
            .collect())
    } else {
        Err(format!("denied by local policy {}", denials.join("; ")))
    }
}

/// Verdicts as the `verdict` audit event lists them.
fn audited_verdicts(verdicts: &[outpost_policy::PolicyVerdict]) -> Vec<Value> {
    verdicts
        .iter()
        .map(|v| json!({"policy": v.policy, "denied": v.denied(), "denials": v.denials, "warnings": v.warnings}))
        .collect()
}

/// Best effort: tells the control plane the runner is planning. The runner goes on
/// without it (the next phase follows through the reporter).
async fn set_planning(session: &Session, name: &str) {
    let patch = Patch::Merge(json!({"status": {"phase": "Planning"}}));
    let params = PatchParams::default();
    let result = crate::retry::retry(2, || session.plans.patch_status(name, &params, &patch)).await;
    if let Err(e) = result {
        tracing::warn!(plan = %name, error = %e, "cannot set phase Planning; going on");
    }
}

/// The entity's working directory, kept across Plans: `WORK/<kind>-<name>`
/// ([`crate::work_dirs`]).
fn work_dir(session: &Session, plan: &Plan) -> Result<std::path::PathBuf, String> {
    let kind = match plan.spec.entity.kind {
        EntityKind::Sandbox => "sandbox",
        EntityKind::Component => "component",
        EntityKind::Action => "action",
    };
    crate::work_dirs::entity(&session.args.work_root(), kind, &plan.spec.entity.name)
        .map_err(|e| format!("{e:#}"))
}

/// An action's `timeoutSeconds`, or 600 s; components and the sandbox get an hour.
fn timeout(plan: &Plan) -> Duration {
    let seconds = match plan.spec.entity.kind {
        EntityKind::Action => plan
            .spec
            .desired_state
            .as_ref()
            .and_then(|d| d.get("timeoutSeconds"))
            .and_then(Value::as_u64)
            .unwrap_or(u64::from(outpost_api::ActionSpec::DEFAULT_TIMEOUT_SECONDS)),
        _ => 3600,
    };
    Duration::from_secs(seconds)
}
