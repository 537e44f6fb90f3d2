use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{EtcdStore, Store, StoreError};

/// A single-member etcd started from the `etcd` binary on `PATH`, on free loopback
/// ports in a temporary directory, for tests and benchmarks. Killed and removed on drop.
///
/// ```no_run
/// # async fn demo() -> Result<(), outpost_apiserver::storage::StoreError> {
/// let etcd = outpost_apiserver::storage::ThrowawayEtcd::start().await?;
/// let store = etcd.connect().await?;
/// # Ok(()) }
/// ```
pub struct ThrowawayEtcd {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl ThrowawayEtcd {
    /// Starts etcd and waits until it answers.
    pub async fn start() -> Result<Self, StoreError> {
        let dir = tempfile::Builder::new()
            .prefix("outpost-etcd-")
            .tempdir()
            .map_err(StoreError::backend)?;
        let (client, peer) = (
            free_port().map_err(StoreError::backend)?,
            free_port().map_err(StoreError::backend)?,
        );
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log =
            std::fs::File::create(dir.path().join("etcd.log")).map_err(StoreError::backend)?;
        let child = Command::new("etcd")
            .arg("--name=outpost-throwaway")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=outpost-throwaway={peer_url}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                StoreError::backend(format!(
                    "cannot start etcd (is etcd-server installed? `./x deps` installs it): {e}"
                ))
            })?;
        let mut etcd = ThrowawayEtcd {
            child,
            endpoint,
            dir,
        };
        etcd.wait_ready().await?;
        Ok(etcd)
    }

    async fn wait_ready(&mut self) -> Result<(), StoreError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(StoreError::backend(format!(
                    "etcd exited with {status}: {}",
                    self.log()
                )));
            }
            if let Ok(store) = EtcdStore::connect(std::slice::from_ref(&self.endpoint)).await
                && store.current_revision().await.is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(StoreError::backend(format!(
                    "etcd did not answer within 30 s: {}",
                    self.log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// The client endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A store connected to this etcd.
    pub async fn connect(&self) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect(std::slice::from_ref(&self.endpoint)).await
    }
}

impl Drop for ThrowawayEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
