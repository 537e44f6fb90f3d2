//! The `outpost` binary, run as a user would.

use std::process::{Command, Stdio};

use outpost_testing::{Lines, wait_for_blocking};

fn outpost() -> Command {
    Command::new(env!("CARGO_BIN_EXE_outpost"))
}

/// What one `outpost up` printed until "press Ctrl-C", and the process.
struct Up {
    child: std::process::Child,
    printed: Vec<String>,
    lines: Lines,
}

impl Up {
    /// Starts `outpost up` on `dir` with free ports and reads its output until it is
    /// ready (or fails the test after `secs`).
    fn start(dir: &std::path::Path, secs: u64) -> Up {
        let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests");
        let customer_inputs = concat!(env!("CARGO_MANIFEST_DIR"), "/../customer/inputs");
        let mut command = outpost();
        command
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--cluster-listen",
                "127.0.0.1:0",
                "--manifests",
                manifests,
                "--customer-inputs",
                customer_inputs,
                "--data-dir",
            ])
            .arg(dir);
        Up::spawn(command, secs)
    }

    /// Runs `command` (an `outpost up`) and reads its output until it is ready.
    fn spawn(mut command: Command, secs: u64) -> Up {
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = Lines::read(child.stdout.take().unwrap());
        if let Err(e) = lines.until(secs, |l| l.contains("press Ctrl-C")) {
            let printed = lines.printed().to_vec();
            // Dropping it stops it the way Ctrl-C does, children included.
            drop(Up {
                child,
                printed: Vec::new(),
                lines,
            });
            panic!("outpost up not ready ({e}): {printed:#?}");
        }
        Up {
            child,
            printed: lines.printed().to_vec(),
            lines,
        }
    }

    /// The first word after `prefix` on a printed line.
    fn find(&self, prefix: &str) -> String {
        self.printed
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {:#?}", self.printed))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }

    /// The process ids of the children it says it runs (runner, registries).
    fn children(&self) -> Vec<u32> {
        self.printed
            .iter()
            .filter(|l| {
                l.starts_with("outpost: runner pid ") || l.starts_with("outpost: registry ")
            })
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let at = words.iter().position(|w| *w == "pid").unwrap();
                words[at + 1].parse().unwrap()
            })
            .collect()
    }

    /// SIGINT (what Ctrl-C sends); waits for a clean exit (a minute: it stops its
    /// children within 10 s each) and returns what it printed.
    fn interrupt(mut self) -> Vec<String> {
        Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = wait_for_blocking(std::time::Duration::from_secs(60), || {
            self.child.try_wait().unwrap()
        })
        .unwrap_or_else(|| panic!("outpost up still ran a minute after SIGINT"));
        assert!(status.success(), "outpost up exited with {status}");
        self.lines.rest()
    }
}

impl Drop for Up {
    /// A failed test leaves no `outpost up` behind: SIGINT, so it stops its children,
    /// and SIGKILL if it has not exited after 15 s.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            // Not a failure if it has not exited within the grace period: it is killed.
            let _ = wait_for_blocking(std::time::Duration::from_secs(15), || {
                self.child.try_wait().ok().flatten()
            });
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn help_explains_every_command() {
    let output = outpost().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("up") && help.contains("bench"), "{help}");
    for verb in [
        "status", "stack", "deploy", "trigger", "approve", "deny", "drift", "logs", "audit",
    ] {
        assert!(
            help.lines()
                .any(|l| l.split_whitespace().next() == Some(verb)),
            "{verb} is not in --help:\n{help}"
        );
        let output = outpost().args([verb, "--help"]).output().unwrap();
        assert!(output.status.success(), "{verb} --help");
    }
    let output = outpost().args(["up", "--help"]).output().unwrap();
    let up = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--listen",
        "--data-dir",
        "--cluster-listen",
        "--install",
        "--manifests",
        "--customer-inputs",
        "Ctrl-C",
    ] {
        assert!(up.contains(flag), "{flag} missing:\n{up}");
    }
    let output = outpost().args(["trigger", "--help"]).output().unwrap();
    let trigger = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--install",
        "--role",
        "--wait",
        "--server",
        "--token",
        "--kubeconfig",
        "--namespace",
        "--output",
    ] {
        assert!(trigger.contains(flag), "{flag} missing:\n{trigger}");
    }
    let output = outpost()
        .args(["bench", "store", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("--concurrency"));
}

/// README's walkthrough, run verbatim: every `sh` block of its "Walkthrough" section, in
/// order, as one `bash -e` script, in a directory laid out like the repository (with
/// `manifests/`, `customer/`, and `target/up/` holding the `outpost` this test built) in which
/// `outpost up` runs as `./x up` would start it (its defaults, free ports by environment).
#[test]
fn the_readme_walkthrough_works_verbatim() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme
        .split("\n## Walkthrough\n")
        .nth(1)
        .expect("README has a Walkthrough section")
        .split("\n## ")
        .next()
        .unwrap();
    let blocks: Vec<&str> = section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 5, "walkthrough blocks: {blocks:#?}");
    assert!(
        blocks
            .iter()
            .any(|b| b.contains("kubectl patch install globex"))
    );

    let root = tempfile::tempdir().unwrap();
    let repo = root.path();
    std::os::unix::fs::symlink(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests"),
        repo.join("manifests"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../customer"),
        repo.join("customer"),
    )
    .unwrap();
    std::fs::create_dir(repo.join("target")).unwrap();
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_outpost"))
        .parent()
        .unwrap();
    std::os::unix::fs::symlink(built, repo.join("target/up")).unwrap();
    let home = repo.join("home");
    std::fs::create_dir(&home).unwrap();
    // What the reader does in the editor: spec.replicas from 2 to 5.
    let editor = repo.join("edit-replicas");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^  replicas: 2$/  replicas: 5/' \"$1\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    let mut up = outpost();
    up.arg("up")
        .current_dir(repo)
        .env("OUTPOST_LISTEN", "127.0.0.1:0")
        .env("OUTPOST_CLUSTER_LISTEN", "127.0.0.1:0")
        .env_remove("OUTPOST_DATA_DIR");
    let up = Up::spawn(up, 300);

    let script = format!("set -euo pipefail\nset -x\n{}", blocks.join("\n"));
    let started = std::time::Instant::now();
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(repo)
        .env("HOME", &home)
        .env("KUBE_EDITOR", &editor)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "walkthrough took {:?}\n{stdout}\n{stderr}",
        started.elapsed()
    );
    assert!(output.status.success(), "the walkthrough failed");
    for expected in [
        // The input change reached the stand-in cluster through Plans.
        "shop.globex.example",
        "plan deploy ingress Succeeded",
        // The edit was reported as drift of that field.
        "Drifted",
        "spec.replicas",
        // The action ran.
        "Succeeded",
        // The audit log verifies.
        "events verified",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    let printed = up.interrupt();
    assert!(
        !printed.iter().any(|l| l.contains("panicked")),
        "{printed:#?}"
    );
}

mod bench;
mod up;
