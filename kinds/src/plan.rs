//! A Plan's lifecycle, enforced on every write of its status and on its `approval`
//! subresource: who may move it where ([`outpost_api::plan_lifecycle::allowed`]), which
//! status fields each writer may change, when a person's approval is needed first, and
//! the approval itself ([`decide`]). Pure functions over the stored and the new object;
//! the admission plugin and the `approval` subresource of [`crate::approval`] call them. `SECURITY.md` lists the rules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::plan_lifecycle::{
    APPROVAL_FIELD, ApprovalDecision, ApprovalRequest, PlanDiff, RUNNER_FIELDS, Writer, allowed,
};
use outpost_api::{Approval, FieldError, PlanPhase, PlanStatus};
use serde_json::{Map, Value, json};

/// The subresource on which people decide on a Plan: `plans/NAME/approval`.
pub const APPROVAL_SUBRESOURCE: &str = "approval";

/// Whether objects of `rt` have the lifecycle and the [`APPROVAL_SUBRESOURCE`] (Plans).
pub fn has_lifecycle(rt: &outpost_apiserver::registry::ResourceType) -> bool {
    rt.group == outpost_api::GROUP && rt.plural == "plans"
}

/// Why a Plan write or decision is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 403: the writer may never do this.
    Forbidden(String),
    /// 409: not in the Plan's current state.
    Conflict(String),
    /// 422: the request itself is incomplete.
    Invalid(FieldError),
}

/// The phases in the order of the lifecycle, to ask whether a writer could ever make a move.
const PHASES: [PlanPhase; 11] = [
    PlanPhase::Pending,
    PlanPhase::Denied,
    PlanPhase::Ready,
    PlanPhase::Claimed,
    PlanPhase::Planning,
    PlanPhase::Planned,
    PlanPhase::AwaitingApproval,
    PlanPhase::Approved,
    PlanPhase::Applying,
    PlanPhase::Succeeded,
    PlanPhase::Failed,
];

/// What the server knows about the Plan's install when a status write comes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstallPolicy {
    /// The install's `spec.approvalMode` is `prompt` (also when the install is not
    /// found: `prompt` is the default).
    pub prompts: bool,
}

