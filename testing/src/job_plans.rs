//! Job Plans for the real runner's end-to-end tests: App `shop` and Install
//! `default/acme` made as an admin would, the install's runner token, approved `job`
//! Plans whose one step appends the Plan's name to `applies.log` in the job's work dir
//! (the one host directory the sandbox may write, bound at the same path, so the file
//! is read outside the sandbox to count how often each step really ran), and the
//! checks those tests share.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kube_client::api::{Api, ListParams, Patch, PatchParams, PostParams};
use outpost_api::{AuditEvent, AuditEventType, Plan};
use serde_json::json;

use crate::{ControlPlane, outpost_binary, runner_binary};

/// The install the Plans are for.
pub const INSTALL: &str = "acme";

/// Creates App `shop` and Install `acme` (`approve-all`: its runner applies a diff at
/// once), and mints the install's runner token with
/// `outpost token`, as an admin would.
pub async fn install_with_token(cp: &ControlPlane) -> String {
    create_app(cp).await;
    create_install(cp, INSTALL, "approve-all").await
}

/// Creates App `shop` as an admin would.
pub async fn create_app(cp: &ControlPlane) {
    let app = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "shop"},
        "spec": {"permissions": {"roles": [{"name": "acme-maintenance", "type": "maintenance"}]}}});
    admin_create(cp, "apps", app).await;
}

/// Creates Install `name` of App `shop` with `approval_mode` as an admin would, and
/// mints its runner token with `outpost token`.
pub async fn create_install(cp: &ControlPlane, name: &str, approval_mode: &str) -> String {
    let install = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": name},
        "spec": {"app": "shop", "approvalMode": approval_mode,
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}}});
    admin_create(cp, "installs", install).await;
    cp.mint_runner_token(&format!("default/{name}"))
}

async fn admin_create(cp: &ControlPlane, plural: &str, object: serde_json::Value) {
    let json = [("content-type", "application/json")];
    let base = "/apis/outpost.dev/v1alpha1/namespaces/default";
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            &format!("{base}/{plural}"),
            &json,
            object.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "creating {plural}: {}", reply.text);
}

/// Creates Plan `name` deploying component `entity` of `install` with `desired`, and
/// passes it as the gate would: `Ready`, role `acme-maintenance`, and `verdicts`.
pub async fn ready_plan(
    plans: &Api<Plan>,
    install: &str,
    name: &str,
    entity: &str,
    desired: serde_json::Value,
    verdicts: serde_json::Value,
) {
    pending_plan(plans, install, name, entity, desired).await;
    let status = json!({"status": {"phase": "Ready",
        "role": {"name": "acme-maintenance", "level": "default"},
        "verdicts": verdicts}});
    plans
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// Creates Plan `name` deploying component `entity` of `install` with `desired`, and
/// leaves it `Pending` (as the gate has not seen it yet).
pub async fn pending_plan(
    plans: &Api<Plan>,
    install: &str,
    name: &str,
    entity: &str,
    desired: serde_json::Value,
) {
    plans
        .create(
            &PostParams::default(),
            &serde_json::from_value(deploy_plan(name, install, entity, desired)).unwrap(),
        )
        .await
        .unwrap();
}

/// `outpost-runner` for install `acme` dialling `servers` (one URL, or several
/// comma-separated) with `token`, trusting `ca`, its state in `state`, job steps under
/// bubblewrap and a heartbeat every second. The caller sets its output and spawns it.
pub fn runner_command(servers: &str, ca: &Path, token: &str, state: &Path) -> Command {
    install_runner_command(INSTALL, servers, ca, token, state)
}

/// [`runner_command`] for install `install` (of namespace `default`).
pub fn install_runner_command(
    install: &str,
    servers: &str,
    ca: &Path,
    token: &str,
    state: &Path,
) -> Command {
    let mut command = Command::new(runner_binary());
    command
        .args(["--server", servers, "--certificate-authority"])
        .arg(ca)
        .args(["--install", &format!("default/{install}"), "--state-dir"])
        .arg(state)
        .args(["--bwrap", "bwrap", "--heartbeat-seconds", "1"])
        .env("OUTPOST_RUNNER_TOKEN", token);
    command
}

/// Creates approved Plan `name`: a deploy of job component `counter` whose step appends
/// `name` to `applies.log` in the work dir, then takes a moment (a window to be killed in).
pub async fn approved_job_plan(plans: &Api<Plan>, name: &str) {
    let script = format!("echo {name} >> \"$OUTPOST_WORK_DIR/applies.log\"; sleep 0.05");
    let desired = json!({"app": "shop", "type": "job",
                         "job": {"image": "none", "command": ["/bin/sh", "-c", script]}});
    approved_plan(plans, name, ("component", "counter"), "deploy", desired).await;
}

/// Creates approved Plan `name`: a trigger of action `entity` running `steps` (with
/// network when `network`).
pub async fn approved_action_plan(
    plans: &Api<Plan>,
    name: &str,
    entity: &str,
    steps: serde_json::Value,
    network: bool,
) {
    let desired = json!({"app": "shop", "steps": steps, "network": network});
    approved_plan(plans, name, ("action", entity), "trigger", desired).await;
}

/// Creates Plan `name` of `operation` on `entity` (kind, name) with `desired`, and
/// approves it with the install's maintenance role.
async fn approved_plan(
    plans: &Api<Plan>,
    name: &str,
    (kind, entity): (&str, &str),
    operation: &str,
    desired: serde_json::Value,
) {
    let hash = outpost_api::content_hash(&desired);
    let plan = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": name, "labels": {outpost_api::labels::INSTALL: INSTALL}},
        "spec": {"install": INSTALL, "operation": operation,
                 "entity": {"kind": kind, "name": entity},
                 "desiredState": desired, "contentHash": hash}});
    plans
        .create(
            &PostParams::default(),
            &serde_json::from_value(plan).expect("a Plan"),
        )
        .await
        .expect("the Plan is created");
    let status = json!({"status": {
        "phase": "Ready",
        "role": {"name": "acme-maintenance", "level": "default"},
    }});
    plans
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("the Plan is approved");
}

