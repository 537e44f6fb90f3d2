//! The real runner (`outpost-runner`, with its real `job` executor under bubblewrap and a
//! minted runner token) killed with SIGKILL at random points across 100 Plans: every
//! Plan ends Succeeded or Failed with a reason, no step ever runs twice, and the audit
//! log shows each apply once and verifies.
//!
//! Each Plan's one step appends its Plan's name to `applies.log` in the job's work dir
//! (`outpost_testing::job_plans`), read here to count how often each step really ran.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use kube_client::api::{Api, ListParams};
use outpost_api::{AuditEvent, AuditEventType, Plan, PlanPhase};
use outpost_runner::journal::{JOURNAL_FILE, Record, Stage};
use outpost_testing::job_plans::{
    approved_job_plan, audit_verify, install_with_token, local_events, runner_command, step_runs,
};
use outpost_testing::phase;
use outpost_testing::{Backend, ControlPlane, Process, eventually, wait_for};
use serde_json::json;

const PLANS: usize = 100;

/// Starts `outpost-runner` for install `acme` with the runner token.
fn start_runner(cp: &ControlPlane, token: &str, state: &Path) -> Process {
    let child = runner_command(&cp.url, &cp.tls.ca, token, state)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost-runner starts");
    Process::new(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_real_runner_across_100_job_plans_applies_each_at_most_once() {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let token = install_with_token(&cp).await;
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let names: Vec<String> = (0..PLANS).map(|i| format!("job-{i:03}")).collect();
    for name in &names {
        approved_job_plan(&plans, name).await;
    }

    // Kill the runner at random points until every Plan is final, or time is up (not a
    // failure: the undisturbed run below finishes what is left).
    let mut kills = 0;
    wait_for(Duration::from_secs(240), async || {
        let items = plans.list(&ListParams::default()).await.unwrap().items;
        let finished = items
            .iter()
            .filter(|p| phase(p).is_some_and(PlanPhase::is_terminal))
            .count();
        if finished == PLANS {
            return Some(());
        }
        let mut runner = start_runner(&cp, &token, &state);
        tokio::time::sleep(Duration::from_millis(150 + rand::random::<u64>() % 600)).await;
        runner.kill();
        kills += 1;
        None
    })
    .await;
    // A last, undisturbed run finishes and reports whatever is left.
    let mut runner = start_runner(&cp, &token, &state);
    let done = wait_for(Duration::from_secs(120), async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        items
            .iter()
            .all(|p| phase(p).is_some_and(PlanPhase::is_terminal))
            .then_some(items)
    })
    .await;
    let Some(done) = done else {
        // What is stuck, and what the runner's journal says of it.
        let items = plans.list(&ListParams::default()).await.unwrap().items;
        let journal: Vec<Record> = std::fs::read_to_string(state.join(JOURNAL_FILE))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let stuck: Vec<String> = items
            .iter()
            .filter(|p| !phase(p).is_some_and(PlanPhase::is_terminal))
            .map(|p| {
                let name = p.metadata.name.as_deref().unwrap_or_default();
                let stages: Vec<&Stage> = journal
                    .iter()
                    .filter(|r| r.plan == name)
                    .map(|r| &r.stage)
                    .collect();
                format!(
                    "{name}: status {}; journal {stages:?}",
                    serde_json::to_string(&p.status).unwrap()
                )
            })
            .collect();
        panic!(
            "after {kills} kills, {} plans are not final:\n{}",
            stuck.len(),
            stuck.join("\n")
        );
    };
    assert_eq!(done.len(), PLANS);

    // Everything the runner recorded is shipped; then it is stopped so the log holds still.
    // An idle runner may still record an event between the check and the kill; then it
    // is started again to ship it.
    for attempt in 0.. {
        eventually(60, "every audit event to be shipped", async || {
            let shipped = std::fs::read_to_string(state.join("audit.shipped")).ok()?;
            (shipped.trim() == local_events(&state).to_string()).then_some(())
        })
        .await;
        runner.kill();
        let shipped = std::fs::read_to_string(state.join("audit.shipped")).unwrap();
        if shipped.trim() == local_events(&state).to_string() {
            break;
        }
        assert!(attempt < 5, "the runner keeps recording events while idle");
        runner = start_runner(&cp, &token, &state);
    }
    let (code, out) = audit_verify(&cp);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            format!("{} events verified", local_events(&state)).as_str()
        ),
        "the shipped audit log verifies"
    );

    // Successful applies per Plan, as the shipped audit log shows them.
    let events: Api<AuditEvent> = Api::namespaced(client.clone(), "default");
    let mut audited_applies = BTreeMap::<String, usize>::new();
    for event in events.list(&ListParams::default()).await.unwrap().items {
        let spec = event.spec;
        let failed = spec
            .details
            .as_ref()
            .is_some_and(|d| d.get("failed").is_some());
        if spec.type_ == AuditEventType::Apply && !failed {
            *audited_applies.entry(spec.plan.unwrap()).or_default() += 1;
        }
    }
    let runs = step_runs(&outpost_e2e::work_dirs(&state));
    let (mut succeeded, mut failed) = (0, 0);
    let mut reasons = BTreeMap::<String, usize>::new();
    for plan in &done {
        let name = plan.metadata.name.clone().unwrap();
        let status = plan.status.clone().unwrap();
        let ran = runs.get(&name).copied().unwrap_or(0);
        let audited = audited_applies.get(&name).copied().unwrap_or(0);
        assert!(ran <= 1, "{name}: its step ran {ran} times");
        assert!(
            audited <= ran,
            "{name}: the audit log shows {audited} applies but the step ran {ran} times"
        );
        match status.phase {
            Some(PlanPhase::Succeeded) => {
                succeeded += 1;
                assert_eq!((ran, audited), (1, 1), "{name}: ran, audited applies");
                // The step's result survives the API server's schema (an array of objects).
                let steps = &status.outputs["steps"];
                assert_eq!(steps[0]["name"], json!("counter"), "{name}: {steps}");
                assert_eq!(steps[0]["exitCode"], json!(0), "{name}: {steps}");
            }
            Some(PlanPhase::Failed) => {
                failed += 1;
                let message = status.message.unwrap_or_default();
                assert!(!message.is_empty(), "{name} failed without a reason");
                *reasons.entry(message).or_default() += 1;
            }
            other => panic!("{name} ended {other:?}"),
        }
    }
    println!("{kills} kills: {succeeded} succeeded, {failed} failed; reasons: {reasons:?}");
    assert!(kills >= 5, "the loop killed the runner only {kills} times");
    assert!(succeeded > 0, "no plan succeeded");
    let unexpected: Vec<&String> = reasons
        .keys()
        .filter(|m| m.as_str() != outpost_runner::worker::execute::INTERRUPTED)
        .collect();
    assert!(
        unexpected.is_empty(),
        "plans failed for other reasons: {unexpected:?}"
    );
}
