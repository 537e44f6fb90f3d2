//! The processes `outpost up` supervises: started with their output in a log file,
//! stopped with SIGTERM (then SIGKILL after a grace period), killed if dropped.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};

/// How long a child has to exit after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(10);

/// A child process of `outpost up`.
pub struct Supervised {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Supervised {
    /// Starts `command` with standard output and error appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> anyhow::Result<Supervised> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            // A backstop: if `outpost up` unwinds without stopping it, the child dies too.
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start the {name}"))?;
        Ok(Supervised {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        })
    }

    /// The child's process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// How the child exited, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Where the child's output goes.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last lines of the child's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Sends SIGTERM and waits for the child to exit; kills it after a grace period.
    pub async fn stop(mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(GRACE, self.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "outpost: the {} did not stop within {} s after SIGTERM; killing it",
                    self.name,
                    GRACE.as_secs()
                );
                let _ = self.child.kill().await;
            }
        }
    }
}

/// `name` on `PATH`, as an absolute path.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}
