//! `approve` binds to the content hash, `logs` follow the Plan, `deny` records who and why.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_binds_to_the_content_hash_and_logs_follow_the_plan() {
    let fleet = Fleet::start().await;
    let plans = fleet.plans().await;
    let waiting = fleet
        .wait_plan_in("acme", PlanPhase::AwaitingApproval)
        .await;
    // Follow the Plan's log from before it is approved until it finishes.
    let mut follow = Command::new(outpost_binary());
    follow
        .args(["logs", &waiting, "-f"])
        .env("KUBECONFIG", &fleet.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut follower = follow.spawn().unwrap();
    // Approve only once the follower has seen the Plan waiting.
    let (seen, reader) = stderr_lines(&mut follower);
    let awaiting = format!("plan {waiting}: AwaitingApproval");
    loop {
        let line = seen
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the follower reports the Plan awaiting approval");
        if line.contains(&awaiting) {
            break;
        }
    }
    // OUTPOST_USER is alice, but the server records who the token authenticates.
    let approved = fleet.ok(&["approve", &waiting]);
    assert!(
        approved.stderr.contains("approved by admin"),
        "{approved:?}"
    );
    let plan = plans.get(&waiting).await.unwrap();
    let approval = plan.status.as_ref().unwrap().approval.clone().unwrap();
    assert_eq!(approval.by, "admin");
    assert_eq!(Some(approval.content_hash), plan.spec.content_hash);
    let followed = tokio::task::spawn_blocking(move || follower.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&followed.stdout);
    let stderr = reader.join().unwrap();
    assert!(followed.status.success(), "{stderr}");
    assert_eq!(
        stdout,
        format!("applying {waiting}\napplied {waiting}\n"),
        "each line once"
    );
    for phase in ["AwaitingApproval", "Succeeded"] {
        assert!(
            stderr.contains(&format!("plan {waiting}: {phase}")),
            "{stderr}"
        );
    }
    let json = fleet.fails(&["logs", &waiting, "-o", "json"]);
    assert!(
        json.contains(&format!("kubectl get plan {waiting} -n default -o json")),
        "{json}"
    );
    // Without -f: the log as it is.
    let logs = fleet.ok(&["logs", &waiting]);
    assert_eq!(
        logs.stdout,
        format!("applying {waiting}\napplied {waiting}\n")
    );

    // A Plan that does not wait cannot be approved or denied; the error says where it is.
    let again = fleet.fails(&["approve", &waiting]);
    assert!(
        again.contains(&format!(
            "plan default/{waiting} is Succeeded, not AwaitingApproval"
        )) && again.contains(&format!("outpost logs {waiting}")),
        "{again}"
    );
    // A viewer may look but not decide.
    // A policy that warns on manual runs: the approver sees it.
    let policy = fleet.cp.scratch().join("notice.yaml");
    std::fs::write(
        &policy,
        "apiVersion: outpost.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: trigger-notice\nspec:\n  app: shopfront\n  enforcement: warn\n  inputs: [plan]\n  module: |\n    package outpost.trigger_notice\n\n    warn contains msg if {\n      input.operation == \"trigger\"\n      msg := sprintf(\"%s runs by hand\", [input.entity.name])\n    }\n",
    )
    .unwrap();
    fleet
        .cp
        .kubectl()
        .ok(&["apply", "-f", policy.to_str().unwrap()]);
    // acme's next steps wait for its maintenance window; a manual trigger does not.
    // `--wait` shows the Plan waiting for approval (and how to give it), then its end.
    let mut trigger = Command::new(outpost_binary());
    trigger
        .args(["trigger", "migrate", "--install", "acme", "--wait"])
        .env("KUBECONFIG", &fleet.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut trigger = trigger.spawn().unwrap();
    // Its standard error, line by line as it comes: the approval below waits until the
    // trigger has shown the Plan waiting (it polls every 300 ms; approved sooner, it
    // would never see that phase).
    let (seen, reader) = stderr_lines(&mut trigger);
    let manual = eventually(30, "the manual trigger to be gated", async || {
        let listed = plans
            .list(&ListParams::default().labels("outpost.dev/install=acme"))
            .await
            .unwrap();
        let found = listed.items.into_iter().find(|p| {
            p.spec.entity.name == "migrate" && phase(p) == Some(PlanPhase::AwaitingApproval)
        });
        found.map(|plan| plan.metadata.name.unwrap())
    })
    .await;
    let viewer = Command::new(outpost_binary())
        .args(["deny", &manual, "--reason", "not now"])
        .env("KUBECONFIG", fleet.cp.kubeconfig(&fleet.cp.viewer_token))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&viewer.stderr);
    assert!(
        !viewer.status.success()
            && stderr.contains("is forbidden")
            && stderr.contains("outpost:approvers or outpost:admins"),
        "{stderr}"
    );
    let plan = plans.get(&manual).await.unwrap();
    assert_eq!(
        phase(&plan),
        Some(PlanPhase::AwaitingApproval),
        "the viewer changed nothing"
    );
    let shown = tokio::task::spawn_blocking({
        let manual = manual.clone();
        move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while let Ok(line) =
                seen.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            {
                if line.starts_with(&format!("plan {manual}: AwaitingApproval")) {
                    return true;
                }
            }
            false
        }
    })
    .await
    .unwrap();
    assert!(shown, "the trigger showed {manual} awaiting approval");
    let approved = fleet.ok(&["approve", &manual]);
    assert!(
        approved.stderr.contains(&format!(
            "plan {manual}: trigger of action migrate on install acme under role "
        )) && approved
            .stderr
            .contains("policy trigger-notice warns: migrate runs by hand"),
        "{approved:?}"
    );
    let waited = tokio::task::spawn_blocking(move || trigger.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = reader.join().unwrap();
    assert!(waited.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout).trim(),
        format!("plan/{manual}")
    );
    let awaiting = stderr
        .lines()
        .position(|l| {
            l.starts_with(&format!("plan {manual}: AwaitingApproval"))
                && l.contains(&format!("approve the diff with `outpost approve {manual}`"))
        })
        .unwrap_or_else(|| panic!("{stderr}"));
    let succeeded = stderr
        .lines()
        .position(|l| l.starts_with(&format!("plan {manual}: Succeeded")))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(awaiting < succeeded, "{stderr}");
    let missing = fleet.fails(&["approve", "nope"]);
    assert!(
        missing.contains("plan default/nope not found") && missing.contains("kubectl get plans"),
        "{missing}"
    );
    assert!(
        fleet
            .fails(&["logs", "nope"])
            .contains("plan default/nope not found")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_records_who_and_why() {
    let fleet = Fleet::start().await;
    let plans = fleet.plans().await;
    let waiting = fleet
        .wait_plan_in("acme", PlanPhase::AwaitingApproval)
        .await;
    let denied = fleet.ok(&[
        "deny",
        &waiting,
        "--reason",
        "no change ticket",
        "-o",
        "json",
    ]);
    let shown: Plan = serde_json::from_str(&denied.stdout).unwrap();
    assert_eq!(phase(&shown), Some(PlanPhase::Denied));
    let plan = plans.get(&waiting).await.unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Denied));
    assert_eq!(
        plan.status.unwrap().message.as_deref(),
        Some("denied by admin: no change ticket"),
        "the server records who the token authenticates, not OUTPOST_USER"
    );
    // The install shows the denial as a failure.
    fleet.wait_install("acme", "Degraded").await;
    let again = fleet.fails(&["deny", &waiting, "--reason", "twice"]);
    assert!(again.contains("is Denied, not AwaitingApproval"), "{again}");
}

/// A child's standard error line by line as it comes (the receiver), and all of it once
/// the child closes it (the thread's result).
fn stderr_lines(
    child: &mut std::process::Child,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<String>,
) {
    let (lines, seen) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("a piped standard error");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = lines.send(line);
        }
        all
    });
    (seen, reader)
}
