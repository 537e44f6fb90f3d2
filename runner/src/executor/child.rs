//! Running one child process (terraform, bubblewrap) with a deadline and a bounded
//! capture of its output.
//!
//! The child is the leader of a new process group; on timeout the whole group is
//! killed with `SIGKILL`, so what it started (terraform's providers and provisioners, a
//! shell's children) goes with it.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// Bytes of output kept per child: the tail, behind a truncation marker.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// What a child printed and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Exit status.
    pub status: ExitStatus,
    /// stdout and stderr interleaved as they arrived, bounded (see [`Tail`]); only
    /// stderr when stdout was kept apart.
    pub output: String,
    /// Whether output was dropped to stay within the limit.
    pub truncated: bool,
    /// All of stdout, when [`run`] was asked to keep it (JSON documents); empty
    /// otherwise.
    pub stdout: Vec<u8>,
}

impl Finished {
    /// The exit code, or `128 + signal` when a signal ended the child (as shells do).
    pub fn exit_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        self.status
            .code()
            .or_else(|| self.status.signal().map(|s| 128 + s))
            .unwrap_or(-1)
    }
}

/// Why a child could not be run to completion.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// The program could not be started.
    #[error("cannot start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The deadline passed; the process group was killed.
    #[error("{program} timed out after {after:?} and was killed; last output:\n{output}")]
    TimedOut {
        /// The program.
        program: String,
        /// The timeout.
        after: Duration,
        /// Output up to the kill, bounded.
        output: String,
    },
    /// Reading its output or waiting for it failed.
    #[error("running {program}")]
    Io {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The last `limit` bytes of a stream, and how many were dropped before them.
#[derive(Debug)]
pub struct Tail {
    limit: usize,
    kept: Vec<u8>,
    dropped: u64,
}

impl Tail {
    /// An empty tail keeping at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            kept: Vec::new(),
            dropped: 0,
        }
    }

    /// Appends bytes, dropping the oldest beyond the limit.
    pub fn push(&mut self, bytes: &[u8]) {
        self.kept.extend_from_slice(bytes);
        // Drain in batches so that a chatty child costs amortised O(n).
        if self.kept.len() > self.limit.saturating_mul(2).max(8192) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.kept.len() > self.limit {
            let excess = self.kept.len() - self.limit;
            self.kept.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    /// The kept text (lossy UTF-8), behind `[... N bytes truncated ...]` when output
    /// was dropped, and whether it was.
    pub fn finish(mut self) -> (String, bool) {
        self.trim();
        let text = String::from_utf8_lossy(&self.kept);
        if self.dropped == 0 {
            (text.into_owned(), false)
        } else {
            (
                format!("[... {} bytes truncated ...]\n{text}", self.dropped),
                true,
            )
        }
    }
}

/// Runs `command` to completion within `timeout`, capturing stdout and stderr
/// (interleaved, the last `limit` bytes) and, with `keep_stdout`, all of stdout apart.
/// stdin is closed. A non-zero exit is not an error here: callers decide what it means.
pub async fn run(
    mut command: Command,
    timeout: Duration,
    limit: usize,
    keep_stdout: bool,
) -> Result<Finished, ChildError> {
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| ChildError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id();
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        unreachable!("stdout and stderr were configured as pipes above")
    };
    let mut tail = Tail::new(limit);
    let mut kept = keep_stdout.then(Vec::new);
    let work = async {
        read_both(stdout, stderr, &mut tail, kept.as_mut()).await?;
        child.wait().await
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(status)) => {
            let (output, truncated) = tail.finish();
            Ok(Finished {
                status,
                output,
                truncated,
                stdout: kept.unwrap_or_default(),
            })
        }
        Ok(Err(source)) => Err(ChildError::Io { program, source }),
        Err(_) => {
            // The group still has a member (the child is not reaped yet), so its id
            // cannot have been reused.
            if let Some(group) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = child.start_kill();
            let _ = child.wait().await;
            Err(ChildError::TimedOut {
                program,
                after: timeout,
                output: tail.finish().0,
            })
        }
    }
}

/// Reads both streams to their end into `tail`, in arrival order.
async fn read_both(
    mut stdout: impl AsyncRead + Unpin,
    mut stderr: impl AsyncRead + Unpin,
    tail: &mut Tail,
    mut keep_stdout: Option<&mut Vec<u8>>,
) -> std::io::Result<()> {
    let (mut out_open, mut err_open) = (true, true);
    let mut out_buf = vec![0u8; 8192];
    let mut err_buf = vec![0u8; 8192];
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buf), if out_open => match read? {
                0 => out_open = false,
                n => match keep_stdout.as_deref_mut() {
                    Some(kept) => kept.extend_from_slice(&out_buf[..n]),
                    None => tail.push(&out_buf[..n]),
                },
            },
            read = stderr.read(&mut err_buf), if err_open => match read? {
                0 => err_open = false,
                n => tail.push(&err_buf[..n]),
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_and_marks_truncation() {
        let mut tail = Tail::new(10);
        for _ in 0..5000 {
            tail.push(b"abcdefghij");
        }
        tail.push(b"0123456789");
        let (text, truncated) = tail.finish();
        assert!(truncated);
        assert_eq!(text, "[... 50000 bytes truncated ...]\n0123456789");
        let mut short = Tail::new(10);
        short.push(b"ok");
        assert_eq!(short.finish(), ("ok".to_owned(), false));
    }

    /// Whether `pid` is alive (a zombie awaiting its reaper is not).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !matches!(stat.rsplit(") ").next().map(|s| &s[..1]), Some("Z" | "X")))
    }

    #[tokio::test]
    async fn timeout_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!(
            "sleep 30 & echo $! > {}; echo started; wait",
            pid_file.display()
        ));
        let started = std::time::Instant::now();
        let err = run(command, Duration::from_millis(500), 1024, false)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        match err {
            ChildError::TimedOut { output, .. } => assert_eq!(output, "started\n"),
            other => panic!("{other}"),
        }
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let what = "the child's child to end (it survived the timeout)";
        outpost_testing::eventually(10, what, async || (!alive(pid.trim())).then_some(())).await;
    }

    #[tokio::test]
    async fn stdout_kept_apart_from_stderr() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo '{\"a\": 1}'; echo warning >&2"]);
        let done = run(command, Duration::from_secs(10), 1024, true)
            .await
            .unwrap();
        assert_eq!(done.stdout, b"{\"a\": 1}\n");
        assert_eq!(done.output, "warning\n");
    }

    #[tokio::test]
    async fn exit_code_and_interleaved_output() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);
        let done = run(command, Duration::from_secs(10), 1024, false)
            .await
            .unwrap();
        assert_eq!(done.exit_code(), 3);
        assert!(done.output.contains("out\n") && done.output.contains("err\n"));
    }
}
