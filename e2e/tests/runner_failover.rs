//! The real runner (`outpost-runner`, job steps under bubblewrap) given two `outpost
//! server` replicas on one etcd: `--server A,B`, as the install stack names them
//! (`outpost controllers --public-url A,B`, read back with `outpost stack`). It uses A,
//! moves to B when A is killed (kill -9) mid-Plan, and back to A (restarted, its watch
//! cache fresh, so the watch's resourceVersion is gone there: 410, and the runner lists
//! again) when B is killed; every Plan runs exactly once. And when a claim's or a
//! result's answer is lost with the replica that committed it, the runner settles it on
//! the next replica without running anything twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::{Install, InstallPhase, Plan, PlanPhase, Runner};
use outpost_runner::journal::{JOURNAL_FILE, Record};
use outpost_runner::{Stage, failover};
use outpost_testing::job_plans::{
    INSTALL, approved_job_plan, audit_verify, audited_applies, install_with_token, local_events,
    runner_command, step_runs,
};
use outpost_testing::phase;
use outpost_testing::shop::runnable_app;
use outpost_testing::{
    Backend, ControlPlane, Process, RecordingProxy, eventually, on_path, outpost_binary,
};

/// The controllers' lease: a replica whose API server died is replaced within this.
const LEASE_SECONDS: u64 = 4;

/// Action `step` of App `shop`: its one step appends a line to `runs.log` in its work
/// dir, then takes a while (a window to kill the API server in); and Install `acme`.
const ACTION_AND_INSTALL: &str = r#"apiVersion: outpost.dev/v1alpha1
kind: Action
metadata:
  name: step
spec:
  app: shop
  triggers:
    - type: manual
  steps:
    - name: step
      script: |
        echo ran >> "$OUTPOST_WORK_DIR/runs.log"
        sleep 2
---
apiVersion: outpost.dev/v1alpha1
kind: Install
metadata:
  name: acme
spec:
  app: shop
  approvalMode: approve-all
  cloud:
    provider: aws
    accountId: "111122223333"
    region: eu-west-1
"#;

/// The runner's standard error, written to a file the test reads.
struct RunnerLog(PathBuf);

impl RunnerLog {
    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }

    /// Lines saying the runner moved to the server at `url`.
    fn moves_to(&self, url: &str) -> usize {
        let to = format!("to={}", failover_display(url));
        self.text()
            .lines()
            .filter(|l| l.contains("moved to another API server") && l.contains(&to))
            .count()
    }
}

/// How the runner prints a server's URL (`http::Uri`, with its `/` path).
fn failover_display(url: &str) -> String {
    let uri: http::Uri = url.parse().expect("a URL");
    uri.to_string()
}

/// Starts `outpost-runner` for `servers` (comma-separated), logging at info into `log`.
fn start_runner(servers: &str, ca: &Path, token: &str, state: &Path, log: &Path) -> Process {
    let child = runner_command(servers, ca, token, state)
        .arg("--terraform")
        .arg(on_path("terraform"))
        .env("RUST_LOG", "warn,outpost_runner=info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("the runner's log file"))
        .spawn()
        .expect("outpost-runner starts");
    Process::new(child)
}

/// The install's Plans once every one is final; panics if one did not succeed.
async fn all_succeeded(plans: &Api<Plan>, count: usize, secs: u64) -> Vec<Plan> {
    let done = eventually(secs, &format!("{count} Plans to finish"), async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        (items.len() == count
            && items
                .iter()
                .all(|p| phase(p).is_some_and(PlanPhase::is_terminal)))
        .then_some(items)
    })
    .await;
    for plan in &done {
        assert_eq!(
            phase(plan),
            Some(PlanPhase::Succeeded),
            "{}: {:?}",
            plan.name_any(),
            plan.status
        );
    }
    done
}

