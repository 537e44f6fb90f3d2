//! The network of a step that declares `network: true`: a network namespace of its own,
//! reaching out through slirp4netns, in which the blocked addresses (by default the
//! instance metadata service) are refused by the kernel.
//!
//! Per step, the runner starts:
//!
//! 1. a *holder*: `unshare --user --map-root-user --net` running `ip rule add … prohibit`
//!    for every [`BlockedAddress`] (`ip -4 -batch`, `ip -6 -batch`), then waiting on
//!    its stdin for as long as the step runs. It owns the step's network namespace, and
//!    the user namespace that namespace belongs to; it runs as the sandbox's host uid
//!    (when the runner is root: [`super::Sandbox::host_uid`]), so those namespaces
//!    are that uid's, not root's;
//! 2. `slirp4netns --configure` attached to the holder: a tap device in the namespace
//!    (10.0.2.100/24, default route via 10.0.2.2, DNS at 10.0.2.3) whose packets it
//!    relays as ordinary sockets of the runner's, outside. It stays the runner's uid (it
//!    opens `/dev/net/tun`, which is root's alone on some hosts, and joins the holder's
//!    namespaces from outside) and runs sandboxed
//!    (`--enable-sandbox --enable-seccomp`) and, unless [`NetworkSettings::host_loopback`],
//!    with `--disable-host-loopback`: 10.0.2.2 does not reach the host's 127.0.0.1;
//! 3. the step, `nsenter --target HOLDER --user --net --preserve-credentials bwrap …
//!    --share-net`, both as the sandbox's host uid: bubblewrap's
//!    own user namespace is nested inside the holder's, so the step holds no capability
//!    over the network namespace it uses — it cannot delete the rules, add routes, or
//!    open raw sockets.
//!
//! A connection to a blocked address fails in the step's kernel before any packet
//! leaves (`connect: Permission denied`, `EACCES` from the `prohibit` rule); everything
//! else goes out through the relay. The holder and the relay are killed when the step
//! ends ([`StepNetwork`] dropped), and end by themselves when the runner dies: both
//! exit when their stdin, a pipe from the runner, closes (`read`, `--exit-fd=0`). The step's `/etc/resolv.conf` names 10.0.2.3, the
//! relay's DNS forwarder (a host resolver on loopback, such as systemd-resolved's
//! 127.0.0.53, is not reachable from the namespace).

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// What steps must not reach by default: the instance metadata service, IPv4 and IPv6
/// (it serves the instance role's credentials, which can assume every enabled role).
pub const METADATA: [&str; 2] = ["169.254.169.254", "fd00:ec2::254"];

/// The address of the slirp4netns gateway, which reaches the host's loopback when
/// [`NetworkSettings::host_loopback`] is on.
pub const GATEWAY: &str = "10.0.2.2";

/// The address of the relay's DNS forwarder, in the step's `/etc/resolv.conf`.
pub const DNS: &str = "10.0.2.3";

/// How long setting up a step's network may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// An address, or a range of them, that steps must not reach; on one port (TCP and
/// UDP) or all. Written `169.254.169.254`, `10.0.0.0/8`, `10.0.2.2:8080`,
/// `fd00:ec2::254`, `[fd00:ec2::254]:80`, `[fd00::/64]:80`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockedAddress {
    /// The address (the range's first address).
    pub address: IpAddr,
    /// The prefix length (32 or 128 for one address).
    pub prefix: u8,
    /// The one port blocked; every port when `None`.
    pub port: Option<u16>,
}

impl FromStr for BlockedAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{text:?} is not an address to block: {why}");
        let text = text.trim();
        let (net, port) = if let Some(rest) = text.strip_prefix('[') {
            let (net, after) = rest.split_once(']').ok_or_else(|| bad("no closing ]"))?;
            let port = match after {
                "" => None,
                after => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("expected :PORT after ]"))?,
                ),
            };
            (net, port)
        } else if text.matches(':').count() == 1 {
            let (net, port) = text.split_once(':').unwrap_or((text, ""));
            (net, Some(port))
        } else {
            (text, None)
        };
        let port = port
            .map(|p| p.parse::<u16>().ok().filter(|p| *p != 0))
            .map(|p| p.ok_or_else(|| bad("the port is not a number from 1 to 65535")))
            .transpose()?;
        let (address, prefix) = match net.split_once('/') {
            Some((address, prefix)) => (
                address,
                Some(
                    prefix
                        .parse::<u8>()
                        .map_err(|_| bad("the prefix length is not a number"))?,
                ),
            ),
            None => (net, None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| bad("not an IPv4 or IPv6 address"))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad("the prefix length is too long for the address"));
        }
        Ok(Self {
            address,
            prefix,
            port,
        })
    }
}

impl fmt::Display for BlockedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = if self.address.is_ipv4() { 32 } else { 128 };
        let net = if self.prefix == max {
            self.address.to_string()
        } else {
            format!("{}/{}", self.address, self.prefix)
        };
        match (self.port, self.address) {
            (None, _) => f.write_str(&net),
            (Some(port), IpAddr::V4(_)) => write!(f, "{net}:{port}"),
            (Some(port), IpAddr::V6(_)) => write!(f, "[{net}]:{port}"),
        }
    }
}

