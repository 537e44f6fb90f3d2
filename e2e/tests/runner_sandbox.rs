//! The real runner (`outpost-runner` against a real `outpost server`) runs an Action
//! step, with network, that tries to reach what the runner keeps: its signing key, a
//! token file, its journal, another component's terraform state, the secrets dir, the
//! runner's own process (whose environment holds its token), and a stand-in for the
//! instance metadata service. Each attempt fails, the Plan's log shows the refusals,
//! ordinary outbound traffic still works, and the runner's next Plan succeeds.
//!
//! The stand-in: this machine has no 169.254.169.254, so the test listens on a port
//! of the host's loopback, lets steps reach the host's loopback
//! (`--sandbox-host-loopback`: as 10.0.2.2 through the relay) and adds that one port to
//! `--sandbox-blocked-address` after the default metadata addresses. A second port,
//! not blocked, answers: that is the outbound traffic that keeps working.

use std::path::Path;
use std::process::Stdio;

use kube_client::api::Api;
use outpost_api::{Plan, PlanPhase};
use outpost_testing::job_plans::{
    approved_action_plan, approved_job_plan, install_with_token, runner_command, step_runs,
};
use outpost_testing::{Backend, ControlPlane, Process, eventually};
use serde_json::json;
use tokio::io::AsyncWriteExt as _;

/// The final phase and log of Plan `name`.
async fn finished(plans: &Api<Plan>, name: &str) -> (PlanPhase, String, String) {
    eventually(120, &format!("Plan {name} to finish"), async || {
        let status = plans.get(name).await.ok()?.status?;
        let phase = status.phase.filter(|p| p.is_terminal())?;
        Some((
            phase,
            status.log.unwrap_or_default(),
            status.message.unwrap_or_default(),
        ))
    })
    .await
}

/// Writes `text` to `path`, creating its directory.
fn plant(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_reaches_none_of_the_runners_secrets_nor_the_metadata_stand_in_and_the_runner_goes_on()
 {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let token = install_with_token(&cp).await;
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let secrets = root.path().join("secrets");
    let token_file = root.path().join("etc/outpost/runner-token");
    let tfstate = outpost_e2e::work_dirs(&state).join("component-db/module/terraform.tfstate");
    plant(&secrets.join("db_password"), "runner-private-secret\n");
    plant(&token_file, &token);
    plant(&tfstate, "{\"runner-private-state\": true}\n");

    // The metadata stand-in (blocked) and an ordinary service (reachable), on the
    // host's loopback.
    let metadata = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metadata_port = metadata.local_addr().unwrap().port();
    let service_port = service.local_addr().unwrap().port();
    let metadata_reached = tokio::spawn(async move { metadata.accept().await.is_ok() });
    let served = tokio::spawn(async move {
        let (mut stream, _) = service.accept().await.unwrap();
        stream.write_all(b"outbound-ok\n").await.unwrap();
    });

    let mut runner = runner_command(&cp.url, &cp.tls.ca, &token, &state);
    runner
        .arg("--secrets-dir")
        .arg(&secrets)
        .arg("--sandbox-host-loopback")
        .arg("--sandbox-blocked-address")
        .arg(format!(
            "169.254.169.254,fd00:ec2::254,10.0.2.2:{metadata_port}"
        ))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let _runner = Process::new(runner.spawn().expect("outpost-runner starts"));

    let key = state.join(outpost_runner::identity::KEY_FILE);
    let journal = state.join(outpost_runner::journal::JOURNAL_FILE);
    let files = [&key, &token_file, &journal, &tfstate];
    // `"LEA""KED"`: the step's own command line (which it lists) does not say LEAKED.
    let mut script = String::new();
    for file in files {
        script.push_str(&format!("cat {} && echo \"LEA\"\"KED\"\n", file.display()));
    }
    script.push_str(&format!(
        "ls {} && echo \"LEA\"\"KED\"\n",
        secrets.display()
    ));
    script.push_str(&format!(
        "bash -c 'exec 3<>/dev/tcp/10.0.2.2/{metadata_port}' && echo \"LEA\"\"KED\"\n"
    ));
    script.push_str(&format!(
        "bash -c 'exec 3<>/dev/tcp/10.0.2.2/{service_port} && head -n1 <&3'\n"
    ));
    // Every process the step can see, with its command line and environment.
    script.push_str(
        "for p in /proc/[0-9]*; do echo \"process ${p#/proc/}: $(tr '\\0' ' ' < $p/cmdline)\"; \
         tr '\\0' '\\n' < $p/environ; done\n",
    );
    script.push_str("ip rule; ip -6 rule\n");
    approved_action_plan(
        &plans,
        "snoop",
        "snoop",
        json!([{"name": "snoop", "command": script}]),
        true,
    )
    .await;
    let (phase, log, message) = finished(&plans, "snoop").await;
    assert_eq!(phase, PlanPhase::Succeeded, "{message}\n{log}");

    // The runner's files exist; the step could not read them.
    for file in files {
        assert!(file.exists(), "{} was never there", file.display());
        let refusal = format!("cat: {}: No such file or directory", file.display());
        assert!(log.contains(&refusal), "{refusal}\n{log}");
    }
    assert!(
        log.contains(&format!(
            "ls: cannot access '{}': No such file or directory",
            secrets.display()
        )),
        "{log}"
    );
    // The stand-in is refused by the step's kernel; the ordinary service answers.
    assert!(
        log.contains(&format!(
            "/dev/tcp/10.0.2.2/{metadata_port}: Permission denied"
        )),
        "{log}"
    );
    assert!(!metadata_reached.is_finished(), "the stand-in was reached");
    assert!(log.contains("outbound-ok"), "{log}");
    served.await.unwrap();
    // The rules the step lives under: the real metadata addresses (the default) and
    // the stand-in's port.
    for rule in [
        "from all to 169.254.169.254 prohibit",
        "from all to fd00:ec2::254 prohibit",
        &format!("from all to 10.0.2.2 ipproto ipproto-6 dport {metadata_port} prohibit"),
    ] {
        assert!(log.contains(rule), "{rule}\n{log}");
    }
    // The step sees only its own processes: not the runner's, whose environment holds
    // the token.
    assert!(log.contains("process 1: bwrap"), "{log}");
    assert!(!log.contains("outpost-runner"), "{log}");
    assert!(!log.contains(&token), "the token reached the step\n{log}");
    for private in [
        "LEAKED",
        "runner-private-secret",
        "runner-private-state",
        "OUTPOST_RUNNER_TOKEN",
    ] {
        assert!(!log.contains(private), "{private}\n{log}");
    }

    // The runner goes on: its next Plan succeeds.
    approved_job_plan(&plans, "after").await;
    let (phase, _, message) = finished(&plans, "after").await;
    assert_eq!(phase, PlanPhase::Succeeded, "{message}");
    assert_eq!(
        step_runs(&outpost_e2e::work_dirs(&state)).get("after"),
        Some(&1)
    );

    // A runner run as root (as here, and as the install stack's) runs steps as another
    // host uid: what the step wrote is 65534's; the state dir stays the runner's, 0700,
    // apart from the work dirs (0711).
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::MetadataExt as _;
        let works = outpost_e2e::work_dirs(&state);
        let written = std::fs::metadata(works.join("component-counter/job/applies.log")).unwrap();
        assert_eq!((written.uid(), written.gid()), (65534, 65534));
        let state_dir = std::fs::metadata(&state).unwrap();
        assert_eq!((state_dir.uid(), state_dir.mode() & 0o777), (0, 0o700));
        assert_eq!(std::fs::metadata(&works).unwrap().mode() & 0o777, 0o711);
    }
}
