use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
}
