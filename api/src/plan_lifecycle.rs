//! The Plan lifecycle: which phase may follow which, and who may make each move; the
//! real diff a runner posts; a person's decision on it.
//!
//! ```text
//! Pending ─gate─▶ Denied | Ready ─runner─▶ Claimed ─▶ Planning ─▶ Planned
//!   Planned ─(approval needed)─▶ AwaitingApproval ─person─▶ Approved | Denied
//!   Planned ─(no approval needed)─▶ Applying      Approved ─runner─▶ Applying
//!   Applying ─▶ Succeeded | Failed      (a no-op diff: Planned ─▶ Succeeded, NoChanges)
//! ```
//!
//! The API server enforces [`allowed`] on every write of a Plan's status, for every
//! writer; approvals are written only by the server itself, from the
//! `plans/NAME/approval` subresource ([`ApprovalRequest`]). The runner may record a
//! phase it passed through together with the next one (a claim that is also the
//! result, `Ready → Succeeded`, is still one fenced write, and the approval rules apply
//! as to the phases it skipped): it writes the diff with
//! `AwaitingApproval` (or with the result when no approval is needed), so the
//! no-approval path costs no more writes than a claim and a result. `docs/ARCHITECTURE.md`
//! tells the whole story.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::plan::{PlanPhase, Verdict};

/// Most resources listed in a [`PlanDiff`]; the counts still cover all of them.
pub const MAX_DIFF_RESOURCES: usize = 200;
/// Most changed fields listed per resource.
pub const MAX_DIFF_FIELDS: usize = 50;
/// Longest `before`/`after` value shown, in characters (longer ones are cut, `…`).
pub const MAX_DIFF_VALUE_CHARS: usize = 120;

/// The real change a runner computed against live state: a bounded, secret-free
/// summary for people and policies, and the hash of exactly what it will apply.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanDiff {
    /// `sha256:<hex>` of the saved artefact the runner applies (terraform: the saved
    /// plan's resource changes; Kubernetes: the dry-run-checked object set). An
    /// approval binds to it.
    pub hash: String,
    /// One line, e.g. `1 to add, 0 to change, 0 to destroy`.
    pub summary: String,
    /// `+add ~change -destroy`, for `kubectl get plans`' CHANGES column.
    pub short: String,
    /// Resources created.
    pub add: u32,
    /// Resources changed (in place or replaced).
    pub change: u32,
    /// Resources deleted (Kubernetes: pruned).
    pub destroy: u32,
    /// The changed resources, at most [`MAX_DIFF_RESOURCES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceChange>,
    /// Whether `resources` (or a resource's `fields`) was cut to its bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The artefact the diff was rendered from, pinned by digest, when it came from a
    /// registry (a `helm_chart` from an OCI registry: `install-registry/name@sha256:…`,
    /// where the runner pulled it from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The verdicts of the vendor's and the customer's local policies on this diff.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
}

impl PlanDiff {
    /// A diff with these counts, its summary lines filled in.
    pub fn new(hash: String, add: u32, change: u32, destroy: u32) -> Self {
        PlanDiff {
            hash,
            summary: format!("{add} to add, {change} to change, {destroy} to destroy"),
            short: format!("+{add} ~{change} -{destroy}"),
            add,
            change,
            destroy,
            ..PlanDiff::default()
        }
    }

    /// Whether applying would change anything.
    pub fn has_changes(&self) -> bool {
        self.add + self.change + self.destroy > 0
    }

    /// Whether a policy on this diff asks for a person's approval.
    pub fn approval_required(&self) -> bool {
        self.verdicts.iter().any(|v| v.approval_required)
    }
}

/// One resource a diff changes.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceChange {
    /// Terraform: the resource address (`terraform_data.network`); Kubernetes:
    /// `Kind/namespace/name` (`Deployment/shop/web`).
    pub address: String,
    /// What happens to it.
    pub action: ChangeAction,
    /// The changed attribute paths with their values before and after, at most
    /// [`MAX_DIFF_FIELDS`]; a sensitive or secret value is shown as `(sensitive)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
    /// Why the change is shown as it is, when that is not the usual dry-run
    /// (Kubernetes: "its CRD widgets.example.com is created by this Plan; not dry-run").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What a diff does to a resource.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    /// Created.
    Create,
    /// Changed in place.
    Update,
    /// Destroyed and created again.
    Replace,
    /// Destroyed (Kubernetes: pruned).
    Delete,
}

impl ChangeAction {
    /// The sign `outpost diff` prints, as `terraform plan` does.
    pub fn sign(self) -> &'static str {
        match self {
            Self::Create => "+",
            Self::Update => "~",
            Self::Replace => "-/+",
            Self::Delete => "-",
        }
    }
}

/// One changed attribute of a resource.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// The attribute path, dotted (`spec.replicas`, `input`, `tags.env`).
    pub path: String,
    /// The value before, as JSON text, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The value after, as JSON text, when there is one (`(known after apply)` when
    /// terraform does not know it yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// A person's decision.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    /// Apply exactly the diff decided on.
    #[default]
    Approve,
    /// Do not apply; the Plan ends `Denied`.
    Deny,
}

