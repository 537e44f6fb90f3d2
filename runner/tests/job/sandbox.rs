//! The bubblewrap sandbox: read-only root, private /tmp, network only when declared, timeouts, bounded output.

use super::*;

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
    let what = "the step's sleep to end (it survived the timeout)";
    outpost_testing::eventually(10, what, async || {
        (!process_running(&cmdline)).then_some(())
    })
    .await;

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
