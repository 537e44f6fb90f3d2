use super::*;
use serde_json::json;

const H1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const H2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

const PROMPT: InstallPolicy = InstallPolicy { prompts: true };
const APPROVE_ALL: InstallPolicy = InstallPolicy { prompts: false };

fn diff(hash: &str, add: u32) -> Value {
    serde_json::to_value(PlanDiff::new(hash.into(), add, 0, 0)).unwrap()
}

fn plan(status: Value) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"install": "b", "contentHash": H2},
        "status": status,
    })
}

fn approval(decision: &str, diff_hash: &str) -> Value {
    json!({"decision": decision, "by": "alice", "at": "2025-01-01T00:00:00Z",
           "contentHash": H2, "diffHash": diff_hash})
}

fn write(writer: Writer, install: InstallPolicy, old: Value, new: Value) -> Result<Value, Refusal> {
    let mut new = plan(new);
    check_status_write(writer, install, &plan(old), &mut new).map(|()| new["status"].clone())
}

#[test]
fn runners_claim_plan_and_apply_when_no_approval_is_needed() {
    let claimed = json!({"phase": "Claimed", "claimedBy": "runner"});
    assert!(
        write(
            Writer::Runner,
            PROMPT,
            json!({"phase": "Ready"}),
            claimed.clone()
        )
        .is_ok()
    );
    let done = json!({"phase": "Succeeded", "claimedBy": "runner", "diff": diff(H1, 1)});
    assert!(write(Writer::Runner, APPROVE_ALL, claimed.clone(), done.clone()).is_ok());
    // A prompt install: the same result without an approval is refused.
    let refused = write(Writer::Runner, PROMPT, claimed.clone(), done).unwrap_err();
    assert_eq!(
        refused,
        Refusal::Conflict(
            "approval required: install approval mode prompt: post the diff with AwaitingApproval"
                .into()
        )
    );
    // ... but a diff without changes ends Succeeded (NoChanges) on any install.
    let no_op = json!({"phase": "Succeeded", "reason": "NoChanges", "diff": diff(H1, 0)});
    assert!(write(Writer::Runner, PROMPT, claimed.clone(), no_op).is_ok());
    let applying = json!({"phase": "Applying", "diff": diff(H1, 1)});
    assert!(matches!(
        write(Writer::Runner, PROMPT, claimed, applying),
        Err(Refusal::Conflict(_))
    ));
}

#[test]
fn policies_asking_for_approval_hold_the_plan() {
    let verdict = json!([{"policy": "no-deletes", "enforcement": "approve", "denied": false,
                          "approvalRequired": true}]);
    let old = json!({"phase": "Planning", "verdicts": verdict});
    let new = json!({"phase": "Succeeded", "verdicts": verdict, "diff": diff(H1, 1)});
    assert_eq!(
        write(Writer::Runner, APPROVE_ALL, old, new).unwrap_err(),
        Refusal::Conflict(
            "approval required by policy no-deletes: post the diff with AwaitingApproval".into()
        )
    );
    // A customer-local policy's verdict on the diff counts too.
    let mut on_diff = diff(H1, 1);
    on_diff["verdicts"] = json!([{"policy": "local-p", "enforcement": "approve",
                                  "denied": false, "approvalRequired": true, "local": true}]);
    let err = write(
        Writer::Runner,
        APPROVE_ALL,
        json!({"phase": "Planned"}),
        json!({"phase": "Applying", "diff": on_diff}),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Conflict(m) if m.contains("policy local-p")),
        "{err:?}"
    );
}

#[test]
fn runners_write_only_their_fields() {
    let old = json!({"phase": "Claimed", "role": {"name": "deployer", "level": "default"}});
    for new in [
        json!({"phase": "Claimed", "role": {"name": "admin", "level": "override"}}),
        json!({"phase": "Claimed", "role": {"name": "deployer", "level": "default"},
               "verdicts": [{"policy": "x", "enforcement": "warn", "denied": false}]}),
    ] {
        let err = write(Writer::Runner, APPROVE_ALL, old.clone(), new).unwrap_err();
        assert!(
            matches!(&err, Refusal::Forbidden(m) if m.starts_with("a runner may not change status.")),
            "{err:?}"
        );
    }
    // The gate (an operator) writes role and verdicts.
    let gated = json!({"phase": "Ready", "role": {"name": "deployer", "level": "default"}});
    assert!(write(Writer::Operator, PROMPT, json!({}), gated).is_ok());
}