impl BlockedAddress {
    /// The `ip rule` commands (for `ip -batch`) that refuse it.
    fn rules(&self) -> Vec<String> {
        let to = format!("rule add to {}/{}", self.address, self.prefix);
        match self.port {
            None => vec![format!("{to} prohibit")],
            Some(port) => ["tcp", "udp"]
                .iter()
                .map(|proto| format!("{to} ipproto {proto} dport {port} prohibit"))
                .collect(),
        }
    }
}

/// The default [`BlockedAddress`]es: [`METADATA`].
pub fn metadata() -> Vec<BlockedAddress> {
    METADATA
        .iter()
        .map(|a| a.parse().expect("METADATA holds valid addresses"))
        .collect()
}

/// How steps with `network: true` reach the network (the runner's
/// `--slirp4netns`, `--sandbox-blocked-address`, `--sandbox-host-loopback`).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSettings {
    /// The slirp4netns binary.
    pub slirp4netns: PathBuf,
    /// What steps must not reach.
    pub blocked: Vec<BlockedAddress>,
    /// Whether the gateway ([`GATEWAY`]) reaches the host's 127.0.0.1 (a local egress
    /// proxy); off by default: services on the host's loopback stay out of reach.
    pub host_loopback: bool,
}

impl Default for NetworkSettings {
    /// `slirp4netns` from `PATH`, the metadata service blocked, no host loopback.
    fn default() -> Self {
        Self {
            slirp4netns: "slirp4netns".into(),
            blocked: metadata(),
            host_loopback: false,
        }
    }
}

/// Why a step's network could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up the step's network ({stage}): {reason}")]
pub struct NetworkError {
    /// What was being done.
    pub stage: &'static str,
    /// What went wrong.
    pub reason: String,
}

/// One step's network namespace, ready: the holder and the relay run until this is
/// dropped.
#[derive(Debug)]
pub struct StepNetwork {
    holder: Child,
    relay: Child,
    holder_pid: u32,
    host_uid: Option<u32>,
    files: tempfile::TempDir,
}

impl StepNetwork {
    /// Sets up a network namespace with `settings`' blocked addresses refused and
    /// slirp4netns relaying the rest. With `host_uid`, the holder (and so the
    /// namespaces) belong to that uid, as do [`Self::enter`]'s processes.
    pub async fn start(
        settings: &NetworkSettings,
        host_uid: Option<u32>,
    ) -> Result<Self, NetworkError> {
        tokio::time::timeout(SETUP_TIMEOUT, Self::set_up(settings, host_uid))
            .await
            .unwrap_or_else(|_| {
                Err(NetworkError {
                    stage: "waiting",
                    reason: format!("not ready after {SETUP_TIMEOUT:?}"),
                })
            })
    }