/// The body of `PATCH plans/NAME/approval`: a decision on the diff the person saw.
/// Who decided and when are taken from the request's authenticated user and the
/// server's clock; a body that claims them is not believed.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// Approve or deny.
    pub decision: ApprovalDecision,
    /// The diff decided on: must equal the Plan's `status.diff.hash` (409 otherwise).
    pub diff_hash: String,
    /// Why (required to deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The group whose members may approve and deny Plans (admins may too).
pub const APPROVERS: &str = "outpost:approvers";

/// Who writes a Plan's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// The runner token of the Plan's own install.
    Runner,
    /// Anyone else allowed to write Plans (vendor admins; the controllers, whose gate
    /// decides a Pending Plan).
    Operator,
}

/// Whether `writer` may move a Plan from `from` (`None`: no phase yet, i.e. Pending)
/// to `to` through `plans/NAME/status`; `Err` says why not. Staying in a phase is
/// always allowed (a status write that only adds a log or a condition). Approval and
/// denial by a person are not status moves: only the `approval` subresource makes them.
pub fn allowed(writer: Writer, from: Option<PlanPhase>, to: PlanPhase) -> Result<(), String> {
    use PlanPhase::*;
    let from = from.unwrap_or(Pending);
    if from == to {
        return Ok(());
    }
    let runner_move = matches!(
        (from, to),
        (
            Ready | Claimed,
            Claimed | Planning | Planned | AwaitingApproval | Applying | Succeeded | Failed
        ) | (
            Planning,
            Planned | AwaitingApproval | Applying | Succeeded | Failed
        ) | (Planned, AwaitingApproval | Applying | Succeeded | Failed)
            | (Approved, Applying | AwaitingApproval | Succeeded | Failed)
            | (Applying, AwaitingApproval | Succeeded | Failed)
    );
    let gate_move = matches!((from, to), (Pending, Ready | Denied));
    let refused = |who: &str| {
        Err(format!(
            "{who} move a Plan from {from:?} to {to:?}{}",
            match to {
                Approved => ": approvals are made only through plans/NAME/approval",
                Denied if from == AwaitingApproval =>
                    ": a person denies only through plans/NAME/approval",
                _ => "",
            }
        ))
    };
    match writer {
        Writer::Runner if runner_move => Ok(()),
        Writer::Runner => refused("a runner may not"),
        Writer::Operator if gate_move || runner_move => Ok(()),
        Writer::Operator => refused("nobody may"),
    }
}

/// The status fields a runner writes (besides `phase`): the diff, its log, outputs and
/// result, timestamps. Everything else in a Plan's status (the gate's `role` and
/// `verdicts`, a person's `approval`) a runner token may not change.
pub const RUNNER_FIELDS: &[&str] = &[
    "phase",
    "diff",
    "log",
    "outputs",
    "message",
    "reason",
    "claimedBy",
    "startedAt",
    "finishedAt",
    "conditions",
];

/// The status field nobody writes through `status`: the server writes it from
/// `plans/NAME/approval` (and clears it when the runner asks again with a new diff).
pub const APPROVAL_FIELD: &str = "approval";

/// Whether `phase` is one in which the runner holds the Plan (it may write its fields).
pub fn runner_holds(phase: PlanPhase) -> bool {
    use PlanPhase::*;
    matches!(phase, Claimed | Planning | Planned | Applying)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlanPhase::*;

    #[test]
    fn runners_move_only_their_part() {
        for (from, to) in [
            (Ready, Claimed),
            (Claimed, Planning),
            (Planning, AwaitingApproval),
            (Planned, Applying),
            (Planning, Succeeded),
            (Approved, Applying),
            (Applying, Succeeded),
            (Applying, AwaitingApproval),
            (Ready, Succeeded),
            (Approved, Succeeded),
        ] {
            assert_eq!(
                allowed(Writer::Runner, Some(from), to),
                Ok(()),
                "{from:?}→{to:?}"
            );
        }
        for (from, to) in [
            (Pending, Ready),
            (Pending, Claimed),
            (AwaitingApproval, Approved),
            (AwaitingApproval, Applying),
            (AwaitingApproval, Denied),
            (Succeeded, Claimed),
            (Denied, Ready),
        ] {
            assert!(
                allowed(Writer::Runner, Some(from), to).is_err(),
                "{from:?}→{to:?}"
            );
        }
    }

    #[test]
    fn nobody_approves_through_status() {
        for writer in [Writer::Runner, Writer::Operator] {
            let err = allowed(writer, Some(AwaitingApproval), Approved).unwrap_err();
            assert!(err.contains("plans/NAME/approval"), "{err}");
            assert!(allowed(writer, Some(AwaitingApproval), Denied).is_err());
            assert!(allowed(writer, Some(Succeeded), Pending).is_err());
        }
        assert_eq!(allowed(Writer::Operator, None, Ready), Ok(()));
        assert_eq!(allowed(Writer::Operator, Some(Pending), Denied), Ok(()));
        assert!(allowed(Writer::Runner, None, Ready).is_err());
    }

    #[test]
    fn diffs_count_and_summarise() {
        let diff = PlanDiff::new("sha256:x".into(), 1, 0, 2);
        assert_eq!(diff.summary, "1 to add, 0 to change, 2 to destroy");
        assert_eq!(diff.short, "+1 ~0 -2");
        assert!(diff.has_changes());
        assert!(!PlanDiff::new("sha256:x".into(), 0, 0, 0).has_changes());
    }
}