/// How many records of each stage the runner's journal holds per Plan uid.
fn journal(state: &Path) -> BTreeMap<String, BTreeMap<&'static str, usize>> {
    let text = std::fs::read_to_string(state.join(JOURNAL_FILE)).unwrap_or_default();
    let mut stages: BTreeMap<String, BTreeMap<&'static str, usize>> = BTreeMap::new();
    for line in text.lines() {
        let record: Record = serde_json::from_str(line).expect("a journal record");
        let stage = match record.stage {
            Stage::Claiming { .. } => "claiming",
            Stage::Claimed => "claimed",
            Stage::Applying { .. } => "applying",
            Stage::Applied { .. } => "applied",
            Stage::Failed { .. } => "failed",
            Stage::Awaiting { .. } => "awaiting",
            Stage::Released { .. } => "released",
            Stage::Reported => "reported",
            Stage::Lost => "lost",
        };
        *stages
            .entry(record.uid)
            .or_default()
            .entry(stage)
            .or_default() += 1;
    }
    stages
}

/// Checks that each of `plans` was claimed, applied and reported exactly once by the
/// runner (its journal) and has one successful `apply` in the shipped audit log, and
/// that the shipped log holds every local event and verifies.
async fn applied_once_and_audited(cp: &ControlPlane, state: &Path, plans: &[Plan]) {
    // The server commits a Plan's result before it answers the runner, which journals
    // `reported` once the answer is in: a Plan seen finished may not be journaled yet.
    let journal = eventually(30, "every Plan's report to be journaled", async || {
        let journal = journal(state);
        plans
            .iter()
            .all(|p| {
                journal
                    .get(&p.uid().unwrap())
                    .is_some_and(|stages| stages.contains_key("reported"))
            })
            .then_some(journal)
    })
    .await;
    for plan in plans {
        let stages = &journal[&plan.uid().unwrap()];
        for stage in ["claimed", "applied", "reported"] {
            assert_eq!(
                stages.get(stage),
                Some(&1),
                "{}: {stages:?}",
                plan.name_any()
            );
        }
        assert_eq!(stages.get("failed"), None, "{}", plan.name_any());
    }
    eventually(60, "the audit log to be shipped and verify", async || {
        let expected = local_events(state);
        let (code, out) = audit_verify(cp);
        (code == 0 && out.trim() == format!("{expected} events verified")).then_some(())
    })
    .await;
    let applies = audited_applies(cp).await;
    for plan in plans {
        assert_eq!(
            applies.get(&plan.name_any()).map(Vec::len),
            Some(1),
            "{}: one apply in the audit log",
            plan.name_any()
        );
    }
}