/// How many times each Plan's step ran, from the lines it appended in the runner's work
/// dirs' directory `work` (`outpost_e2e::work_dirs`).
pub fn step_runs(work: &Path) -> BTreeMap<String, usize> {
    let log = work.join("component-counter/job/applies.log");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    counts
}

/// `outpost audit verify default/acme` as the admin, trusting the keys of the control
/// plane's Runner objects: (exit code, the verdict it printed).
pub fn audit_verify(cp: &ControlPlane) -> (i32, String) {
    let (code, stdout, _warning) = audit_verify_trusting(cp, &["--trust-control-plane".as_ref()]);
    (code, stdout)
}

/// `outpost audit verify default/acme` as the admin with `trust` (`--key FILE`,
/// `--checkpoint FILE`, `--trust-control-plane`, or nothing): (exit code, stdout, stderr).
pub fn audit_verify_trusting(
    cp: &ControlPlane,
    trust: &[&std::ffi::OsStr],
) -> (i32, String, String) {
    audit_verify_with(cp, trust, &[])
}

/// [`audit_verify_trusting`] with `env` set for the CLI (the AWS credentials `--stack`
/// reads the customer's stack with).
pub fn audit_verify_with(
    cp: &ControlPlane,
    trust: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    audit_verify_install(cp, INSTALL, trust, env)
}