    async fn set_up(
        settings: &NetworkSettings,
        host_uid: Option<u32>,
    ) -> Result<Self, NetworkError> {
        let fail = |stage| {
            move |e: std::io::Error| NetworkError {
                stage,
                reason: e.to_string(),
            }
        };
        let files = tempfile::Builder::new()
            .prefix("outpost-step-net-")
            .tempdir()
            .map_err(fail("creating its files"))?;
        let (v4, v6): (Vec<_>, Vec<_>) = settings.blocked.iter().partition(|b| b.address.is_ipv4());
        let rules = |blocked: Vec<&BlockedAddress>| {
            blocked
                .iter()
                .flat_map(|b| b.rules())
                .map(|r| r + "\n")
                .collect::<String>()
        };
        let resolv = format!("nameserver {DNS}\n");
        for (name, text) in [
            ("v4", rules(v4)),
            ("v6", rules(v6)),
            ("resolv.conf", resolv),
        ] {
            std::fs::write(files.path().join(name), text).map_err(fail("writing its files"))?;
        }
        // The holder reads the rules, bubblewrap binds resolv.conf: as the sandbox's uid.
        if let Some(uid) = host_uid {
            super::host_uid::give(uid, files.path()).map_err(|e| NetworkError {
                stage: "giving its files to the sandbox's uid",
                reason: e.to_string(),
            })?;
        }

        // The holder: prints `ready` once the rules are in, then holds the namespaces
        // until its stdin closes (the runner dropped it, or died). As the sandbox's uid,
        // which then owns the step's user and network namespaces.
        let mut holder = Command::new("unshare");
        super::host_uid::run_as(&mut holder, host_uid);
        let mut holder = holder
            .args(["--user", "--map-root-user", "--net", "--", "/bin/sh", "-c"])
            .arg(r#"ip -4 -batch "$1" && ip -6 -batch "$2" && echo ready && read -r _"#)
            .arg("outpost-step-net")
            .arg(files.path().join("v4"))
            .arg(files.path().join("v6"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(fail("starting unshare"))?;
        let holder_pid = holder.id().ok_or_else(|| NetworkError {
            stage: "starting unshare",
            reason: "it exited at once".into(),
        })?;
        let mut line = String::new();
        if let Some(stdout) = holder.stdout.take() {
            BufReader::new(stdout)
                .read_line(&mut line)
                .await
                .map_err(fail("blocking addresses"))?;
        }
        if line.trim() != "ready" {
            return Err(NetworkError {
                stage: "blocking addresses",
                reason: output_of(&mut holder).await,
            });
        }

        let mut relay = Command::new(&settings.slirp4netns);
        relay
            .args([
                "--configure",
                "--mtu=65520",
                "--enable-sandbox",
                "--enable-seccomp",
            ])
            .args(["--ready-fd=1", "--exit-fd=0"])
            .arg(format!("--userns-path=/proc/{holder_pid}/ns/user"));
        if !settings.host_loopback {
            relay.arg("--disable-host-loopback");
        }
        let mut relay = relay
            .arg(holder_pid.to_string())
            .arg("tap0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| NetworkError {
                stage: "starting slirp4netns",
                reason: format!("{}: {e}", settings.slirp4netns.display()),
            })?;
        // It writes `1` to its ready fd (stdout), after any warnings it prints there.
        let mut printed = Vec::new();
        if let Some(stdout) = relay.stdout.as_mut() {
            let mut chunk = [0u8; 256];
            while !(printed == b"1" || printed.ends_with(b"\n1")) {
                match stdout.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => printed.extend_from_slice(&chunk[..n]),
                }
            }
        }
        if !(printed == b"1" || printed.ends_with(b"\n1")) {
            return Err(NetworkError {
                stage: "starting slirp4netns",
                reason: output_of(&mut relay).await,
            });
        }
        Ok(Self {
            holder,
            relay,
            holder_pid,
            host_uid,
            files,
        })
    }

    /// The command that runs `program` in this network namespace (`nsenter` into the
    /// holder's user and network namespaces; the program then nests its own user
    /// namespace, as bubblewrap does, to hold no capability over this one). It runs as
    /// the holder's uid, keeping its credentials (`--preserve-credentials`: the holder's
    /// namespace denies `setgroups`, which nsenter would call otherwise).
    pub fn enter(&self, program: &Path) -> Command {
        let mut command = Command::new("nsenter");
        super::host_uid::run_as(&mut command, self.host_uid);
        command
            .arg(format!("--target={}", self.holder_pid))
            .args(["--user", "--net", "--preserve-credentials", "--"])
            .arg(program);
        command
    }

    /// The `/etc/resolv.conf` steps in this namespace get (the relay's DNS forwarder).
    pub fn resolv_conf(&self) -> PathBuf {
        self.files.path().join("resolv.conf")
    }

    /// Whether the holder and the relay still run.
    pub fn running(&mut self) -> bool {
        matches!(self.holder.try_wait(), Ok(None)) && matches!(self.relay.try_wait(), Ok(None))
    }
}

/// What a failed helper printed on stderr, after it exited (or was killed).
async fn output_of(child: &mut Child) -> String {
    let _ = child.start_kill();
    let status = child
        .wait()
        .await
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut text).await;
    }
    let text = text.trim();
    if text.is_empty() {
        status
    } else {
        format!("{status}: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_metadata_service() {
        let blocked: Vec<String> = NetworkSettings::default()
            .blocked
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(blocked, ["169.254.169.254", "fd00:ec2::254"]);
        assert!(!NetworkSettings::default().host_loopback);
    }

    #[test]
    fn blocked_addresses_parse_and_print_the_same() {
        for text in [
            "169.254.169.254",
            "10.0.0.0/8",
            "10.0.2.2:8080",
            "10.0.0.0/8:53",
            "fd00:ec2::254",
            "fd00::/64",
            "[fd00:ec2::254]:80",
            "[fd00::/64]:80",
        ] {
            let parsed: BlockedAddress = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(parsed.to_string(), text);
        }
        let one: BlockedAddress = "10.0.2.2:8080".parse().unwrap();
        assert_eq!(
            one.rules(),
            [
                "rule add to 10.0.2.2/32 ipproto tcp dport 8080 prohibit",
                "rule add to 10.0.2.2/32 ipproto udp dport 8080 prohibit"
            ]
        );
        let metadata: BlockedAddress = "fd00:ec2::254".parse().unwrap();
        assert_eq!(metadata.rules(), ["rule add to fd00:ec2::254/128 prohibit"]);
    }

    #[test]
    fn malformed_addresses_are_refused_by_name() {
        for (text, says) in [
            ("metadata", "not an IPv4 or IPv6 address"),
            ("10.0.0.1:0", "port is not a number"),
            ("10.0.0.1:http", "port is not a number"),
            ("10.0.0.0/33", "prefix length is too long"),
            ("10.0.0.0/x", "prefix length is not a number"),
            ("[fd00::1", "no closing ]"),
            ("[fd00::1]80", "expected :PORT"),
            ("fd00::1:80:x", "not an IPv4 or IPv6 address"),
        ] {
            let error = text.parse::<BlockedAddress>().unwrap_err();
            assert!(
                error.contains(&format!("{text:?}")) && error.contains(says),
                "{text}: {error}"
            );
        }
    }
}
