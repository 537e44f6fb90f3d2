//! Process limits a server with many connections needs.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Open files this process asks for at most (a watch is a connection, and a fleet of
/// runners holds one each, plus one for their other calls).
const WANTED_OPEN_FILES: u64 = 262_144;

/// Raises the soft limit of open files, as the Go runtime does for kube-apiserver: the
/// default soft limit (1,024) is far below what a fleet of runners opens. The limit is
/// raised to [`WANTED_OPEN_FILES`], above the hard limit where the process may (root
/// may, up to the kernel's `fs.nr_open`), else to the hard limit. Child processes
/// inherit it. Returns the soft limit now in force.
pub fn raise_open_files() -> anyhow::Result<u64> {
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(hard);
    let wanted = WANTED_OPEN_FILES.min(nr_open);
    if wanted > hard {
        let above = Rlimit {
            current: Some(wanted),
            maximum: Some(wanted),
        };
        if setrlimit(Resource::Nofile, above).is_ok() {
            return Ok(wanted);
        }
    }
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= wanted.min(hard) {
        return Ok(current);
    }
    let raised = Rlimit {
        current: Some(wanted.min(hard)),
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, raised).map_err(|e| {
        anyhow::anyhow!("cannot raise the open-files limit from {current} to {hard}: {e}")
    })?;
    Ok(wanted.min(hard))
}
