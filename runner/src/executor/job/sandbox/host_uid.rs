//! The sandbox's own uid on the host (see "The step's uid" in [`super`]): starting
//! processes as it, giving it the directories a sandbox writes, and checking it can
//! reach what is bound.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::SandboxError;

/// `uid` when this process is root (only root starts processes as another uid);
/// `None` otherwise.
pub(super) fn default_host_uid(uid: u32) -> Option<u32> {
    rustix::process::geteuid().is_root().then_some(uid)
}

/// Makes `command` start as uid and gid `uid`, when there is one. The standard library
/// drops every supplementary group when a root process changes its uid this way
/// (`setgroups(0)` before `setuid`), so the child keeps none of root's groups.
pub(super) fn run_as(command: &mut Command, uid: Option<u32>) {
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
}

/// Gives each of `writable` to `uid` ([`give`]) and makes it mode 0700 (the sandbox's
/// alone; the runner, root, still reads what it leaves), then checks that `uid` can
/// reach each of `writable` and `read_only` ([`reachable`]).
pub(super) fn prepare(
    uid: u32,
    writable: &[PathBuf],
    read_only: &[PathBuf],
) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt as _;
    for path in writable {
        give(uid, path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| SandboxError::Ownership {
                uid,
                path: path.clone(),
                source,
            },
        )?;
    }
    for path in writable.iter().chain(read_only) {
        reachable(uid, path)?;
    }
    Ok(())
}

/// Makes `path` and, when it is a directory, everything under it owned by uid and gid
/// `uid`. Links are changed themselves, never followed (`lchown`, and no descent into
/// a symlink), so a link the sandbox planted cannot hand it a file of the runner's; the
/// walk keeps its own stack, so a deep tree cannot exhaust the runner's.
pub(super) fn give(uid: u32, path: &Path) -> Result<(), SandboxError> {
    let failed = |path: &Path| {
        let path = path.to_owned();
        move |source| SandboxError::Ownership { uid, path, source }
    };
    let mut pending = vec![path.to_owned()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(failed(&path))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(failed(&path))? {
                pending.push(entry.map_err(failed(&path))?.path());
            }
        }
        if meta.uid() != uid || meta.gid() != uid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).map_err(failed(&path))?;
        }
    }
    Ok(())
}

/// Checks that uid (and gid) `uid`, with no other group, can search every directory
/// above `path`, as written and resolved: bubblewrap, running as that uid, must reach it
/// to bind it. Directories that do not exist are skipped (a missing read-only bind is
/// skipped by bubblewrap too). Root (`--sandbox-uid 0`) reaches everything.
pub(super) fn reachable(uid: u32, path: &Path) -> Result<(), SandboxError> {
    if uid == 0 {
        return Ok(());
    }
    let resolved = std::fs::canonicalize(path).ok();
    for target in std::iter::once(path.to_owned()).chain(resolved) {
        for dir in target.ancestors().skip(1) {
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            let search = if meta.uid() == uid {
                0o100
            } else if meta.gid() == uid {
                0o010
            } else {
                0o001
            };
            if meta.mode() & search == 0 {
                return Err(SandboxError::Unreachable {
                    uid,
                    path: path.to_owned(),
                    blocked: dir.to_owned(),
                    owner: meta.uid(),
                    mode: meta.mode() & 0o7777,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_path_under_a_directory_the_uid_cannot_search_is_named() {
        let root = tempfile::tempdir().unwrap();
        let inner = root.path().join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        chmod(root.path(), 0o711);
        chmod(&root.path().join("a"), 0o700);
        // Owned by this process's uid: another uid cannot search it.
        let other = rustix::process::geteuid().as_raw() + 1;
        let error = reachable(other, &inner).expect_err("a 0700 directory blocks it");
        let said = error.to_string();
        assert!(
            said.contains(&format!("cannot reach {}", inner.display()))
                && said.contains(&format!("{} (owner", root.path().join("a").display()))
                && said.contains("mode 700"),
            "{said}"
        );
        reachable(0, &inner).expect("root searches any directory");
        chmod(&root.path().join("a"), 0o711);
        reachable(other, &inner).expect("0711 directories can be searched");
        // Missing paths below a searchable directory: nothing to bind, nothing to check.
        reachable(other, &inner.join("missing/file")).expect("missing paths are skipped");
    }

    #[test]
    fn giving_a_tree_never_follows_its_links() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: only root gives files to another uid");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        std::fs::write(&outside, "the runner's").unwrap();
        let dir = root.path().join("dir");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/file"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        give(65534, &dir).expect("the tree is given");
        for path in [&dir, &dir.join("sub"), &dir.join("sub/file")] {
            let meta = std::fs::metadata(path).unwrap();
            assert_eq!(
                (meta.uid(), meta.gid()),
                (65534, 65534),
                "{}",
                path.display()
            );
        }
        let link = std::fs::symlink_metadata(dir.join("link")).unwrap();
        assert_eq!(link.uid(), 65534, "the link itself is given");
        assert_eq!(
            std::fs::metadata(&outside).unwrap().uid(),
            0,
            "what the link names stays root's"
        );
        let missing = give(65534, &dir.join("nothing")).expect_err("a missing dir fails");
        assert!(missing.to_string().contains("nothing"), "{missing}");
    }
}
