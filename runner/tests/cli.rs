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
        "--token <TOKEN>",
        "--certificate-authority",
        "--install <INSTALL>",
        "--name <NAME>",
        "--state-dir <STATE_DIR>",
        "--kubeconfig",
        "--policies",
        "--terraform",
        "--bwrap",
        "--secrets-dir",
        "--heartbeat-seconds",
        "[env: OUTPOST_RUNNER_TOKEN]",
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
    for flag in [
        "--server <SERVER>",
        "--token <TOKEN>",
        "--state-dir <STATE_DIR>",
    ] {
        assert!(stderr.contains(flag), "{flag} not named in:\n{stderr}");
    }
}
