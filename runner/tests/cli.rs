//! The `outpost-runner` binary, run as an operator would.

use std::process::Command;

fn outpost_runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_outpost-runner"))
}

#[test]
fn help_explains_the_runner_and_lists_the_flags_of_outpost_runner() {
    let output = outpost_runner().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{help}");
    assert!(help.starts_with("Outpost's runner"), "{help}");
    assert!(help.contains("It listens on no port"), "{help}");
    assert!(
        help.contains("Several URLs, the flag repeated or comma-separated"),
        "{help}"
    );
    assert!(help.contains("Usage: outpost-runner [OPTIONS]"), "{help}");
    for flag in [
        "--server <SERVER>",
        "--token-secret <ARN>",
        "--certificate-authority",
        "--install <INSTALL>",
        "--name <NAME>",
        "--state-dir <STATE_DIR>",
        "--kubeconfig",
        "--policies",
        "--terraform",
        "--bwrap",
        "--secrets-dir",
        "--work-dir",
        "--sandbox-uid",
        "--heartbeat-seconds",
        "OUTPOST_RUNNER_TOKEN",
    ] {
        assert!(help.contains(flag), "no {flag} in:\n{help}");
    }
    let version = outpost_runner().arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("outpost-runner {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn missing_flags_are_named_and_nothing_starts() {
    let output = outpost_runner()
        .args(["--install", "default/acme"])
        .env_remove("OUTPOST_RUNNER_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for flag in ["--server <SERVER>", "--state-dir <STATE_DIR>"] {
        assert!(stderr.contains(flag), "{flag} not named in:\n{stderr}");
    }
}

/// The runner of install `default/acme` with state dir `state`, its server unreachable.
fn outpost_runner_of(state: &std::path::Path) -> Command {
    let mut command = outpost_runner();
    command
        .args([
            "--server",
            "https://127.0.0.1:1",
            "--install",
            "default/acme",
        ])
        .arg("--state-dir")
        .arg(state);
    command
}

/// The runner started with the given token settings (`args`, `env`), every other flag
/// valid: its exit code and stderr. Its state dir must not be created.
fn start_with_token(args: &[&str], env: Option<&str>) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut command = outpost_runner_of(&state);
    command.args(args).env_remove("OUTPOST_RUNNER_TOKEN");
    if let Some(token) = env {
        command.env("OUTPOST_RUNNER_TOKEN", token);
    }
    let output = command.output().unwrap();
    assert!(!state.exists(), "the runner started without a usable token");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_token_is_never_taken_on_the_command_line() {
    let (code, stderr) = start_with_token(&["--token", "opr_default_acme_0123456789"], None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unexpected argument '--token'"), "{stderr}");
    assert!(!stderr.contains("opr_default_acme_0123456789"), "{stderr}");
}

#[test]
fn without_a_token_or_with_two_nothing_starts() {
    let (code, stderr) = start_with_token(&[], None);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no runner token: pass --token-secret")
            && stderr.contains("or set OUTPOST_RUNNER_TOKEN"),
        "{stderr}"
    );
    let (code, stderr) = start_with_token(
        &["--token-secret", "outpost-runner-token/default/acme"],
        Some("opr_default_acme_0123456789"),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("both --token-secret and OUTPOST_RUNNER_TOKEN are set"),
        "{stderr}"
    );
    let (code, stderr) = start_with_token(&[], Some("opr_default acme"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("OUTPOST_RUNNER_TOKEN does not hold a runner token"),
        "{stderr}"
    );
    assert!(!stderr.contains("opr_default acme"), "{stderr}");
}

/// Steps see the system directories: work dirs under one would show every entity's
/// (terraform state among them) to every step. Refused at start, before anything runs.
#[test]
fn a_work_dir_steps_could_read_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let work = "/usr/outpost-runner-test-work";
    let output = outpost_runner_of(&dir.path().join("state"))
        .args(["--work-dir", work])
        .env("OUTPOST_RUNNER_TOKEN", "opr_default_acme_0123456789")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--work-dir {work} is under /usr, which job steps can read"
        )),
        "{stderr}"
    );
    assert!(!std::path::Path::new(work).exists());
}
