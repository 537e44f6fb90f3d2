//! What a child process prints, read line by line as it comes.

use std::io::{BufRead as _, BufReader, Read};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The lines a child prints on one stream (its piped stdout), read by a thread of their
/// own so a test can wait for a line with a deadline.
pub struct Lines {
    lines: Receiver<String>,
    printed: Vec<String>,
}

impl Lines {
    /// Starts reading `stream` (say `child.stdout.take()`).
    pub fn read(stream: impl Read + Send + 'static) -> Lines {
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            lines,
            printed: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `want` and returns it; `Err` when none does within
    /// `secs` ([`RecvTimeoutError::Timeout`]) or the stream ends first
    /// ([`RecvTimeoutError::Disconnected`]). Every line read, the wanted one too, is kept
    /// in [`Lines::printed`].
    pub fn until(
        &mut self,
        secs: u64,
        want: impl Fn(&str) -> bool,
    ) -> Result<String, RecvTimeoutError> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))?;
            self.printed.push(line.clone());
            if want(&line) {
                return Ok(line);
            }
        }
    }

    /// Every line [`Lines::until`] has read so far.
    pub fn printed(&self) -> &[String] {
        &self.printed
    }

    /// The lines not read yet, up to the end of the stream (blocks until the child
    /// closes it).
    pub fn rest(&mut self) -> Vec<String> {
        self.lines.iter().collect()
    }
}
