//! The AWS emulator (`moto_server`) on a free loopback port, for tests of what the
//! runner does in a customer's account.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `moto_server`: `$OUTPOST_MOTO_SERVER`, else the repository's `.venv/`.
pub fn moto_binary() -> PathBuf {
    let path = std::env::var_os("OUTPOST_MOTO_SERVER")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/moto_server"),
            PathBuf::from,
        );
    assert!(
        path.is_file(),
        "{} not found (set OUTPOST_MOTO_SERVER or run `./x deps`)",
        path.display()
    );
    path
}

/// A running `moto_server` in a temporary directory (its log in `moto.log`), stopped
/// when dropped.
pub struct Moto {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Moto {
    /// Starts `moto_server` with `env` added to its environment and waits until it
    /// listens (without sending it a request: with IAM enforcement, every request
    /// counts towards the unauthenticated ones).
    pub fn start(env: &[(&str, &str)]) -> Moto {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let log = std::fs::File::create(dir.path().join("moto.log")).expect("moto.log");
        let child = Command::new(moto_binary())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("moto_server starts");
        let mut moto = Moto { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(180);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Some(status) = moto.child.try_wait().expect("moto_server can be polled") {
                panic!("moto_server exited with {status}: {}", moto.log());
            }
            assert!(Instant::now() < deadline, "moto_server did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
