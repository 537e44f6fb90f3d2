//! What a job step sees: bubblewrap's arguments, by allow-list.
//!
//! A step is vendor code run on the customer's VM. It must not reach what the runner
//! keeps: its signing key (it could forge the audit log), its journal and audit log,
//! other components' work dirs (terraform state), the `--secrets-dir`, the runner's
//! configuration and token, the systemd unit whose command line may carry it, or any
//! home directory. So nothing of the host is visible unless listed here:
//!
//! * read-only, bound only when they exist (`--ro-bind-try`; a top-level symlink such as
//!   `/bin -> usr/bin` is recreated as that symlink): the system directories [`SYSTEM`]
//!   (`/usr`, `/bin`, `/sbin`, every `/lib*`), TLS trust (`/etc/ssl`,
//!   `/etc/ca-certificates`), name resolution (`/etc/resolv.conf`, `/etc/hosts`,
//!   `/etc/nsswitch.conf`, `/etc/host.conf`, `/etc/gai.conf`), users (`/etc/passwd`,
//!   `/etc/group`), the dynamic linker's cache and configuration, `/etc/alternatives`
//!   (where Debian's `awk` and friends point) and `/etc/localtime`;
//! * read-write: the step's own directory ([`super::job_dir`] of the entity's work dir),
//!   bound at the same path — the directories above it exist in the sandbox but are
//!   empty, so the state dir around it is not there;
//! * a private `/tmp` (tmpfs), a minimal `/dev` and a `/proc` of the sandbox's own pid
//!   namespace.
//!
//! Reading anything else fails with `No such file or directory`; [`HIDDEN`] directories
//! inside the system paths (`/etc/ssl/private`) are covered with an empty tmpfs.
//!
//! # The step's uid
//!
//! Steps run as uid and gid [`SANDBOX_ID`] (65534, `nobody`) inside a new user
//! namespace (`--unshare-user --uid 65534 --gid 65534`): no capabilities, in its
//! namespace or the host's, so a step cannot mount, unmount or remount to uncover what
//! the allow-list hides, change its uid, or signal or trace the runner (it is in its own
//! pid namespace too); tools see an unprivileged user.
//!
//! On the host, the step is a separate unprivileged uid when the runner runs as root
//! (the install stack's runner): bubblewrap, `nsenter` and the network holder are
//! started as uid and gid [`Sandbox::host_uid`] (the runner's `--sandbox-uid`, 65534 by
//! default) with no supplementary groups, so the step's user namespace maps 65534 onto
//! that uid, not onto root. A file of the runner's that were mounted into a step by
//! mistake stays unreadable to it (`Permission denied`), and what the step writes
//! belongs to that uid. For this, before each command the runner gives the writable
//! directories bound in ([`Bind::Writable`] and the working directory), recursively and
//! without following links, to that uid, and checks that the uid can reach every bound
//! path (each directory above it searchable), failing with [`SandboxError::Unreachable`]
//! otherwise: bubblewrap resolves what it binds as that uid. The runner keeps the work
//! dirs in a directory of their own, mode 0711, outside its 0700 state dir.
//!
//! A runner that is not root cannot switch uid: its steps are uid 65534 inside and the
//! runner's own uid outside, and the protection is only what is mounted.
//!
//! # Network
//!
//! Without `network: true` the step has its own, empty network namespace (only a
//! loopback device that is down). With it the step gets a network namespace of its own
//! too, reaching out through slirp4netns, in which the kernel refuses the blocked
//! addresses — by default the instance metadata service, 169.254.169.254 and
//! fd00:ec2::254 — with `prohibit` policy-routing rules the step has no capability to
//! remove ([`network`] says how, and why this rather than a host firewall rule). The
//! host's loopback is out of reach too, unless the customer turns
//! [`NetworkSettings::host_loopback`] on.
//!
//! A system path must hold nothing of the runner's: the runner refuses to start with a
//! `--state-dir`, `--secrets-dir` or `--kubeconfig` under one of them ([`exposing`]).

mod host_uid;
pub mod network;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use super::super::child::{self, ChildError, Finished};
pub use network::{BlockedAddress, NetworkError, NetworkSettings, StepNetwork};

/// The uid and gid steps run as inside their user namespace (`nobody`).
pub const SANDBOX_ID: u32 = 65534;

/// Host paths steps see, read-only, when they exist; plus every `/lib*` directory.
pub const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
];

/// Directories inside [`SYSTEM`] paths that steps must not see (private TLS keys):
/// covered by an empty tmpfs. A step of a runner that is not root has the runner's uid on
/// the host, so it could otherwise read the runner's user's files there.
pub const HIDDEN: &[&str] = &["/etc/ssl/private"];

