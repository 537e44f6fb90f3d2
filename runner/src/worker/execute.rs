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
use kube_client::api::{Patch, PatchParams};
use outpost_api::{AuditEventType, EntityKind, Plan, PlanDiff};
use serde_json::{Value, json};

use super::apply::{
    Clearance, apply, apply_approved, audit_apply, forget_approved, record_outputs, resumed_diff,
    save_diff,
};
use super::policies::{local_policies, read_vendor_policies, vendor_policies};
use super::role::assume_role;
use crate::audit::Subject;
use crate::executor::{Purpose, StepContext, executor_type};
use crate::journal::Stage;
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
pub(super) enum Outcome {
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
pub(super) struct Cut {
    /// The diff it was cleared to apply (masked as journaled).
    pub(super) cleared: Option<PlanDiff>,
    /// Whether a person approved `cleared`.
    pub(super) approved: bool,
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
pub(super) struct Failure {
    message: String,
    refused: bool,
}

pub(super) fn refused(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        refused: true,
    }
}

pub(super) fn failed(message: impl Into<String>) -> Failure {
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

/// Best effort: tells the control plane the runner is planning. The runner goes on
/// without it (the next phase follows through the reporter).
async fn set_planning(session: &Session, name: &str) {
    let patch = Patch::Merge(json!({"status": {"phase": "Planning"}}));
    let params = PatchParams::default();
    let result =
        crate::retry::retry(2, || session.lean_plans.patch_status(name, &params, &patch)).await;
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
