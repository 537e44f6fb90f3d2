//! The runner core against a real `outpost server`: claims, journal recovery after
//! kill -9, reporting after an outage, the signed audit log and `outpost audit verify`.
//!
//! The real executors (kubernetes, terraform, job) are tested in their own suites; here
//! the runner is `outpost-test-runner`, the real runner with a file-writing test
//! executor registered for `job` and `terraform_module` (see its source), which counts
//! applies in `applies.log`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_client::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use outpost_api::{
    AuditEvent, EntityKind, EntityRef, Operation, Plan, PlanPhase, PlanSpec, Runner, content_hash,
};
use outpost_testing::phase;
use outpost_testing::{Backend, ControlPlane, Process, eventually, outpost_binary, wait_for};
use serde_json::{Value, json};

const INSTALL: &str = "acme";

/// A test runner's directories.
struct Dirs {
    _root: tempfile::TempDir,
    state: PathBuf,
    out: PathBuf,
}

fn dirs() -> Dirs {
    let root = tempfile::tempdir().unwrap();
    let (state, out) = (root.path().join("state"), root.path().join("out"));
    std::fs::create_dir_all(&out).unwrap();
    Dirs {
        _root: root,
        state,
        out,
    }
}

/// The runner token of install `acme` on `cp` (only a runner token appends to the audit
/// log): the Install is created and the token minted on first use, once per control
/// plane, since minting again rotates it.
fn runner_token(cp: &ControlPlane) -> String {
    static TOKENS: std::sync::Mutex<BTreeMap<String, String>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut tokens = TOKENS.lock().expect("no test panics holding the token map");
    tokens
        .entry(cp.url.clone())
        .or_insert_with(|| {
            let install = cp.scratch().join("install.yaml");
            std::fs::write(
                &install,
                format!(
                    "apiVersion: outpost.dev/v1alpha1\nkind: Install\nmetadata:\n  name: {INSTALL}\n  namespace: default\nspec:\n  app: shopfront\n  approvalMode: approve-all\n  cloud:\n    provider: aws\n    accountId: \"123456789012\"\n    region: eu-west-1\n"
                ),
            )
            .expect("install manifest written");
            cp.kubectl().ok(&["apply", "-f", install.to_str().unwrap()]);
            cp.mint_runner_token(&format!("default/{INSTALL}"))
        })
        .clone()
}

/// Starts `outpost-test-runner` for install `acme` as `name`.
fn start_runner(
    cp: &ControlPlane,
    name: &str,
    dirs: &Dirs,
    env: &[(&str, &str)],
    extra: &[&str],
) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_outpost-test-runner"))
        .args(["--server", &cp.url, "--certificate-authority"])
        .arg(&cp.tls.ca)
        .args([
            "--install",
            &format!("default/{INSTALL}"),
            "--name",
            name,
            "--state-dir",
        ])
        .arg(&dirs.state)
        .args(["--heartbeat-seconds", "1"])
        .args(extra)
        .env("OUTPOST_RUNNER_TOKEN", runner_token(cp))
        .env("OUTPOST_TEST_OUTPUT", &dirs.out)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost-test-runner starts");
    Process::new(child)
}

/// The desired state of a `job` component named `entity`.
fn desired(entity: &str, type_: &str) -> Value {
    json!({"app": "shop", "type": type_, "job": {"image": "busybox", "command": ["echo", entity]}})
}

/// Creates a Plan deploying component `entity` as the gate passes it (`Ready`).
async fn approved_plan(plans: &Api<Plan>, entity: &str, state: Value) -> String {
    let name = format!("{INSTALL}-deploy-{entity}");
    let hash = content_hash(&state);
    let mut plan = Plan::new(
        &name,
        PlanSpec {
            install: INSTALL.into(),
            operation: Operation::Deploy,
            entity: EntityRef {
                kind: EntityKind::Component,
                name: entity.into(),
            },
            reason: None,
            release: None,
            role_override: None,
            desired_state: Some(state),
            content_hash: Some(hash.clone()),
            base_revision: None,
        },
    );
    plan.metadata.labels = Some(BTreeMap::from([(
        "outpost.dev/install".to_owned(),
        INSTALL.to_owned(),
    )]));
    plans.create(&PostParams::default(), &plan).await.unwrap();
    let status = json!({"status": {
        "phase": "Ready",
        "role": {"name": "acme-maintenance", "level": "default"},
    }});
    plans
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
    name
}

