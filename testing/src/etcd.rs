//! One throwaway etcd member, for tests and benchmarks.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::free_port;

/// A single-member etcd started from the `etcd` binary on `PATH`, on free loopback
/// ports in a temporary directory, for tests and benchmarks. Killed and removed on drop.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// let etcd = outpost_testing::ThrowawayEtcd::start().await?;
/// println!("etcd at {}", etcd.endpoint());
/// # Ok(()) }
/// ```
pub struct ThrowawayEtcd {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
}

impl ThrowawayEtcd {
    /// Starts etcd and waits (up to 30 s) until it answers a read. A port taken between
    /// [`free_port`] releasing it and etcd binding it (by any process: an outgoing
    /// connection's ephemeral port, on a machine running a fleet benchmark) is tried again
    /// on new ports, up to three times.
    ///
    /// # Errors
    /// When etcd cannot be started (not installed), exits, or does not answer in time;
    /// the message carries etcd's log.
    pub async fn start() -> std::io::Result<Self> {
        let mut tries = 1;
        loop {
            let mut etcd = Self::spawn()?;
            match etcd.wait_ready().await {
                Ok(()) => return Ok(etcd),
                Err(err) if tries < 3 && err.to_string().contains("address already in use") => {
                    tries += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn spawn() -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("outpost-etcd-").tempdir()?;
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new("etcd")
            .arg("--name=outpost-throwaway")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=outpost-throwaway={peer_url}"))
            // etcd's largest recommended quota, not its 2 GiB default: 10,000 installs'
            // Plans and the five minutes of history the API server keeps (its
            // compaction interval) outgrow 2 GiB (`outpost bench fleet`).
            .arg("--quota-backend-bytes=8589934592")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                std::io::Error::other(format!(
                    "cannot start etcd (is etcd-server installed? `./x deps` installs it): {e}"
                ))
            })?;
        Ok(ThrowawayEtcd {
            child,
            endpoint,
            dir,
        })
    }

    async fn wait_ready(&mut self) -> std::io::Result<()> {
        let endpoint = self.endpoint.clone();
        let child = &mut self.child;
        let ready = crate::wait_for(Duration::from_secs(30), async || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(format!("etcd exited with {status}")));
            }
            let mut client = etcd_client::Client::connect([&endpoint], None).await.ok()?;
            client.get("/", None).await.ok().map(|_| Ok(()))
        })
        .await;
        match ready {
            Some(Ok(())) => Ok(()),
            Some(Err(exited)) => Err(std::io::Error::other(format!("{exited}: {}", self.log()))),
            None => Err(std::io::Error::other(format!(
                "etcd did not answer within 30 s: {}",
                self.log()
            ))),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// The client endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The etcd process's id (for its CPU time and memory in benchmarks).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `--store` value of `outpost server` for this etcd, `etcd://127.0.0.1:PORT`.
    pub fn store(&self) -> String {
        format!("etcd://{}", self.endpoint.trim_start_matches("http://"))
    }
}

impl Drop for ThrowawayEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
