//! The processes `outpost up` supervises: started with their output in a log file,
//! stopped with SIGTERM (then SIGKILL after a grace period), killed if dropped. Each
//! keeps its pid in a file, so that a run after an `outpost up` that was killed
//! outright (SIGKILL, no chance to stop its children) stops what it left running.

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
    pid_file: PathBuf,
}

impl Supervised {
    /// Starts `command` with standard output and error appended to `log`, its pid in
    /// `pid_file`. A process an earlier run left running (the pid in `pid_file`, the
    /// same program on the same directory) is stopped first.
    pub async fn spawn(
        name: &str,
        mut command: Command,
        log: &Path,
        pid_file: &Path,
    ) -> anyhow::Result<Supervised> {
        stop_leftover(name, &command, pid_file).await;
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
        if let Some(pid) = child.id() {
            std::fs::write(pid_file, format!("{pid}\n"))
                .with_context(|| format!("cannot write {}", pid_file.display()))?;
        }
        Ok(Supervised {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
            pid_file: pid_file.to_owned(),
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
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// Stops the process named in `pid_file` if it is `command`'s program run on the same
/// directory (its command line names `pid_file`'s directory; other flags, such as the
/// server's address, may differ between runs): what an earlier `outpost up` left
/// running when it was killed.
async fn stop_leftover(name: &str, command: &Command, pid_file: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
    else {
        return;
    };
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return;
    };
    let mut args = cmdline.split(|&b| b == 0);
    let program = command.as_std().get_program().as_encoded_bytes();
    let dir = pid_file
        .parent()
        .map(|d| d.as_os_str().as_encoded_bytes().to_vec())
        .unwrap_or_default();
    let same_program = args.next() == Some(program);
    let same_dir = args.any(|arg| arg.windows(dir.len()).any(|w| w == dir.as_slice()));
    if !(same_program && same_dir && running(pid)) {
        return;
    }
    let Some(process) = rustix::process::Pid::from_raw(pid) else {
        return;
    };
    println!("outpost: stopping the {name} an earlier run left running (pid {pid})");
    let _ = rustix::process::kill_process(process, rustix::process::Signal::TERM);
    let deadline = tokio::time::Instant::now() + GRACE;
    while running(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if running(pid) {
        let _ = rustix::process::kill_process(process, rustix::process::Signal::KILL);
        // Gone before the next one starts: it may still hold the port it listens on.
        let deadline = tokio::time::Instant::now() + GRACE;
        while running(pid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether process `pid` exists and is not a zombie (an orphan that exited but that
/// its new parent has not reaped yet).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat[stat.rfind(')')? + 2..].chars().next()?;
            Some(state != 'Z')
        })
        .unwrap_or(false)
}

/// `name` on `PATH`, as an absolute path.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}