/// Every Plan of the install, once all are final.
async fn all_final(plans: &Api<Plan>, secs: u64) -> Vec<Plan> {
    eventually(secs, "every plan to be final", async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        items
            .iter()
            .all(|p| phase(p).is_some_and(PlanPhase::is_terminal))
            .then_some(items)
    })
    .await
}

/// How many applies each plan had, from the test executor's log.
fn applies(out: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(out.join("applies.log")).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let plan = line.split(' ').next().unwrap_or_default().to_owned();
        *counts.entry(plan).or_default() += 1;
    }
    counts
}

/// Runs `outpost audit verify` as the admin, trusting the control plane's Runner keys:
/// (exit code, stdout).
fn audit_verify(cp: &ControlPlane, local: Option<&Path>) -> (i32, String) {
    let mut command = Command::new(outpost_binary());
    command
        .args([
            "audit",
            "verify",
            &format!("default/{INSTALL}"),
            "--kubeconfig",
        ])
        .arg(cp.kubeconfig(&cp.admin_token))
        .arg("--trust-control-plane");
    if let Some(dir) = local {
        command.arg("--local").arg(dir);
    }
    let output = command.output().expect("outpost audit verify runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Lines in the runner's local audit log.
fn local_events(state: &Path) -> usize {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Waits until every local audit event is shipped and the shipped log verifies.
async fn shipped_and_verified(cp: &ControlPlane, state: &Path) -> usize {
    eventually(30, "the audit log to be shipped and verify", async || {
        let expected = local_events(state);
        let (code, out) = audit_verify(cp, None);
        (code == 0 && out.trim() == format!("{expected} events verified")).then_some(expected)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_plans_are_claimed_applied_and_reported_and_the_audit_log_verifies() {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let dirs = dirs();
    let secrets = dirs.out.parent().unwrap().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("db_password"), "hunter2\n").unwrap();
    let policies = dirs.out.parent().unwrap().join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(
        policies.join("no_forbidden.rego"),
        "# outpost:inputs plan\npackage outpost.local\n\ndeny contains \"the customer forbids this entity\" if input.entity == \"forbidden\"\n",
    )
    .unwrap();
    let _runner = start_runner(
        &cp,
        INSTALL,
        &dirs,
        &[],
        &[
            "--secrets-dir",
            secrets.to_str().unwrap(),
            "--policies",
            policies.to_str().unwrap(),
        ],
    );

    // The runner registers with its public key and heartbeats.
    let runners: Api<Runner> = Api::namespaced(client.clone(), "default");
    let runner = eventually(20, "the Runner to register and heartbeat", async || {
        runners.get_opt(INSTALL).await.ok().flatten().filter(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.last_heartbeat.is_some())
        })
    })
    .await;
    assert!(outpost_api::runner::is_ed25519_public_key(
        &runner.spec.public_key
    ));
    assert_eq!(runner.spec.capabilities, ["job", "terraform_module"]);

    let mut state = desired("web", "job");
    state["job"]["env"] = json!({"DB_PASSWORD": "${outpost-secret:db_password}"});
    let web = approved_plan(&plans, "web", state).await;
    let worker = approved_plan(&plans, "worker", desired("worker", "job")).await;
    // Refusals: an unsupported type, a missing secret, a local deny. (An approval of
    // other content cannot be written any more: the server makes approvals, bound to the
    // Plan's own content and diff hash; e2e/tests/plan_lifecycle.rs.)
    let helm = approved_plan(&plans, "chart", desired("chart", "helm_chart")).await;
    let mut state = desired("nosecret", "job");
    state["job"]["env"] = json!({"KEY": "${outpost-secret:api_key}"});
    let nosecret = approved_plan(&plans, "nosecret", state).await;
    let forbidden = approved_plan(&plans, "forbidden", desired("forbidden", "job")).await;

    let done: BTreeMap<String, Plan> = all_final(&plans, 30)
        .await
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap(), p))
        .collect();
    for name in [&web, &worker] {
        let status = done[name].status.clone().unwrap();
        assert_eq!(
            status.phase,
            Some(PlanPhase::Succeeded),
            "{name}: {status:?}"
        );
        assert_eq!(status.claimed_by.as_deref(), Some(INSTALL));
        assert!(status.started_at.is_some() && status.finished_at.is_some());
        assert!(
            status.outputs["file"].as_str().unwrap().ends_with(".json"),
            "{status:?}"
        );
    }
    // The secret reached the executor as an environment variable, never the Plan.
    assert_eq!(
        done[&web].status.as_ref().unwrap().outputs["secretsSeen"],
        json!(["OUTPOST_SECRET_DB_PASSWORD"])
    );
    let message = |name: &String| {
        let status = done[name].status.clone().unwrap();
        assert_eq!(status.phase, Some(PlanPhase::Failed), "{name}: {status:?}");
        status.message.unwrap_or_default()
    };
    assert_eq!(
        message(&helm),
        "component type helm_chart is not supported by this runner"
    );
    assert!(
        message(&nosecret).starts_with("secret \"api_key\" not found"),
        "{}",
        message(&nosecret)
    );
    assert_eq!(
        message(&forbidden),
        "denied by local policy local/no_forbidden: the customer forbids this entity"
    );
    assert_eq!(
        applies(&dirs.out),
        BTreeMap::from([(web.clone(), 1), (worker.clone(), 1)]),
        "only the accepted plans were applied, once each"
    );

    // The shipped log and the local copy verify.
    let count = shipped_and_verified(&cp, &dirs.state).await;
    assert!(count >= 10, "{count} events");
    let (code, out) = audit_verify(&cp, Some(&dirs.state));
    assert_eq!(
        (code, out.trim()),
        (0, format!("{count} events verified").as_str())
    );

    // Tampering with the local copy: edit one line, reported by name.
    let tampered = dirs.out.parent().unwrap().join("tampered");
    std::fs::create_dir_all(&tampered).unwrap();
    let text = std::fs::read_to_string(dirs.state.join("audit.jsonl")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut edited: Value = serde_json::from_str(&lines[3]).unwrap();
    edited["details"] = json!({"edited": true});
    lines[3] = edited.to_string();
    std::fs::write(tampered.join("audit.jsonl"), lines.join("\n") + "\n").unwrap();
    let (code, out) = audit_verify(&cp, Some(&tampered));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("event acme-3: content does not match its hash"),
        "{out}"
    );
    // Reordered lines.
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.swap(4, 5);
    std::fs::write(tampered.join("audit.jsonl"), lines.join("\n") + "\n").unwrap();
    let (code, out) = audit_verify(&cp, Some(&tampered));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("event acme-5: out of order"), "{out}");

    // The shipped events cannot be tampered with through the API, even by an admin:
    // the audit log is append-only (405), and still verifies.
    let events: Api<AuditEvent> = Api::namespaced(client.clone(), "default");
    let edit = events
        .patch(
            "acme-2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"details": {"forged": true}}})),
        )
        .await;
    assert!(
        matches!(&edit, Err(kube_client::Error::Api(s)) if s.code == 405),
        "{edit:?}"
    );
    let deleted = events.delete("acme-4", &DeleteParams::default()).await;
    assert!(
        matches!(&deleted, Err(kube_client::Error::Api(s)) if s.code == 405),
        "{:?}",
        deleted.err()
    );
    let (code, out) = audit_verify(&cp, None);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_racing_claim_each_plan_once() {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let (a, b) = (dirs(), dirs());
    let shared_out = a.out.clone();
    let b = Dirs {
        out: shared_out.clone(),
        ..b
    };
    let _runners = [
        start_runner(&cp, "runner-a", &a, &[], &[]),
        start_runner(&cp, "runner-b", &b, &[], &[]),
    ];
    let mut names = Vec::new();
    for i in 0..20 {
        names.push(approved_plan(&plans, &format!("c{i}"), desired(&format!("c{i}"), "job")).await);
    }
    let done = all_final(&plans, 60).await;
    let mut claimers = BTreeMap::<String, usize>::new();
    for plan in &done {
        let status = plan.status.clone().unwrap();
        assert_eq!(status.phase, Some(PlanPhase::Succeeded), "{status:?}");
        *claimers.entry(status.claimed_by.unwrap()).or_default() += 1;
    }
    let counts = applies(&shared_out);
    assert_eq!(counts.len(), 20, "{counts:?}");
    assert!(
        counts.values().all(|&n| n == 1),
        "a plan was applied twice: {counts:?}"
    );
    // Who applied a plan is who claimed it.
    let log = std::fs::read_to_string(shared_out.join("applies.log")).unwrap();
    for plan in &done {
        let by = plan.status.as_ref().unwrap().claimed_by.clone().unwrap();
        let name = plan.metadata.name.clone().unwrap();
        assert!(
            log.lines().any(|l| l == format!("{name} {by}")),
            "{name} by {by}\n{log}"
        );
    }
    // The runners decode no managed fields and send none with their status writes: the
    // stored ones are kept (the creator still owns the spec) and record the runners' writes.
    for plan in &done {
        let managed = plan.metadata.managed_fields.as_deref().unwrap_or_default();
        let owned = |path: &str| {
            managed.iter().any(|entry| {
                entry
                    .fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer(path).is_some())
            })
        };
        assert!(owned("/f:spec/f:desiredState"), "{managed:?}");
        assert!(owned("/f:status/f:claimedBy"), "{managed:?}");
    }
    println!("claims per runner: {claimers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_never_applies_a_step_twice() {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dirs = dirs();
    let total = 100;
    for i in 0..total {
        approved_plan(&plans, &format!("k{i}"), desired(&format!("k{i}"), "job")).await;
    }
    let env = [("OUTPOST_TEST_APPLY_MS", "40")];
    // Kill the runner at random points until every Plan is final, or time is up (not a
    // failure: the undisturbed run below finishes what is left).
    let mut kills = 0;
    wait_for(Duration::from_secs(120), async || {
        let finished = plans
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| phase(p).is_some_and(PlanPhase::is_terminal))
            .count();
        if finished == total {
            return Some(());
        }
        let mut runner = start_runner(&cp, INSTALL, &dirs, &env, &[]);
        tokio::time::sleep(Duration::from_millis(100 + rand::random::<u64>() % 500)).await;
        runner.kill();
        kills += 1;
        None
    })
    .await;
    // A last, undisturbed run finishes (and reports) whatever is left.
    let mut runner = start_runner(&cp, INSTALL, &dirs, &env, &[]);
    let done = all_final(&plans, 60).await;
    let counts = applies(&dirs.out);
    let (mut succeeded, mut interrupted) = (0, 0);
    for plan in &done {
        let name = plan.metadata.name.clone().unwrap();
        let status = plan.status.clone().unwrap();
        let applied = counts.get(&name).copied().unwrap_or(0);
        match status.phase {
            Some(PlanPhase::Succeeded) => {
                succeeded += 1;
                assert_eq!(applied, 1, "{name} applied {applied} times");
            }
            Some(PlanPhase::Failed) => {
                interrupted += 1;
                assert_eq!(
                    status.message.as_deref(),
                    Some("interrupted during apply; re-plan required"),
                    "{name}"
                );
                assert!(applied <= 1, "{name} applied {applied} times");
            }
            other => panic!("{name} ended {other:?}"),
        }
    }
    println!("{kills} kills: {succeeded} succeeded, {interrupted} failed as interrupted");
    assert!(kills >= 3, "the loop killed the runner only {kills} times");
    // The audit log survived every kill: it verifies, locally and shipped (once the
    // runner has shipped everything; stop it so the log holds still).
    eventually(30, "every audit event to be shipped", async || {
        let shipped = std::fs::read_to_string(dirs.state.join("audit.shipped")).ok()?;
        (shipped.trim() == local_events(&dirs.state).to_string()).then_some(())
    })
    .await;
    runner.kill();
    let count = shipped_and_verified(&cp, &dirs.state).await;
    let (code, out) = audit_verify(&cp, Some(&dirs.state));
    assert_eq!(
        (code, out.trim()),
        (0, format!("{count} events verified").as_str())
    );
}

