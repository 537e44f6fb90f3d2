//! What a step can reach of the runner's own files, and the sandbox uid.

use super::*;

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
