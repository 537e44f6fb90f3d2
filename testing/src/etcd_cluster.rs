//! A real etcd cluster for tests: several members of Debian's `etcd` on free loopback
//! ports in one temporary directory, each of which can be killed (SIGKILL) — the
//! leader first, to see the cluster elect another and the clients fail over.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::free_port;

/// One member: its name, client URL and process (`None` once killed).
struct Member {
    name: String,
    client_url: String,
    child: Option<Child>,
}

/// A running etcd cluster; every member still running is killed when dropped.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `size` members (`m0`, `m1`, ...) as one new cluster and waits until every
    /// one of them knows the leader.
    ///
    /// The data directories are on `/dev/shm` when the machine has it: three members
    /// fsyncing every write to one shared disk make the disk, not Outpost, what a
    /// 2-core CI machine measures. etcd itself (raft, revisions, its fsync calls) is
    /// unchanged.
    pub async fn start(size: usize) -> EtcdCluster {
        let shm = Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        builder.prefix("outpost-etcd-cluster-");
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        }
        .expect("a temp dir");
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (free_port(), free_port())).collect();
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("outpost-{:016x}", rand::random::<u64>());
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let name = format!("m{i}");
                let client_url = format!("http://127.0.0.1:{client}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let log = std::fs::File::create(dir.path().join(format!("{name}.log")))
                    .expect("etcd log file");
                let child = Command::new("etcd")
                    .arg(format!("--name={name}"))
                    .arg(format!(
                        "--data-dir={}",
                        dir.path().join(format!("{name}.data")).display()
                    ))
                    .arg(format!("--listen-client-urls={client_url}"))
                    .arg(format!("--advertise-client-urls={client_url}"))
                    .arg(format!("--listen-peer-urls={peer_url}"))
                    .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                    .arg(format!("--initial-cluster={initial_cluster}"))
                    .arg("--initial-cluster-state=new")
                    .arg(format!("--initial-cluster-token={token}"))
                    // Twice etcd's defaults: on a loaded 2-core machine a 100 ms
                    // heartbeat misses often enough to depose healthy leaders.
                    .args(["--heartbeat-interval=200", "--election-timeout=2000"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap_or_else(|e| {
                        panic!("cannot start etcd (`./x deps` installs etcd-server): {e}")
                    });
                Member {
                    name,
                    client_url,
                    child: Some(child),
                }
            })
            .collect();
        let mut cluster = EtcdCluster { members, dir };
        cluster.leader().await;
        cluster
    }

    /// Every member's client URL, `http://127.0.0.1:PORT`, killed ones included.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// The `--store` of an `outpost server` on this cluster:
    /// `etcd://127.0.0.1:P0,127.0.0.1:P1,...`.
    pub fn store(&self) -> String {
        let hosts: Vec<&str> = self
            .members
            .iter()
            .map(|m| m.client_url.trim_start_matches("http://"))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// The index of the leader, once every running member names the same one and it is
    /// running; panics after 30 s (with the members' logs) if they never agree.
    pub async fn leader(&mut self) -> usize {
        let leader = crate::wait_for(Duration::from_secs(30), async || {
            if let Some(leader) = self.agreed_leader().await {
                return Some(leader);
            }
            let exited = self
                .members
                .iter_mut()
                .position(|m| matches!(m.child.as_mut().map(Child::try_wait), Some(Ok(Some(_)))));
            if let Some(index) = exited {
                panic!("etcd {} exited: {}", self.name(index), self.log(index));
            }
            None
        })
        .await;
        leader.unwrap_or_else(|| {
            panic!(
                "the etcd members never agreed on a leader: {}",
                (0..self.members.len())
                    .map(|i| self.log(i))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })
    }

    /// Asks each running member (`Status`) which member it follows; `Some` when they all
    /// name the same running member.
    async fn agreed_leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for member in &self.members {
            if member.child.is_none() {
                ids.push(None);
                continue;
            }
            let options = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2));
            let mut client =
                etcd_client::Client::connect([member.client_url.as_str()], Some(options))
                    .await
                    .ok()?;
            let status = client.status().await.ok()?;
            ids.push(Some(status.header()?.member_id()));
            leaders.push(status.leader());
        }
        let leader = *leaders.first()?;
        if leader == 0 || leaders.iter().any(|l| *l != leader) {
            return None;
        }
        ids.iter().position(|id| *id == Some(leader))
    }

    /// Kills member `index` (SIGKILL); its data stays but it is not started again.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Member `index`'s name (`m0`, ...).
    pub fn name(&self, index: usize) -> &str {
        &self.members[index].name
    }

    fn log(&self, index: usize) -> String {
        let name = &self.members[index].name;
        let text = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
            .unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        format!(
            "--- {name} ---\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}
