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
async fn bubblewrap_can_sandbox_here() {
    executor()
        .check()
        .await
        .expect("bwrap works on this machine");
    let missing = JobExecutor::new("/nonexistent/bwrap");
    let err = missing.check().await.unwrap_err().to_string();
    assert!(
        err.contains("cannot sandbox steps on this machine"),
        "{err}"
    );
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
async fn root_is_read_only_and_a_failing_step_stops_the_run() {
    let work = tempfile::tempdir().unwrap();
    let ctx = context(
        work.path(),
        action(
            json!([
                {"name": "install", "command": "echo trying; touch /usr/outpost-was-here"},
                {"name": "after", "command": "touch after"}
            ]),
            false,
        ),
    );
    let err = run(&ctx).await.1.unwrap_err();
    assert!(matches!(err, ExecutorError::Tool(_)), "{err:#}");
    let err = format!("{err:#}");
    assert!(
        err.starts_with("step install failed with exit code 1"),
        "{err}"
    );
    assert!(err.contains("trying"), "{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!Path::new("/usr/outpost-was-here").exists());
    assert!(!job_dir(work.path()).join("after").exists());
}

#[tokio::test]
async fn tmp_is_private() {
    let host_tmp = tempfile::Builder::new()
        .prefix("outpost-host-")
        .tempdir_in("/tmp")
        .unwrap();
    let host_file = host_tmp.path().join("host-only");
    std::fs::write(&host_file, "x").unwrap();
    let leaked = format!("/tmp/outpost-job-leak-{}", std::process::id());
    let work = tempfile::tempdir().unwrap();
    let ctx = context(
        work.path(),
        action(
            json!([{"name": "tmp", "command": format!(
                "test ! -e {} && echo inside > {leaked} && cat {leaked}", host_file.display()
            )}]),
            false,
        ),
    );
    let applied = run(&ctx).await.1.unwrap();
    assert!(applied.log.contains("inside"), "{}", applied.log);
    assert!(
        !Path::new(&leaked).exists(),
        "the sandbox's /tmp reached the host"
    );
}

/// A job executor whose steps with network reach the host's loopback (as 10.0.2.2) and
/// have `blocked` refused, besides the metadata service.
fn executor_blocking(blocked: &str) -> JobExecutor {
    let mut network = NetworkSettings {
        host_loopback: true,
        ..NetworkSettings::default()
    };
    network.blocked.push(blocked.parse().unwrap());
    JobExecutor::sandboxed_by(
        Sandbox::new(std::env::var("OUTPOST_BWRAP").unwrap_or_else(|_| "bwrap".into()))
            .with_network(network),
    )
}

#[tokio::test]
async fn network_only_when_the_action_declares_it_and_never_to_blocked_addresses() {
    let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let blocked = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (port, blocked_port) = (
        open.local_addr().unwrap().port(),
        blocked.local_addr().unwrap().port(),
    );
    let accepted = tokio::spawn(async move { open.accept().await.is_ok() });
    let reached_blocked = tokio::spawn(async move { blocked.accept().await.is_ok() });
    let connect = |address: &str, port: u16| {
        format!("bash -c 'echo hi > /dev/tcp/{address}/{port}' && echo connected {port}\n")
    };
    let job = executor_blocking(&format!("10.0.2.2:{blocked_port}"));
    let work = tempfile::tempdir().unwrap();
    let run = async |desired: Value| {
        let ctx = context(work.path(), desired);
        let diff = job.plan(&ctx).await.expect("plan");
        job.apply(&ctx, &diff).await
    };

    let offline = json!([{"name": "connect", "command": connect("10.0.2.2", port)}]);
    let err = format!("{:#}", run(action(offline, false)).await.unwrap_err());
    assert!(
        err.starts_with("step connect failed with exit code 1"),
        "{err}"
    );
    assert!(!accepted.is_finished());

    // With network: the host (here its loopback, through the relay) is reached, the
    // blocked port is refused by the step's own kernel, and the rules the step sees
    // include the metadata service's addresses.
    let script = format!(
        "{}{} || echo refused {blocked_port}\nip rule; ip -6 rule\nip rule del to 169.254.169.254 || echo kept",
        connect("10.0.2.2", port),
        connect("10.0.2.2", blocked_port).trim_end(),
    );
    let online = json!([{"name": "connect", "command": script}]);
    let applied = run(action(online, true)).await.unwrap();
    let log = &applied.log;
    assert!(log.contains(&format!("connected {port}")), "{log}");
    assert!(accepted.await.unwrap());
    assert!(
        log.contains(&format!(
            "/dev/tcp/10.0.2.2/{blocked_port}: Permission denied"
        )),
        "{log}"
    );
    assert!(log.contains(&format!("refused {blocked_port}")), "{log}");
    assert!(
        !reached_blocked.is_finished(),
        "the blocked port was reached"
    );
    for rule in [
        "from all to 169.254.169.254 prohibit",
        "from all to fd00:ec2::254 prohibit",
        // TCP (6) and UDP (17).
        &format!("from all to 10.0.2.2 ipproto ipproto-6 dport {blocked_port} prohibit"),
        &format!("from all to 10.0.2.2 ipproto ipproto-17 dport {blocked_port} prohibit"),
    ] {
        assert!(log.contains(rule), "{rule}: {log}");
    }
    assert!(
        log.contains("Operation not permitted") && log.contains("kept"),
        "{log}"
    );

    // Without host loopback (the default), the host's loopback is out of reach.
    let default =
        JobExecutor::new(std::env::var("OUTPOST_BWRAP").unwrap_or_else(|_| "bwrap".into()));
    let ctx = context(
        work.path(),
        action(
            json!([{"name": "connect", "command": connect("10.0.2.2", port)}]),
            true,
        ),
    );
    let diff = default.plan(&ctx).await.unwrap();
    let err = format!("{:#}", default.apply(&ctx, &diff).await.unwrap_err());
    assert!(err.contains("Network is unreachable"), "{err}");
}

/// Whether a live (not zombie) process runs with exactly `cmdline` (NUL-separated).
fn process_running(cmdline: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let path = entry.path();
        let same = std::fs::read(path.join("cmdline")).is_ok_and(|c| c == cmdline.as_bytes());
        same && std::fs::read_to_string(path.join("stat"))
            .is_ok_and(|s| !matches!(s.rsplit(") ").next().map(|s| &s[..1]), Some("Z" | "X")))
    })
}