/// How long the control plane stays away in the outage test.
const OUTAGE: Duration = Duration::from_secs(60);

/// How many `reported` records the journal holds for each Plan.
fn reports(state: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(state.join("journal.jsonl")).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let record: Value = serde_json::from_str(line).unwrap_or_default();
        if record["stage"] == "reported" {
            *counts
                .entry(record["plan"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_apiserver_down_the_runner_finishes_and_reports_once_it_is_back() {
    let mut cp = ControlPlane::start(Backend::Embedded).await;
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dirs = dirs();
    // Two approved Plans before the runner starts: it runs `first` (approved first) and
    // has `second` queued when the control plane goes away.
    let first = approved_plan(&plans, "first", desired("first", "job")).await;
    let second = approved_plan(&plans, "second", desired("second", "job")).await;
    let mut runner = start_runner(
        &cp,
        INSTALL,
        &dirs,
        &[("OUTPOST_TEST_APPLY_MS", "3000")],
        &[],
    );
    eventually(20, "the first plan to run", async || {
        let plan = plans.get(&first).await.ok()?;
        matches!(
            phase(&plan),
            Some(PlanPhase::Planning | PlanPhase::Applying)
        )
        .then_some(())
    })
    .await;
    cp.stop();
    let stopped = Instant::now();
    let before = local_events(&dirs.state);
    // The apply finishes while the control plane is away: the outputs event is written locally.
    let target = dirs.out.join("first.json");
    eventually(20, "the apply to finish offline", async || {
        (target.exists() && local_events(&dirs.state) > before).then_some(())
    })
    .await;
    assert!(
        !dirs.out.join("second.json").exists(),
        "the second plan cannot be claimed while the control plane is away"
    );
    // Keep the control plane away for the whole outage; the runner keeps going.
    tokio::time::sleep(OUTAGE.saturating_sub(stopped.elapsed())).await;
    assert!(
        runner.is_running(),
        "the runner survived a {OUTAGE:?} outage"
    );
    let offline = local_events(&dirs.state);
    cp.start_again().await;
    println!("the control plane was away for {:?}", stopped.elapsed());

    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let done = eventually(90, "both results to be reported", async || {
        let a = plans.get(&first).await.ok()?;
        let b = plans.get(&second).await.ok()?;
        (phase(&a) == Some(PlanPhase::Succeeded) && phase(&b) == Some(PlanPhase::Succeeded))
            .then_some([a, b])
    })
    .await;
    for plan in done {
        let status = plan.status.unwrap();
        assert!(status.outputs.contains_key("file"), "{status:?}");
        assert_eq!(status.claimed_by.as_deref(), Some(INSTALL));
    }
    // Everything recorded offline (and after) is shipped once and verifies.
    let shipped = shipped_and_verified(&cp, &dirs.state).await;
    assert!(
        shipped >= offline,
        "{shipped} shipped, {offline} recorded by the outage's end"
    );
    // Exactly once: one apply and one report per Plan.
    let applied = applies(&dirs.out);
    assert_eq!(
        applied,
        BTreeMap::from([(first.clone(), 1), (second.clone(), 1)])
    );
    assert_eq!(
        reports(&dirs.state),
        BTreeMap::from([(first, 1), (second, 1)]),
        "each result was reported once"
    );
}