#[test]
fn nobody_writes_an_approval_through_status() {
    let old = json!({"phase": "AwaitingApproval", "diff": diff(H1, 1)});
    for writer in [Writer::Runner, Writer::Operator] {
        let approved =
            json!({"phase": "Approved", "diff": diff(H1, 1), "approval": approval("approve", H1)});
        let err = write(writer, APPROVE_ALL, old.clone(), approved).unwrap_err();
        assert!(
            matches!(&err, Refusal::Forbidden(m) if m.contains("plans/NAME/approval")),
            "{err:?}"
        );
        // Even without the phase: the field alone.
        let field_only = json!({"phase": "AwaitingApproval", "diff": diff(H1, 1), "approval": approval("approve", H1)});
        assert!(matches!(
            write(writer, APPROVE_ALL, old.clone(), field_only),
            Err(Refusal::Forbidden(_))
        ));
        // The move alone is refused by the table, as nobody's to make.
        let err = write(
            writer,
            APPROVE_ALL,
            old.clone(),
            json!({"phase": "Approved", "diff": diff(H1, 1)}),
        )
        .unwrap_err();
        assert!(
            matches!(&err, Refusal::Forbidden(m) if m.contains("from AwaitingApproval to Approved: approvals are made only through plans/NAME/approval")),
            "{err:?}"
        );
    }
}

#[test]
fn moves_outside_the_table_are_refused() {
    // A runner can reach Succeeded, just not from Pending (the gate has not passed it): 409.
    let err = write(
        Writer::Runner,
        APPROVE_ALL,
        json!({"phase": "Pending"}),
        json!({"phase": "Succeeded"}),
    )
    .unwrap_err();
    assert_eq!(
        err,
        Refusal::Conflict("a runner may not move a Plan from Pending to Succeeded".into())
    );
    // A claim that is also the result skips no approval: on a prompt install it is 409.
    let err = write(
        Writer::Runner,
        PROMPT,
        json!({"phase": "Ready"}),
        json!({"phase": "Succeeded"}),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Conflict(m) if m.contains("approval required")),
        "{err:?}"
    );
    // A runner never makes the gate's move: 403.
    let err = write(
        Writer::Runner,
        APPROVE_ALL,
        json!({}),
        json!({"phase": "Ready"}),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::Forbidden(_)), "{err:?}");
    // Terminal phases stay terminal.
    let err = write(
        Writer::Operator,
        APPROVE_ALL,
        json!({"phase": "Succeeded"}),
        json!({"phase": "Ready"}),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::Conflict(_)), "{err:?}");
}

#[test]
fn asking_again_needs_a_diff_and_drops_the_old_approval() {
    let err = write(
        Writer::Runner,
        PROMPT,
        json!({"phase": "Planning"}),
        json!({"phase": "AwaitingApproval"}),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Invalid(e) if e.field == "status.diff"),
        "{err:?}"
    );
    // Approved, but live state moved: the runner asks again with the new diff.
    let old =
        json!({"phase": "Approved", "diff": diff(H1, 1), "approval": approval("approve", H1)});
    let kept = json!({"phase": "AwaitingApproval", "diff": diff(H2, 2), "approval": approval("approve", H1), "reason": "Replanned"});
    let status = write(Writer::Runner, PROMPT, old.clone(), kept).unwrap();
    assert_eq!(status.get("approval"), None, "{status}");
    assert_eq!(status["diff"]["hash"], H2);
    let left_out = json!({"phase": "AwaitingApproval", "diff": diff(H2, 2)});
    assert!(write(Writer::Runner, PROMPT, old, left_out).is_ok());
}

#[test]
fn only_the_approved_diff_is_applied() {
    let old =
        json!({"phase": "Approved", "diff": diff(H1, 1), "approval": approval("approve", H1)});
    let same =
        json!({"phase": "Applying", "diff": diff(H1, 1), "approval": approval("approve", H1)});
    assert!(write(Writer::Runner, PROMPT, old.clone(), same).is_ok());
    let swapped =
        json!({"phase": "Applying", "diff": diff(H2, 9), "approval": approval("approve", H1)});
    assert!(matches!(
        write(Writer::Runner, PROMPT, old.clone(), swapped),
        Err(Refusal::Conflict(_))
    ));
    // The diff is fixed while a person looks at it.
    let awaiting = json!({"phase": "AwaitingApproval", "diff": diff(H1, 1)});
    let err = write(
        Writer::Runner,
        PROMPT,
        awaiting.clone(),
        json!({"phase": "AwaitingApproval", "diff": diff(H2, 1)}),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Conflict(m) if m.contains("may not change in phase AwaitingApproval")),
        "{err:?}"
    );
    // An approval whose diff is not the Plan's (written before this rule) is not applied.
    let stale =
        json!({"phase": "Approved", "diff": diff(H2, 1), "approval": approval("approve", H1)});
    let err = write(
        Writer::Runner,
        PROMPT,
        stale.clone(),
        json!({"phase": "Applying", "diff": diff(H2, 1), "approval": approval("approve", H1)}),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Conflict(m) if m.contains("not for the diff")),
        "{err:?}"
    );
}

fn request(decision: ApprovalDecision, hash: &str, reason: Option<&str>) -> ApprovalRequest {
    ApprovalRequest {
        decision,
        diff_hash: hash.into(),
        reason: reason.map(str::to_owned),
    }
}

fn at() -> Time {
    Time("2025-06-01T12:00:00Z".parse().unwrap())
}