#[tokio::test]
async fn timeout_kills_the_sandbox_and_everything_in_it() {
    let seconds = format!("317.{}", std::process::id());
    let work = tempfile::tempdir().unwrap();
    let mut ctx = context(
        work.path(),
        action(
            json!([{"name": "hang", "command": format!("echo waiting; sleep {seconds} & wait")}]),
            false,
        ),
    );
    ctx.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let err = run(&ctx).await.1.unwrap_err();
    assert!(matches!(err, ExecutorError::TimedOut(_)), "{err:#}");
    let err = format!("{err:#}");
    assert!(
        err.starts_with("step hang was killed: the timeout of 2s passed"),
        "{err}"
    );
    assert!(err.contains("waiting"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let cmdline = format!("sleep\0{seconds}\0");
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_running(&cmdline) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !process_running(&cmdline),
        "the step's sleep survived the timeout"
    );

    // The action's own timeoutSeconds applies too.
    let mut desired = action(json!([{"name": "hang", "command": "sleep 30"}]), false);
    desired["timeoutSeconds"] = json!(1);
    let err = format!(
        "{:#}",
        run(&context(work.path(), desired)).await.1.unwrap_err()
    );
    assert!(
        err.starts_with("step hang was killed: the timeout of 1s passed"),
        "{err}"
    );
}

#[tokio::test]
async fn output_is_bounded() {
    let work = tempfile::tempdir().unwrap();
    let ctx = context(
        work.path(),
        action(
            json!([{"name": "chatty", "command": "head -c 300000 /dev/zero | tr '\\0' a; echo; echo END"}]),
            false,
        ),
    );
    let applied = run(&ctx).await.1.unwrap();
    assert!(applied.log.len() < 66 * 1024, "{}", applied.log.len());
    assert!(applied.log.contains("bytes truncated ...]"));
    assert!(
        applied
            .log
            .contains("END\n== step chatty exited with code 0 ==")
    );
    assert_eq!(applied.outputs["steps"][0]["outputTruncated"], true);
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
    let work = outpost_e2e::work_dirs(&state);
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

#[tokio::test]
async fn a_step_cannot_read_what_the_runner_keeps_and_the_runner_goes_on() {
    let layout = runner_layout();
    let work = outpost_runner::work_dirs::entity(&layout.work, "action", "migrate").unwrap();
    let mut script = String::new();
    for file in &layout.refused {
        script.push_str(&format!("cat {} && echo LEAKED\n", file.display()));
    }
    for dir in [
        layout.secrets.to_str().unwrap(),
        "/etc/systemd",
        "/root",
        "/home",
    ] {
        script.push_str(&format!("ls {dir} && echo LEAKED\n"));
    }
    // The directories above the work dir exist, empty but for the way down to it; the
    // state dir is not on the way.
    let works = layout.work.display();
    script.push_str(&format!("echo work-has=$(ls -A {works} | tr '\\n' ,)\n"));
    script.push_str(&format!("ls {} && echo LEAKED\n", layout.state.display()));
    script.push_str("echo uid=$(id -u)\n");
    let ctx = context(
        &work,
        action(json!([{"name": "snoop", "command": script}]), false),
    );
    let applied = run(&ctx).await.1.unwrap();
    let log = &applied.log;
    assert!(!log.contains("LEAKED"), "{log}");
    assert!(!log.contains("runner-private-bytes"), "{log}");
    for file in &layout.refused {
        let refusal = format!("cat: {}: No such file or directory", file.display());
        assert!(log.contains(&refusal), "{refusal}: {log}");
    }
    assert!(log.contains(&format!(
        "ls: cannot access '{}': No such file or directory",
        layout.secrets.display()
    )));
    assert!(log.contains("work-has=action-migrate,"), "{log}");
    assert!(
        log.contains(&format!(
            "ls: cannot access '{}': No such file or directory",
            layout.state.display()
        )),
        "{log}"
    );
    assert!(
        log.contains("ls: cannot access '/root': No such file"),
        "{log}"
    );
    // The step runs as nobody inside its user namespace.
    assert!(log.contains("uid=65534"), "{log}");

    // The runner's files are intact and the next Plan runs.
    assert_eq!(
        std::fs::read_to_string(&layout.refused[0]).unwrap(),
        "runner-private-bytes\n"
    );
    let next = context(
        &work,
        action(
            json!([{"name": "next", "command": "echo fine > next.txt && cat next.txt"}]),
            false,
        ),
    );
    let applied = run(&next).await.1.unwrap();
    assert!(applied.log.contains("fine"), "{}", applied.log);
    assert!(job_dir(&work).join("next.txt").exists());
}

/// A runner run as root (the install stack's, and this test suite's) runs steps as
/// another uid on the host, the sandbox's (65534, no supplementary group): what a step
/// writes in its work dir is that uid's, with or without network, and a file of root's
/// bound into a sandbox by mistake is unreadable to it.
#[tokio::test]
async fn a_root_runners_steps_are_the_sandbox_uid_on_the_host() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let bwrap = std::env::var("OUTPOST_BWRAP").unwrap_or_else(|_| "bwrap".into());
    let sandbox = Sandbox::new(&bwrap);
    let Some(uid) = sandbox.host_uid() else {
        eprintln!("skipped: the runner switches uid only when it runs as root");
        return;
    };
    assert_eq!(uid, 65534, "the default sandbox uid");
    let work = tempfile::tempdir().unwrap();
    for network in [false, true] {
        let script = format!("echo mine > written-{network}");
        let ctx = context(
            work.path(),
            action(json!([{"name": "write", "command": script}]), network),
        );
        run(&ctx).await.1.unwrap();
        let written = job_dir(work.path()).join(format!("written-{network}"));
        let meta = std::fs::metadata(&written).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (uid, uid),
            "{} is the sandbox uid's on the host",
            written.display()
        );
    }
    let dir = job_dir(work.path());
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (uid, 0o700),
        "the job dir"
    );

    // A root-owned 0600 file bound into the sandbox (as if by mistake): the step sees it
    // and cannot read it.
    let private = work.path().join("runner-private");
    std::fs::write(&private, "runner-private-bytes\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let argv = [
        "/bin/sh",
        "-c",
        "cat \"$1\" || echo refused",
        "sh",
        private.to_str().unwrap(),
    ];
    let mut sandboxed = sandbox
        .command(Some(&dir), false, &[Bind::ReadOnly(&private)], &argv)
        .await
        .unwrap();
    sandboxed.command.env("PATH", "/usr/bin:/bin");
    let done = sandboxed
        .run(Duration::from_secs(60), 4096, false)
        .await
        .unwrap();
    assert!(
        !done.output.contains("runner-private-bytes"),
        "{}",
        done.output
    );
    assert!(
        done.output
            .contains(&format!("cat: {}: Permission denied", private.display())),
        "{}",
        done.output
    );
    assert!(done.output.contains("refused"), "{}", done.output);
    assert_eq!(
        std::fs::metadata(&private).unwrap().uid(),
        0,
        "the file stays root's"
    );
}

/// A runner run as root refuses to bind what its sandbox uid cannot reach, naming the
/// directory in the way, instead of bubblewrap failing obscurely.
#[tokio::test]
async fn a_work_dir_the_sandbox_uid_cannot_reach_is_refused_by_name() {
    use std::os::unix::fs::PermissionsExt as _;
    let bwrap = std::env::var("OUTPOST_BWRAP").unwrap_or_else(|_| "bwrap".into());
    if Sandbox::new(&bwrap).host_uid().is_none() {
        eprintln!("skipped: the runner switches uid only when it runs as root");
        return;
    }
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let ctx = context(
        private.path(),
        action(json!([{"name": "a", "command": "touch ran"}]), false),
    );
    let err = format!("{:#}", run(&ctx).await.1.unwrap_err());
    assert!(
        err.contains(&format!(
            "the sandbox's uid 65534 cannot reach {}: {} (owner 0, mode 700)",
            job_dir(private.path()).display(),
            private.path().display()
        )),
        "{err}"
    );
    assert!(!job_dir(private.path()).join("ran").exists());
}
