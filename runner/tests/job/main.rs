//! The job executor against the real bubblewrap: jobs and action steps sandboxed.

use outpost_api::{Operation, PolicyInput};
use outpost_runner::executor::job::sandbox::{Bind, NetworkSettings, Sandbox};
use outpost_runner::executor::job::{JobExecutor, job_dir};
use outpost_runner::executor::{Applied, Diff, Executor, ExecutorError, StepContext};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn executor() -> JobExecutor {
    JobExecutor::new(std::env::var("OUTPOST_BWRAP").unwrap_or_else(|_| "bwrap".into()))
}

fn action(steps: Value, network: bool) -> Value {
    json!({"app": "shopfront", "steps": steps, "network": network})
}

fn context(work_dir: &Path, desired: Value) -> StepContext {
    StepContext {
        plan: "p".into(),
        plan_uid: "uid-p".into(),
        operation: Operation::Trigger,
        entity: "migrate".into(),
        desired,
        work_dir: work_dir.to_owned(),
        env: BTreeMap::new(),
        timeout: Duration::from_secs(60),
    }
}

async fn run(ctx: &StepContext) -> (Diff, Result<Applied, ExecutorError>) {
    let job = executor();
    let diff = job.plan(ctx).await.expect("plan");
    let applied = job.apply(ctx, &diff).await;
    (diff, applied)
}

#[tokio::test]
async fn steps_run_in_order_in_the_work_dir_with_only_their_environment() {
    let work = tempfile::tempdir().unwrap();
    let mut ctx = context(
        work.path(),
        action(
            json!([
                {"name": "write", "command": "echo hello > result.txt && echo wrote"},
                {"name": "read", "script": "test \"$GREETING\" = hi\ncat result.txt\necho home=$HOME\nenv | sort\ntest \"$TOKEN\" = resolved-secret && echo token-received\necho \"$TOKEN\" | base64",
                 "env": {"GREETING": "hi", "TOKEN": "${outpost-secret:api_token}"}},
                {"name": "other", "command": "env | grep -c OUTPOST_SECRET_ || echo no-secrets-here"}
            ]),
            false,
        ),
    );
    ctx.env = BTreeMap::from([
        ("AWS_SESSION_TOKEN".to_owned(), "role-creds".to_owned()),
        (
            outpost_runner::secrets::env_name("api_token"),
            "resolved-secret".to_owned(),
        ),
        (
            outpost_runner::secrets::env_name("unreferenced"),
            "not-for-steps".to_owned(),
        ),
    ]);
    let (diff, applied) = run(&ctx).await;
    assert_eq!(diff.input, PolicyInput::Plan);
    assert!(diff.changes);
    assert_eq!(diff.summary, "3 steps to run");
    assert_eq!(
        diff.document["steps"][0]["command"],
        "echo hello > result.txt && echo wrote"
    );
    assert_eq!(
        diff.document["steps"][1]["env"]["TOKEN"],
        "${outpost-secret:api_token}"
    );
    let applied = applied.unwrap();
    let dir = job_dir(work.path());
    assert_eq!(
        std::fs::read_to_string(dir.join("result.txt")).unwrap(),
        "hello\n"
    );
    let log = &applied.log;
    assert!(
        log.contains("== step write ==\nwrote\n== step write exited with code 0 =="),
        "{log}"
    );
    assert!(
        log.contains(&format!("hello\nhome={}\n", dir.display())),
        "{log}"
    );
    // The step got the secret and the role's credentials, and the log that goes to the
    // control plane shows neither, in any encoding.
    assert!(log.contains("token-received"), "{log}");
    assert!(log.contains("AWS_SESSION_TOKEN=***"), "{log}");
    assert!(log.contains("TOKEN=***"), "{log}");
    assert!(!log.contains("resolved-secret"), "{log}");
    assert!(!log.contains("cmVzb2x2ZWQtc2VjcmV0"), "{log}");
    assert!(!log.contains("role-creds"), "{log}");
    // Steps get only the secrets their env references, never the Plan's others.
    assert!(!log.contains("OUTPOST_SECRET_"), "{log}");
    assert!(!log.contains("not-for-steps"), "{log}");
    assert!(log.contains("no-secrets-here"), "{log}");
    // Nothing of the runner's own environment leaks in.
    assert!(!log.contains("CARGO"), "{log}");
    let steps = &applied.outputs["steps"];
    assert_eq!(steps[0]["name"], "write");
    assert_eq!(steps[1]["name"], "read");
    assert_eq!(steps[1]["exitCode"], 0);
    assert_eq!(steps[1]["outputTruncated"], false);
    // A job leaves no live state: observe gives back what was applied.
    let job = executor();
    let observed = job.observe(&ctx, &applied.last_applied).await.unwrap();
    assert_eq!(observed, applied.last_applied);
}

