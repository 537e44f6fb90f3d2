use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::Lines;

/// The machine's `kubectl`, pointed at one kubeconfig.
pub struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
}

/// What a kubectl run printed.
#[derive(Debug)]
pub struct Run {
    /// Exit success.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Kubectl {
    pub(crate) fn new(kubeconfig: PathBuf, scratch: &Path) -> Self {
        Kubectl {
            kubeconfig,
            home: scratch.join("kubectl-home"),
        }
    }

    /// A `kubectl` command with this kubeconfig and a private cache directory.
    pub fn command(&self) -> Command {
        let mut command = Command::new("kubectl");
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env("KUBECACHEDIR", self.home.join("cache"))
            .stdin(Stdio::null());
        command
    }

    /// Runs `kubectl ARGS...` to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        let output: Output = self.command().args(args).output().expect("kubectl runs");
        Run {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs `kubectl ARGS...` and panics with its output unless it succeeds.
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert!(
            run.ok,
            "kubectl {} failed:\n{}\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    /// `kubectl apply -f PATH` (a file or a directory); panics unless it succeeds.
    pub fn apply(&self, path: &Path) -> String {
        let path = path.to_str().expect("a UTF-8 path");
        self.ok(&["apply", "-f", path])
    }

    /// Runs `kubectl ARGS...` every 100 ms until it succeeds printing what `want` accepts,
    /// and returns that; panics with the last run after `secs`.
    pub fn eventually(&self, secs: u64, args: &[&str], want: impl Fn(&str) -> bool) -> String {
        let mut last = None;
        crate::wait_for_blocking(Duration::from_secs(secs), || {
            let run = self.run(args);
            if run.ok && want(&run.stdout) {
                return Some(run.stdout);
            }
            last = Some(run);
            None
        })
        .unwrap_or_else(|| {
            panic!(
                "kubectl {} never matched within {secs} s; last: {last:?}",
                args.join(" ")
            )
        })
    }

    /// `kubectl edit ARGS...` with a `sed -i` script as the editor (what a person's edit
    /// of the object's YAML does); panics unless it succeeds and returns what it printed.
    pub fn edit(&self, sed: &str, args: &[&str]) -> String {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(&self.home).expect("kubectl's home directory");
        let editor = self.home.join("editor.sh");
        std::fs::write(&editor, format!("#!/bin/sh\nsed -i '{sed}' \"$1\"\n"))
            .expect("the editor script");
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755))
            .expect("the editor script is executable");
        let edited = self
            .command()
            .env("KUBE_EDITOR", &editor)
            .env("EDITOR", &editor)
            .arg("edit")
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(
            edited.status.success(),
            "kubectl edit {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&edited.stderr)
        );
        String::from_utf8_lossy(&edited.stdout).into_owned()
    }

    /// `kubectl patch TARGET... --type merge -p PATCH` (a JSON merge patch); panics unless
    /// it succeeds.
    pub fn merge_patch(&self, target: &[&str], patch: &str) -> String {
        let mut args = vec!["patch"];
        args.extend_from_slice(target);
        args.extend(["--type", "merge", "-p", patch]);
        self.ok(&args)
    }

    /// `kubectl get TARGET... -o jsonpath=PATH`; panics unless it succeeds.
    pub fn jsonpath(&self, target: &[&str], path: &str) -> String {
        let output = format!("jsonpath={path}");
        let mut args = vec!["get"];
        args.extend_from_slice(target);
        args.extend(["-o", &output]);
        self.ok(&args)
    }

    /// Starts `kubectl ARGS...` (a `get -w`) and reads what it prints, line by line.
    pub fn watch(&self, args: &[&str]) -> Watch {
        let mut child = self
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let stdout = child.stdout.take().expect("kubectl's stdout is piped");
        Watch {
            child,
            lines: Lines::read(stdout),
        }
    }
}

/// A running `kubectl get -w` ([`Kubectl::watch`]); killed when dropped.
pub struct Watch {
    child: Child,
    lines: Lines,
}

impl Watch {
    /// Reads printed lines until one satisfies `want` and returns it; panics naming `what`
    /// and every line read so far when none does within `secs` or kubectl exits.
    pub fn until(&mut self, secs: u64, what: &str, want: impl Fn(&str) -> bool) -> String {
        self.lines.until(secs, want).unwrap_or_else(|e| {
            panic!(
                "kubectl watch printed no {what} ({e}); saw {:?}",
                self.lines.printed()
            )
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