/// The `/lib*` directories (`/lib`, `/lib64`, `/lib32`, `/libx32`) of this host.
fn library_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir("/")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with("lib"))
                .map(|name| format!("/{name}"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// The system path steps see that `path` lies in, if any. `path` is resolved first
/// when it exists (a symlink into `/usr` is in `/usr`).
pub fn exposing(path: &Path) -> Option<PathBuf> {
    let path = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .ok()?;
    SYSTEM
        .iter()
        .map(PathBuf::from)
        .chain(library_dirs().into_iter().map(PathBuf::from))
        .find(|root| {
            path.starts_with(root)
                || std::fs::canonicalize(root).is_ok_and(|real| path.starts_with(real))
        })
}

/// A host path bound into the sandbox at the same path, besides the system paths and
/// the working directory (terraform's saved plans, its binary and configuration).
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    /// Read-write (`--bind`).
    Writable(&'a Path),
    /// Read-only, when it exists (`--ro-bind-try`: a missing terraform binary fails
    /// as `No such file` inside, like any missing command).
    ReadOnly(&'a Path),
}

/// bubblewrap's arguments for a step whose writable directory is `dir` (none: no
/// writable directory, working directory `/`), up to (not including) `--` and the
/// command. With `network`, the step shares that network namespace (bubblewrap runs in
/// it, [`StepNetwork::enter`]) and gets its `/etc/resolv.conf`; without, a new, empty one.
/// `binds` are bound too, after `/tmp` (they may be under it).
pub fn args(
    dir: Option<&Path>,
    network: Option<&StepNetwork>,
    binds: &[Bind<'_>],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
    push(&["--unshare-all", "--unshare-user"]);
    let id = SANDBOX_ID.to_string();
    push(&["--uid", &id, "--gid", &id]);
    if network.is_some() {
        push(&["--share-net"]);
    }
    push(&["--die-with-parent", "--new-session"]);
    let system = SYSTEM.iter().map(|p| (*p).to_owned()).chain(library_dirs());
    for path in system {
        // A top-level symlink (merged /usr: /bin -> usr/bin) stays a symlink.
        match std::fs::read_link(&path) {
            Ok(target) if !path.starts_with("/etc/") => {
                args.push("--symlink".into());
                args.push(target.into_os_string());
                args.push(path.into());
            }
            _ => {
                args.push("--ro-bind-try".into());
                args.push(path.clone().into());
                args.push(path.into());
            }
        }
    }
    if let Some(network) = network {
        args.push("--ro-bind".into());
        args.push(network.resolv_conf().into());
        args.push("/etc/resolv.conf".into());
    }
    let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
    for hidden in HIDDEN {
        if Path::new(hidden).is_dir() {
            push(&["--tmpfs", hidden]);
        }
    }
    push(&["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
    // After /tmp: the directory may be under it.
    let binds = binds.iter().map(|bind| match bind {
        Bind::Writable(path) => ("--bind", *path),
        Bind::ReadOnly(path) => ("--ro-bind-try", *path),
    });
    for (kind, path) in dir.map(|dir| ("--bind", dir)).into_iter().chain(binds) {
        args.push(kind.into());
        args.push(path.into());
        args.push(path.into());
    }
    args.push("--chdir".into());
    args.push(dir.unwrap_or(Path::new("/")).into());
    args
}

/// Why a command cannot be sandboxed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// bubblewrap is missing or cannot create its namespaces here.
    #[error("bubblewrap ({bwrap}) cannot sandbox steps on this machine: {reason}")]
    Unavailable {
        /// The bwrap binary.
        bwrap: String,
        /// What it said.
        reason: String,
    },
    /// The network namespace of a step with network could not be set up.
    #[error(transparent)]
    Network(#[from] NetworkError),
    /// The sandbox's host uid cannot reach a path bound into the sandbox: bubblewrap,
    /// running as that uid, could not bind it.
    #[error(
        "the sandbox's uid {uid} cannot reach {path}: {blocked} (owner {owner}, mode {mode:o}) \
         is not searchable by it; make it so (chmod o+x {blocked}) or keep what is bound \
         elsewhere"
    )]
    Unreachable {
        /// The sandbox's host uid.
        uid: u32,
        /// The path bound.
        path: PathBuf,
        /// The directory above it that the uid cannot search.
        blocked: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its mode.
        mode: u32,
    },
    /// A writable directory could not be given to the sandbox's host uid.
    #[error("giving {path} to the sandbox's uid {uid}")]
    Ownership {
        /// The sandbox's host uid.
        uid: u32,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// How the runner sandboxes what vendor code runs on the customer's VM: the bubblewrap
/// binary and the network steps with network get.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
    network: NetworkSettings,
    host_uid: Option<u32>,
}

/// A sandboxed command, ready to run: set its environment, then [`Self::run`] it. It
/// holds the step's network namespace (when it has one) until the command has exited.
#[derive(Debug)]
pub struct Sandboxed {
    /// The command (bubblewrap, or `nsenter` into the step's network running it). Its
    /// environment is the step's: set it with `env_clear` and `env`, never on the
    /// command line.
    pub command: Command,
    network: Option<StepNetwork>,
}

impl Sandboxed {
    /// Runs the command with [`child::run`]; the step's network lives until it exits.
    pub async fn run(
        self,
        timeout: Duration,
        limit: usize,
        keep_stdout: bool,
    ) -> Result<Finished, ChildError> {
        let Self { command, network } = self;
        let done = child::run(command, timeout, limit, keep_stdout).await;
        drop(network);
        done
    }
}

impl Sandbox {
    /// Sandboxing with the bubblewrap binary at `bwrap`, the default network settings
    /// (metadata blocked, `slirp4netns` from `PATH`) and, when this process is root,
    /// host uid [`SANDBOX_ID`] ([`Self::host_uid`]).
    pub fn new(bwrap: impl Into<PathBuf>) -> Self {
        Self {
            bwrap: bwrap.into(),
            network: NetworkSettings::default(),
            host_uid: host_uid::default_host_uid(SANDBOX_ID),
        }
    }

    /// The same, with `uid` (uid and gid) as the sandbox's host uid when this process
    /// is root (the runner's `--sandbox-uid`); a process that is not root keeps its own.
    pub fn with_host_uid(self, uid: u32) -> Self {
        Self {
            host_uid: host_uid::default_host_uid(uid),
            ..self
        }
    }

    /// The uid (and gid) bubblewrap, `nsenter` and the network holder run as on the
    /// host, with no supplementary groups; `None`: the runner's own (it is not root).
    pub fn host_uid(&self) -> Option<u32> {
        self.host_uid
    }

    /// The same, with `network` for steps that have network.
    pub fn with_network(self, network: NetworkSettings) -> Self {
        Self { network, ..self }
    }

    /// The network settings steps with network get.
    pub fn network(&self) -> &NetworkSettings {
        &self.network
    }

    /// Checks that bubblewrap runs and can create the namespaces steps get (run a no-op
    /// in them), so that a machine that cannot sandbox fails with a clear reason.
    pub async fn check(&self) -> Result<(), SandboxError> {
        let unavailable = |reason: String| SandboxError::Unavailable {
            bwrap: self.bwrap.display().to_string(),
            reason,
        };
        let mut command = Command::new(&self.bwrap);
        command
            .args(args(None, None, &[]))
            .args(["--", "/bin/true"])
            .env_clear();
        host_uid::run_as(&mut command, self.host_uid);
        let done = child::run(command, Duration::from_secs(30), 4096, false)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if done.exit_code() == 0 {
            Ok(())
        } else {
            Err(unavailable(format!(
                "exit code {}: {}",
                done.exit_code(),
                done.output.trim()
            )))
        }
    }

    /// `argv` sandboxed with `dir` writable and its working directory, `binds` bound,
    /// with network (its own namespace, blocked addresses refused) when `network`. The
    /// environment is empty: the caller sets it. With a host uid, the writable
    /// directories are given to it first and every bound path is checked to be
    /// reachable by it.
    pub async fn command(
        &self,
        dir: Option<&Path>,
        network: bool,
        binds: &[Bind<'_>],
        argv: &[impl AsRef<OsStr>],
    ) -> Result<Sandboxed, SandboxError> {
        if let Some(uid) = self.host_uid {
            let mut writable: Vec<PathBuf> = dir.map(Path::to_owned).into_iter().collect();
            let mut read_only = Vec::new();
            for bind in binds {
                match bind {
                    Bind::Writable(path) => writable.push(path.to_path_buf()),
                    Bind::ReadOnly(path) => read_only.push(path.to_path_buf()),
                }
            }
            tokio::task::spawn_blocking(move || host_uid::prepare(uid, &writable, &read_only))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        }
        let network = match network {
            true => Some(StepNetwork::start(&self.network, self.host_uid).await?),
            false => None,
        };
        let mut command = match &network {
            Some(network) => network.enter(&self.bwrap),
            None => Command::new(&self.bwrap),
        };
        host_uid::run_as(&mut command, self.host_uid);
        command
            .args(args(dir, network.as_ref(), binds))
            .arg("--")
            .args(argv)
            .env_clear();
        Ok(Sandboxed { command, network })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn only_system_paths_and_the_step_dir_are_bound() {
        let args = text(&args(
            Some(Path::new("/srv/state/work/action-x/job")),
            None,
            &[],
        ));
        assert!(!args.contains("--ro-bind / /"), "{args}");
        assert!(args.contains("--uid 65534 --gid 65534"), "{args}");
        assert!(args.contains("--unshare-user"), "{args}");
        assert!(!args.contains("--share-net"), "{args}");
        assert!(args.contains("--ro-bind-try /etc/resolv.conf /etc/resolv.conf"));
        assert!(args.ends_with(
            "--tmpfs /tmp --bind /srv/state/work/action-x/job /srv/state/work/action-x/job \
             --chdir /srv/state/work/action-x/job"
        ));
        // Nothing else of /etc, and no home.
        assert!(!args.contains("/etc "), "{args}");
        assert!(!args.contains("/root") && !args.contains("/home"), "{args}");
    }

    #[test]
    fn runner_files_under_system_paths_are_found() {
        assert_eq!(
            exposing(Path::new("/usr/local/outpost/state")),
            Some(PathBuf::from("/usr"))
        );
        assert_eq!(
            exposing(Path::new("/etc/ssl/private/outpost")),
            Some(PathBuf::from("/etc/ssl"))
        );
        assert_eq!(exposing(Path::new("/var/lib/outpost-runner")), None);
        assert_eq!(exposing(Path::new("/etc/outpost/secrets")), None);
    }
}