#[test]
fn approvals_record_who_what_and_when() {
    let awaiting = plan(json!({"phase": "AwaitingApproval", "diff": diff(H1, 1)}));
    let decided = decide(
        &awaiting,
        &request(ApprovalDecision::Approve, H1, None),
        "alice",
        at(),
    )
    .unwrap();
    assert_eq!(decided["status"]["phase"], "Approved");
    assert_eq!(
        decided["status"]["approval"],
        json!({"decision": "approve", "by": "alice", "at": "2025-06-01T12:00:00Z",
               "contentHash": H2, "diffHash": H1})
    );
    let denied = decide(
        &awaiting,
        &request(ApprovalDecision::Deny, H1, Some(" too big ")),
        "bob",
        at(),
    )
    .unwrap();
    assert_eq!(denied["status"]["phase"], "Denied");
    assert_eq!(denied["status"]["message"], "denied by bob: too big");
    assert_eq!(denied["status"]["finishedAt"], "2025-06-01T12:00:00Z");
    assert_eq!(denied["status"]["approval"]["reason"], "too big");
}

#[test]
fn decisions_bind_to_the_diff_seen_and_the_phase() {
    let awaiting = plan(json!({"phase": "AwaitingApproval", "diff": diff(H1, 1)}));
    assert_eq!(
        decide(
            &awaiting,
            &request(ApprovalDecision::Approve, H2, None),
            "a",
            at()
        )
        .unwrap_err(),
        Refusal::Conflict(format!("the diff changed: approve {H1} after reviewing it"))
    );
    let err = decide(
        &awaiting,
        &request(ApprovalDecision::Deny, H1, Some("  ")),
        "a",
        at(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Invalid(e) if e.field == "reason"),
        "{err:?}"
    );
    let ready = plan(json!({"phase": "Ready"}));
    assert_eq!(
        decide(
            &ready,
            &request(ApprovalDecision::Approve, H1, None),
            "a",
            at()
        )
        .unwrap_err(),
        Refusal::Conflict(
            "the Plan is Ready, not AwaitingApproval: there is nothing to decide".into()
        )
    );
    let approved = decide(
        &awaiting,
        &request(ApprovalDecision::Approve, H1, None),
        "a",
        at(),
    )
    .unwrap();
    assert!(matches!(
        decide(
            &approved,
            &request(ApprovalDecision::Approve, H1, None),
            "a",
            at()
        ),
        Err(Refusal::Conflict(_))
    ));
}

#[test]
fn a_plan_is_created_with_at_most_its_gates_decision() {
    let create = |writer, status: Value| check_create_status(writer, &plan(status));
    let role = json!({"name": "deploy", "level": "default"});
    let verdicts = json!([{"policy": "p", "enforcement": "warn", "denied": false}]);
    // No status, an empty one, or the gate's decision.
    for status in [
        Value::Null,
        json!({}),
        json!({"phase": "Pending"}),
        json!({"phase": "Ready", "role": role, "verdicts": verdicts}),
        json!({"phase": "Denied", "role": role, "message": "denied by policy: p: no"}),
        // Empty fields are no fields (a typed client may send them).
        json!({"phase": "Ready", "outputs": {}, "conditions": []}),
    ] {
        assert_eq!(create(Writer::Operator, status.clone()), Ok(()), "{status}");
    }
    // Nothing further along, whoever creates it.
    for (status, message) in [
        (
            json!({"phase": "Approved"}),
            "nobody may move a Plan from Pending to Approved: approvals are made only through plans/NAME/approval: a Plan is created Pending, Ready or Denied",
        ),
        (
            json!({"phase": "Succeeded"}),
            "nobody may move a Plan from Pending to Succeeded: a Plan is created Pending, Ready or Denied",
        ),
        (
            json!({"phase": "Ready", "approval": approval("approve", H1)}),
            "a Plan may not be created with status.approval: it is created with its gate's decision only (phase, role, verdicts, message); the rest is written by its runner or through plans/NAME/approval",
        ),
        (
            json!({"phase": "Ready", "diff": diff(H1, 1)}),
            "a Plan may not be created with status.diff: it is created with its gate's decision only (phase, role, verdicts, message); the rest is written by its runner or through plans/NAME/approval",
        ),
        (
            json!({"claimedBy": "runner"}),
            "a Plan may not be created with status.claimedBy: it is created with its gate's decision only (phase, role, verdicts, message); the rest is written by its runner or through plans/NAME/approval",
        ),
    ] {
        assert_eq!(
            create(Writer::Operator, status.clone()),
            Err(Refusal::Forbidden(message.into())),
            "{status}"
        );
    }
    // A runner never creates one with a status, not even the gate's decision.
    assert_eq!(
        create(Writer::Runner, json!({"phase": "Ready"})),
        Err(Refusal::Forbidden(
            "a runner may not create a Plan with a status".into()
        ))
    );
    // A status that is not a Plan's is 422.
    assert!(matches!(
        create(Writer::Operator, json!({"phase": "Sideways"})),
        Err(Refusal::Invalid(_))
    ));
}