/// `outpost trigger step --install acme` through `cp`, as an operator.
fn trigger(cp: &ControlPlane) {
    let output = std::process::Command::new(outpost_binary())
        .args(["trigger", "step", "--install", INSTALL, "--timeout", "60"])
        .env("KUBECONFIG", cp.kubeconfig(&cp.admin_token))
        .env("OUTPOST_USER", "alice")
        .output()
        .expect("outpost trigger runs");
    assert!(
        output.status.success(),
        "outpost trigger: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The default of the `ServerUrl` parameter of the install stack `outpost stack` prints
/// through `cp`, once the controllers rendered it.
fn stack_server_urls(cp: &ControlPlane) -> Option<String> {
    let output = std::process::Command::new(outpost_binary())
        .args(["stack", &format!("default/{INSTALL}")])
        .env("KUBECONFIG", cp.kubeconfig(&cp.admin_token))
        .output()
        .expect("outpost stack runs");
    let template: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    Some(
        template["Parameters"]["ServerUrl"]["Default"]
            .as_str()?
            .to_owned(),
    )
}

/// Lines the action's step appended: one per run.
fn step_lines(state: &Path) -> usize {
    std::fs::read_to_string(outpost_e2e::work_dirs(state).join("action-step/job/runs.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_moves_between_replicas_as_each_is_killed_and_runs_every_plan_once() {
    // No periodic BOOKMARKs: they carry the watch cache's progress, so a runner that got
    // one from B just before B died would resume inside A's fresh history. Without them
    // (and B killed, so no BOOKMARK as its watch ends) the runner resumes from its last
    // Plan event, which A's fresh cache no longer has: the 410 this test is about.
    let first =
        ControlPlane::start_with_flags(Backend::Etcd, &["--watch-bookmark-seconds", "3600"]).await;
    let second = first.start_replica().await;
    // Install stacks name both replicas.
    let both = format!("{},{}", first.url, second.url);
    let _controllers = [
        first.start_controllers_publishing("controllers-0", LEASE_SECONDS, &both),
        second.start_controllers_publishing("controllers-1", LEASE_SECONDS, &both),
    ];
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("shop.yaml");
    let app = runnable_app("");
    std::fs::write(&manifest, format!("{app}---\n{ACTION_AND_INSTALL}")).unwrap();
    second
        .kubectl()
        .ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let token = second.mint_runner_token(&format!("default/{INSTALL}"));
    // The runner dials what its install stack tells it to (`--server ${ServerUrl}`).
    let servers = eventually(30, "the install stack", async || stack_server_urls(&second)).await;
    assert_eq!(servers, both);
    let (state, log) = (
        dir.path().join("state"),
        RunnerLog(dir.path().join("runner.log")),
    );
    let _runner = start_runner(&servers, &first.tls.ca, &token, &state, &log.0);

    // A is the replica the runner starts on (its own place in the list), B the other.
    let on_second = eventually(30, "the runner to say which server it uses", async || {
        let text = log.text();
        let line = text.lines().find(|l| l.contains("using API server"))?;
        let uses =
            |cp: &ControlPlane| line.contains(&format!("server={}", failover_display(&cp.url)));
        match (uses(&first), uses(&second)) {
            (true, false) => Some(false),
            (false, true) => Some(true),
            _ => panic!("the runner uses neither replica: {line}"),
        }
    })
    .await;
    let (mut a, mut b) = if on_second {
        (second, first)
    } else {
        (first, second)
    };
    let on_b = b.client().await;
    let installs: Api<Install> = Api::namespaced(on_b.clone(), "default");
    eventually(120, "the install to be Active", async || {
        let install = installs.get(INSTALL).await.ok()?;
        (install.status?.phase == Some(InstallPhase::Active)).then_some(())
    })
    .await;

    // Three runs of the action; A dies while the runner runs one of them.
    for _ in 0..3 {
        trigger(&b);
    }
    let plans: Api<Plan> = Api::namespaced(on_b.clone(), "default");
    eventually(60, "a Plan to run", async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        items
            .iter()
            .any(|p| matches!(phase(p), Some(PlanPhase::Planning | PlanPhase::Applying)))
            .then_some(())
    })
    .await;
    assert_eq!(log.moves_to(&b.url), 0, "still on A: {}", log.text());
    a.stop();
    let killed = jiff::Timestamp::now();
    // Two more, made after the kill.
    for _ in 0..2 {
        trigger(&b);
    }
    let done = all_succeeded(&plans, 1 + 5, 120).await;
    assert_eq!(log.moves_to(&b.url), 1, "{}", log.text());
    // And it heartbeats through B.
    let runners: Api<Runner> = Api::namespaced(on_b.clone(), "default");
    eventually(30, "a heartbeat after the kill", async || {
        let beat = runners.get(INSTALL).await.ok()?.status?.last_heartbeat?;
        (beat.0 > killed).then_some(())
    })
    .await;

    // A comes back with a fresh watch cache: its history starts after the last Plan
    // event the runner saw (the runner's heartbeats have moved the store on since).
    let last_plan_revision = done
        .iter()
        .map(|p| p.resource_version().unwrap().parse::<u64>().unwrap())
        .max()
        .unwrap();
    eventually(30, "a write after the last Plan event", async || {
        let runner = runners.get(INSTALL).await.ok()?;
        (runner.resource_version()?.parse::<u64>().ok()? > last_plan_revision).then_some(())
    })
    .await;
    a.start_again().await;
    b.stop();
    let on_a = a.client().await;
    let plans: Api<Plan> = Api::namespaced(on_a.clone(), "default");
    trigger(&a);
    let done = all_succeeded(&plans, 1 + 6, 120).await;
    assert_eq!(log.moves_to(&a.url), 1, "{}", log.text());
    assert!(
        log.text()
            .contains("plan watch: 410 Gone; listing the Plans again"),
        "the watch resumed on A from a resourceVersion A no longer has: {}",
        log.text()
    );

    // Every Plan ran once: one line per run of the step, one apply each.
    assert_eq!(step_lines(&state), 6, "each trigger's step ran once");
    applied_once_and_audited(&a, &state, &done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_or_result_whose_answer_died_with_its_replica_is_settled_on_the_next_once() {
    let a = ControlPlane::start(Backend::Etcd).await;
    let b = a.start_replica().await;
    let token = install_with_token(&a).await;
    // The runner dials A and B through proxies that die right after the server
    // committed a write: A's after the claim of `claim-lost`, B's after the result of
    // `report-lost`. Then it is left with A, directly.
    let (proxy_a, proxy_b) = (
        RecordingProxy::start(&a.url, &a.tls).await,
        RecordingProxy::start(&b.url, &b.tls).await,
    );
    // In that order, from where this runner starts in its list.
    let mut servers = [proxy_a.url.as_str(), proxy_b.url.as_str(), a.url.as_str()];
    servers.rotate_right(failover::first_server(
        &format!("default/{INSTALL}/{INSTALL}"),
        3,
    ));
    let path = "/apis/outpost.dev/v1alpha1/namespaces/default/plans";
    proxy_a.die_after(&[&format!("PUT {path}/claim-lost/status")]);
    proxy_b.die_after(&[&format!("PATCH {path}/report-lost/status"), "Succeeded"]);
    let dir = tempfile::tempdir().unwrap();
    let (state, log) = (
        dir.path().join("state"),
        RunnerLog(dir.path().join("runner.log")),
    );
    let _runner = start_runner(&servers.join(","), &a.tls.ca, &token, &state, &log.0);

    let plans: Api<Plan> = Api::namespaced(a.client().await, "default");
    let started = format!("using API server server={}", failover_display(&proxy_a.url));
    eventually(30, "the runner to start on A's proxy", async || {
        log.text().contains(&started).then_some(())
    })
    .await;
    let mut expected = 0;
    for (name, proxy) in [("claim-lost", &proxy_a), ("report-lost", &proxy_b)] {
        approved_job_plan(&plans, name).await;
        expected += 1;
        all_succeeded(&plans, expected, 60).await;
        // The server commits before it answers: the Plan can be seen Succeeded an instant
        // before the answer reaches the proxy, which dies then.
        eventually(
            10,
            &format!("{name}: the write's answer to be lost"),
            async || proxy.is_dead().then_some(()),
        )
        .await;
    }
    // The runner notices a dead replica on its next call, which may come after the Plan
    // it reported is seen Succeeded: wait for the second move to be logged.
    eventually(30, "the runner to move to A", async || {
        (log.moves_to(&a.url) > 0).then_some(())
    })
    .await;
    assert_eq!(log.moves_to(&proxy_b.url), 1, "{}", log.text());
    assert_eq!(log.moves_to(&a.url), 1, "{}", log.text());
    // A Plan made after both moves.
    approved_job_plan(&plans, "after").await;
    let done = all_succeeded(&plans, 3, 60).await;

    for plan in &done {
        let status = plan.status.as_ref().unwrap();
        assert_eq!(status.claimed_by.as_deref(), Some(INSTALL));
    }
    assert_eq!(
        step_runs(&outpost_e2e::work_dirs(&state)),
        BTreeMap::from([
            ("after".to_owned(), 1),
            ("claim-lost".to_owned(), 1),
            ("report-lost".to_owned(), 1)
        ]),
        "each step ran once"
    );
    applied_once_and_audited(&a, &state, &done).await;
}