#[tokio::test]
async fn job_components_run_their_command_and_teardown_runs_nothing() {
    let work = tempfile::tempdir().unwrap();
    let mut ctx = context(
        work.path(),
        json!({"app": "shopfront", "type": "job", "job": {
            "image": "ghcr.io/acme/seed:1",
            "command": ["/bin/sh", "-c", "echo seeded $LEVEL $PASSWORD"],
            "env": {"LEVEL": "full", "PASSWORD": "${outpost-secret:db_password}"}
        }}),
    );
    ctx.operation = Operation::Deploy;
    ctx.entity = "seed".into();
    ctx.env = BTreeMap::from([(
        outpost_runner::secrets::env_name("db_password"),
        "pw".to_owned(),
    )]);
    let (diff, applied) = run(&ctx).await;
    assert_eq!(diff.document["kind"], "job");
    assert_eq!(diff.document["image"], "ghcr.io/acme/seed:1");
    assert_eq!(diff.summary, "1 step to run");
    let applied = applied.unwrap();
    // A value shorter than 4 characters is not masked (it would mangle every log).
    assert!(applied.log.contains("seeded full pw"), "{}", applied.log);
    assert_eq!(applied.outputs["steps"][0]["name"], "seed");

    // A missing secret fails before anything runs.
    ctx.env.clear();
    let err = format!("{:#}", run(&ctx).await.1.unwrap_err());
    assert!(err.contains("\"db_password\""), "{err}");

    ctx.operation = Operation::Teardown;
    ctx.desired = json!({"component": "seed"});
    let (diff, applied) = run(&ctx).await;
    assert!(!diff.changes);
    assert_eq!(diff.summary, "0 steps to run");
    assert!(applied.unwrap().log.is_empty());
}

#[tokio::test]
async fn apply_refuses_a_diff_of_other_steps() {
    let work = tempfile::tempdir().unwrap();
    let ctx = context(
        work.path(),
        action(json!([{"name": "a", "command": "true"}]), false),
    );
    let job = executor();
    let mut diff = job.plan(&ctx).await.unwrap();
    diff.document["steps"][0]["command"] = json!("rm -rf /");
    let err = job.apply(&ctx, &diff).await.unwrap_err().to_string();
    assert!(err.contains("not the plan of this desired state"), "{err}");
}

/// Files laid out as a real runner's (`settings.rs`, `identity.rs`, `journal.rs`,
/// `audit.rs`, terraform's work dir, `outpost up`'s token file, `--secrets-dir`): the
/// state dir 0700, the work dirs next to it ([`outpost_runner::work_dirs`]).
struct RunnerLayout {
    _root: tempfile::TempDir,
    state: std::path::PathBuf,
    work: std::path::PathBuf,
    refused: Vec<std::path::PathBuf>,
    secrets: std::path::PathBuf,
}

fn runner_layout() -> RunnerLayout {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    outpost_api::secret_file::private_dir(&state).unwrap();
    let work = outpost_runner::settings::default_work_dir(&state);
    outpost_runner::work_dirs::prepare(&state, &work).unwrap();
    let secrets = root.path().join("secrets");
    let db = outpost_runner::work_dirs::entity(&work, "component", "db").unwrap();
    let files = [
        state.join(outpost_runner::identity::KEY_FILE),
        state.join(outpost_runner::journal::JOURNAL_FILE),
        state.join(outpost_runner::audit::AUDIT_FILE),
        db.join("module/terraform.tfstate"),
        secrets.join("db_password"),
        root.path().join("token"),
    ];
    for file in &files {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, "runner-private-bytes\n").unwrap();
    }
    RunnerLayout {
        state,
        work,
        refused: files.into(),
        secrets,
        _root: root,
    }
}

mod layout;
mod sandbox;
