//! Approvals: who approved, and a fleet approval binding exactly one diff.

use super::*;

on_both_backends!(
    approvals_record_the_authenticated_user,
    fleet_approval_approves_exactly_one_diff
);

async fn approvals_record_the_authenticated_user(backend: Backend) {
    let w = World::start(backend).await;
    let d = diff('a', 1);
    w.drive("claims", PROMPT, "AwaitingApproval", &d).await;
    let started = jiff::Timestamp::now();
    // The body claims someone else, long ago; the server believes neither.
    let body = json!({"decision": "approve", "diffHash": d["hash"], "reason": "reviewed",
                      "by": "mallory", "at": "2000-01-01T00:00:00Z"});
    let reply = w
        .send(
            Approver,
            PROMPT,
            "PATCH",
            &format!("{API}/plans/claims/approval"),
            APPLY,
            body,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let plan = w.get("claims").await;
    let approval = &plan["status"]["approval"];
    assert_eq!(approval["by"], "approver", "{approval}");
    assert_eq!(approval["decision"], "approve");
    assert_eq!(approval["diffHash"], d["hash"]);
    assert_eq!(approval["contentHash"], plan["spec"]["contentHash"]);
    assert_eq!(approval["reason"], "reviewed");
    let at: jiff::Timestamp = approval["at"].as_str().unwrap().parse().unwrap();
    assert!(
        at.as_second() >= started.as_second() - 1
            && at.as_second() <= jiff::Timestamp::now().as_second() + 1,
        "at {at} is the server's clock"
    );
    // The runner applies exactly the approved diff.
    let reply = w
        .status(OwnRunner, "claims", PROMPT, json!({"phase": "Applying"}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn fleet_approval_approves_exactly_one_diff(backend: Backend) {
    let w = World::start(backend).await;
    let reviewed = diff('a', 1);
    let other = diff('b', 3);
    let labels = json!({"outpost.dev/app": "shopfront"});
    let mut names = Vec::new();
    for i in 0..104 {
        let (name, d) = if i < 100 {
            (format!("fleet-{i}"), &reviewed)
        } else {
            (format!("odd-{i}"), &other)
        };
        w.create(&name, PROMPT, labels.clone()).await;
        for (actor, status) in [
            (Admin, json!({"phase": "Ready"})),
            (OwnRunner, json!({"phase": "Claimed"})),
            (OwnRunner, json!({"phase": "AwaitingApproval", "diff": d})),
        ] {
            let reply = w.status(actor, &name, PROMPT, status).await;
            assert_eq!(reply.status, 200, "{name}: {}", reply.text);
        }
        names.push(name);
    }
    // One more with the reviewed diff but not the label: not selected.
    w.drive("unlabelled", PROMPT, "AwaitingApproval", &reviewed)
        .await;

    let out = std::process::Command::new(outpost_testing::outpost_binary())
        .args([
            "approve",
            "--selector",
            "outpost.dev/app=shopfront",
            "--diff-hash",
            reviewed["hash"].as_str().unwrap(),
            "--kubeconfig",
        ])
        .arg(w.cp.kubeconfig(&w.cp.approver_token))
        .output()
        .expect("outpost approve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("approved 100 plan(s)")
            && stderr.contains("4 awaiting approval had another diff"),
        "{stderr}"
    );
    for name in &names {
        let plan = w.get(name).await;
        let expected = if name.starts_with("fleet-") {
            "Approved"
        } else {
            "AwaitingApproval"
        };
        assert_eq!(plan["status"]["phase"], expected, "{name}");
        if expected == "Approved" {
            assert_eq!(
                plan["status"]["approval"]["by"], "approver",
                "{name}: each approval is recorded per Plan"
            );
            assert_eq!(plan["status"]["approval"]["diffHash"], reviewed["hash"]);
        }
    }
    assert_eq!(
        w.get("unlabelled").await["status"]["phase"],
        "AwaitingApproval"
    );
}