/// [`audit_verify_with`] for install `default/install`.
pub fn audit_verify_install(
    cp: &ControlPlane,
    install: &str,
    trust: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let output = Command::new(outpost_binary())
        .args([
            "audit",
            "verify",
            &format!("default/{install}"),
            "--kubeconfig",
        ])
        .arg(cp.kubeconfig(&cp.admin_token))
        .args(trust)
        .envs(env.iter().copied())
        .output()
        .expect("outpost audit verify runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// How many events the runner's local audit log in `state` holds.
pub fn local_events(state: &Path) -> usize {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The runner's local audit log in `state`, in order.
pub fn local_audit(state: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit lines are JSON"))
        .collect()
}

/// Waits (60 s at most) until every event of the runner's local audit log in `state` is
/// shipped and `outpost audit verify default/INSTALL --trust-control-plane` verifies
/// them all; returns how many it verified.
pub async fn audit_log_verifies(cp: &ControlPlane, install: &str, state: &Path) -> usize {
    crate::eventually(60, "the audit log to be shipped and verify", async || {
        let expected = local_events(state);
        let (code, stdout, _) =
            audit_verify_install(cp, install, &["--trust-control-plane".as_ref()], &[]);
        (code == 0 && stdout.trim() == format!("{expected} events verified")).then_some(expected)
    })
    .await
}

/// Waits until Install `default/name` reports `phase`; after `secs`, panics with its
/// status, every Plan of it (phase and message) and `context()` (an emulator's log...).
pub async fn install_reaches(
    cp: &ControlPlane,
    name: &str,
    phase: outpost_api::InstallPhase,
    secs: u64,
    context: impl Fn() -> String,
) {
    let client = cp.client().await;
    let installs: Api<outpost_api::Install> = Api::namespaced(client.clone(), "default");
    let reached = crate::wait_for(std::time::Duration::from_secs(secs), async || {
        let install = installs.get(name).await.ok()?;
        (install.status.as_ref().and_then(|s| s.phase) == Some(phase)).then_some(())
    })
    .await;
    if reached.is_some() {
        return;
    }
    let install = installs.get(name).await.expect("the install is readable");
    let plans: Api<Plan> = Api::namespaced(client, "default");
    let selector = ListParams::default().labels(&format!("outpost.dev/install={name}"));
    let plans: Vec<String> = plans
        .list(&selector)
        .await
        .expect("the Plans are listable")
        .iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            format!(
                "{} {:?} {}",
                p.metadata.name.clone().unwrap_or_default(),
                status.phase,
                status.message.unwrap_or_default()
            )
        })
        .collect();
    panic!(
        "install {name} never reached {phase:?}: {:?}\nplans:\n{}\n{}",
        install.status,
        plans.join("\n"),
        context()
    );
}

/// Waits until DriftReport `default/name` exists and says in sync; panics after `secs`.
pub async fn drift_report_in_sync(cp: &ControlPlane, name: &str, secs: u64) {
    let reports: Api<outpost_api::DriftReport> = Api::namespaced(cp.client().await, "default");
    crate::eventually(
        secs,
        &format!("the DriftReport {name}, in sync"),
        async || {
            reports
                .get_opt(name)
                .await
                .ok()??
                .spec
                .in_sync
                .then_some(())
        },
    )
    .await;
}

/// The JSON body of a `deploy` Plan of component `web` named `name` for `install`
/// (labelled with it), for tests that send Plans as raw requests.
pub fn plan_body(name: &str, install: &str) -> Vec<u8> {
    deploy_plan(name, install, "web", json!({"note": name}))
        .to_string()
        .into_bytes()
}

/// A `deploy` Plan of component `entity` named `name` for `install` (labelled with it),
/// rendering `desired`, with its content hash: the one Plan body the tests send.
pub fn deploy_plan(
    name: &str,
    install: &str,
    entity: &str,
    desired: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {"name": name, "labels": {outpost_api::labels::INSTALL: install}},
        "spec": {
            "install": install,
            "operation": "deploy",
            "entity": {"kind": "component", "name": entity},
            "contentHash": outpost_api::content_hash(&desired),
            "desiredState": desired,
        },
    })
}

/// The hash the test events of [`audit_event_body`] carry: `install` and `sequence`'s.
pub fn audit_event_hash(install: &str, sequence: u64) -> String {
    outpost_api::content_hash(&serde_json::json!([install, sequence]))
}

/// The JSON body of an AuditEvent `name` of `install` at `sequence`, linked to
/// `previous` (the hash of the event before it), for tests that send events as raw
/// requests: the server checks the link, not the signature.
pub fn audit_event_body(
    install: &str,
    sequence: u64,
    previous: Option<&str>,
    name: &str,
) -> String {
    let mut spec = serde_json::json!({
        "install": install,
        "runner": install,
        "sequence": sequence,
        "timestamp": "2025-01-15T10:00:00Z",
        "type": "claim",
        "hash": audit_event_hash(install, sequence),
        "signature": "c2ln",
    });
    if let Some(previous) = previous {
        spec["previousHash"] = serde_json::json!(previous);
    }
    serde_json::json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "AuditEvent",
        "metadata": {"name": name, "labels": {outpost_api::labels::INSTALL: install}},
        "spec": spec,
    })
    .to_string()
}

/// The details of every successful `apply` event the control plane holds (a failed apply's
/// event says `failed`), by Plan.
pub async fn audited_applies(cp: &ControlPlane) -> BTreeMap<String, Vec<serde_json::Value>> {
    let events: Api<AuditEvent> = Api::namespaced(cp.client().await, "default");
    let mut applies = BTreeMap::<String, Vec<serde_json::Value>>::new();
    for event in events.list(&ListParams::default()).await.unwrap().items {
        let details = event.spec.details.unwrap_or_default();
        if event.spec.type_ == AuditEventType::Apply && details.get("failed").is_none() {
            applies
                .entry(event.spec.plan.unwrap_or_default())
                .or_default()
                .push(details);
        }
    }
    applies
}