fn status_map(object: &Value) -> Map<String, Value> {
    object
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Whether a status field is unchanged; a field left out and one that is empty (`null`,
/// `[]`, `{}`) are the same: a client that serialises its typed status skips empty
/// fields another writer stored as `[]`.
fn same_field(old: Option<&Value>, new: Option<&Value>) -> bool {
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        _ => false,
    };
    old == new || (empty(old) && empty(new))
}

fn typed_status(status: &Map<String, Value>) -> Result<PlanStatus, Refusal> {
    serde_json::from_value(Value::Object(status.clone()))
        .map_err(|err| Refusal::Invalid(FieldError::invalid("status", "", err.to_string())))
}

/// Checks a write of a Plan's status (`old` stored, `new` about to be stored) by
/// `writer`, and makes the server's own changes to `new`: moving into
/// `AwaitingApproval` drops an old approval.
pub fn check_status_write(
    writer: Writer,
    install: InstallPolicy,
    old: &Value,
    new: &mut Value,
) -> Result<(), Refusal> {
    let old_map = status_map(old);
    let new_map = status_map(new);
    let old_status = typed_status(&old_map)?;
    let new_status = typed_status(&new_map)?;
    let from = old_status.phase.unwrap_or(PlanPhase::Pending);
    let to = new_status.phase.unwrap_or(PlanPhase::Pending);

    let mut changed: Vec<&str> = old_map
        .keys()
        .chain(new_map.keys())
        .map(String::as_str)
        .filter(|k| !same_field(old_map.get(*k), new_map.get(*k)))
        .collect();
    changed.sort_unstable();
    changed.dedup();
    // Asking again (→ AwaitingApproval) may leave the old approval out: the server
    // drops it anyway. Any other change of it is refused, admins included.
    let approval_dropped_on_ask =
        to == PlanPhase::AwaitingApproval && from != to && !new_map.contains_key(APPROVAL_FIELD);
    if changed.contains(&APPROVAL_FIELD) && !approval_dropped_on_ask {
        return Err(Refusal::Forbidden(
            "status.approval is written only by the server, from plans/NAME/approval: nobody may change it through status".into(),
        ));
    }
    if writer == Writer::Runner
        && let Some(field) = changed
            .iter()
            .find(|f| **f != APPROVAL_FIELD && !RUNNER_FIELDS.contains(*f))
    {
        return Err(Refusal::Forbidden(format!(
            "a runner may not change status.{field}: it writes only {}",
            RUNNER_FIELDS.join(", ")
        )));
    }

    if let Err(why) = allowed(writer, Some(from), to) {
        let ever = PHASES
            .iter()
            .any(|f| *f != to && allowed(writer, Some(*f), to).is_ok());
        return Err(if ever {
            Refusal::Conflict(why)
        } else {
            Refusal::Forbidden(why)
        });
    }

    let diff_changed = old_status.diff != new_status.diff;
    let may_change_diff = match from {
        PlanPhase::Pending
        | PlanPhase::Ready
        | PlanPhase::Claimed
        | PlanPhase::Planning
        | PlanPhase::Planned => true,
        PlanPhase::Applying => old_status.approval.is_none() || to == PlanPhase::AwaitingApproval,
        PlanPhase::Approved => to == PlanPhase::AwaitingApproval,
        _ => false,
    };
    if diff_changed && !may_change_diff {
        return Err(Refusal::Conflict(format!(
            "status.diff may not change in phase {from:?}: a decision binds to {}; post a new diff with AwaitingApproval to ask again",
            hash_of(old_status.diff.as_ref())
        )));
    }

    if from == to {
        return Ok(());
    }
    match to {
        PlanPhase::AwaitingApproval => {
            if new_status.diff.is_none() {
                return Err(Refusal::Invalid(FieldError::required(
                    "status.diff",
                    "a Plan awaits approval only with the diff to approve",
                )));
            }
            if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
                status.remove(APPROVAL_FIELD);
            }
        }
        PlanPhase::Applying | PlanPhase::Succeeded
            if matches!(
                from,
                PlanPhase::Ready | PlanPhase::Claimed | PlanPhase::Planning | PlanPhase::Planned
            ) =>
        {
            let no_op = to == PlanPhase::Succeeded
                && new_status.diff.as_ref().is_some_and(|d| !d.has_changes());
            if !no_op && let Some(why) = approval_needed(install, &new_status) {
                return Err(Refusal::Conflict(format!(
                    "{why}: post the diff with AwaitingApproval"
                )));
            }
        }
        PlanPhase::Applying | PlanPhase::Succeeded if from == PlanPhase::Approved => {
            let approval = new_status.approval.as_ref();
            let diff = hash_of(new_status.diff.as_ref());
            match approval {
                Some(a)
                    if a.decision == ApprovalDecision::Approve
                        && a.diff_hash.as_deref() == Some(diff.as_str()) => {}
                Some(a) if a.decision == ApprovalDecision::Approve => {
                    return Err(Refusal::Conflict(format!(
                        "the approval is for {}, not for the diff {diff}",
                        a.diff_hash.as_deref().unwrap_or("no diff")
                    )));
                }
                _ => {
                    return Err(Refusal::Conflict(
                        "the Plan has no approval to apply".into(),
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The status fields a Plan may be created with: its gate's decision (the phase it
/// passes or denies with, the role it resolved, the policies' verdicts, why it denied).
pub const GATE_FIELDS: [&str; 4] = ["phase", "role", "verdicts", "message"];

/// Checks the `status` a Plan is created with (the server drops none of it for Plans):
/// none, or its gate's decision, `Pending`, `Ready` or `Denied` with only
/// [`GATE_FIELDS`] — what an operator could write with one status write right after the
/// create. A runner never creates a Plan; nobody creates one further along (claimed,
/// with a diff, approved or finished).
pub fn check_create_status(writer: Writer, new: &Value) -> Result<(), Refusal> {
    let status = status_map(new);
    if status.is_empty() {
        return Ok(());
    }
    let typed = typed_status(&status)?;
    if writer == Writer::Runner {
        return Err(Refusal::Forbidden(
            "a runner may not create a Plan with a status".into(),
        ));
    }
    let mut fields: Vec<&str> = status
        .iter()
        .filter(|(k, v)| !GATE_FIELDS.contains(&k.as_str()) && !same_field(None, Some(v)))
        .map(|(k, _)| k.as_str())
        .collect();
    fields.sort_unstable();
    if let Some(field) = fields.first() {
        return Err(Refusal::Forbidden(format!(
            "a Plan may not be created with status.{field}: it is created with its gate's decision only ({}); the rest is written by its runner or through plans/NAME/approval",
            GATE_FIELDS.join(", ")
        )));
    }
    let to = typed.phase.unwrap_or(PlanPhase::Pending);
    allowed(writer, None, to).map_err(|why| {
        Refusal::Forbidden(format!("{why}: a Plan is created Pending, Ready or Denied"))
    })
}

fn hash_of(diff: Option<&PlanDiff>) -> String {
    diff.map_or_else(|| "no diff".to_owned(), |d| d.hash.clone())
}

/// Why the Plan needs a person's approval before it is applied, if it does (the
/// message of the 409): the install's approval mode, or a policy verdict (the gate's
/// or on the diff) asking.
pub fn approval_needed(install: InstallPolicy, status: &PlanStatus) -> Option<String> {
    if install.prompts {
        return Some("approval required: install approval mode prompt".into());
    }
    status
        .verdicts
        .iter()
        .chain(status.diff.iter().flat_map(|d| &d.verdicts))
        .find(|v| v.approval_required)
        .map(|v| format!("approval required by policy {}", v.policy))
}

/// The Plan after `by` decided `request` at `at`: `status.approval` and the phase
/// (`Approved`, or `Denied` with `denied by USER: REASON` and `finishedAt`). Refused
/// unless the Plan awaits approval of exactly the diff decided on.
pub fn decide(
    plan: &Value,
    request: &ApprovalRequest,
    by: &str,
    at: Time,
) -> Result<Value, Refusal> {
    let reason = request
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if request.decision == ApprovalDecision::Deny && reason.is_none() {
        return Err(Refusal::Invalid(FieldError::required(
            "reason",
            "a denial needs a reason",
        )));
    }
    let status = typed_status(&status_map(plan))?;
    let phase = status.phase.unwrap_or(PlanPhase::Pending);
    if phase != PlanPhase::AwaitingApproval {
        return Err(Refusal::Conflict(format!(
            "the Plan is {phase:?}, not AwaitingApproval: there is nothing to decide"
        )));
    }
    let Some(diff) = status.diff.as_ref() else {
        return Err(Refusal::Conflict(
            "the Plan has no diff to decide on".into(),
        ));
    };
    if request.diff_hash != diff.hash {
        return Err(Refusal::Conflict(format!(
            "the diff changed: approve {} after reviewing it",
            diff.hash
        )));
    }
    let approval = Approval {
        decision: request.decision,
        by: by.to_owned(),
        at: at.clone(),
        content_hash: plan
            .pointer("/spec/contentHash")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        diff_hash: Some(diff.hash.clone()),
        reason: reason.map(str::to_owned),
    };
    let mut decided = plan.clone();
    let object = decided
        .as_object_mut()
        .ok_or_else(|| Refusal::Invalid(FieldError::invalid("", "", "not an object")))?;
    let status = object
        .entry("status")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| Refusal::Invalid(FieldError::invalid("status", "", "not an object")))?;
    status.insert(
        APPROVAL_FIELD.into(),
        serde_json::to_value(&approval).expect("an Approval serialises"),
    );
    match request.decision {
        ApprovalDecision::Approve => {
            status.insert("phase".into(), json!(PlanPhase::Approved));
        }
        ApprovalDecision::Deny => {
            status.insert("phase".into(), json!(PlanPhase::Denied));
            status.insert(
                "message".into(),
                json!(format!("denied by {by}: {}", reason.unwrap_or_default())),
            );
            status.insert("finishedAt".into(), json!(at));
        }
    }
    Ok(decided)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
