//! Where the entities' work dirs live: a directory of their own (`--work-dir`), apart
//! from the state dir.
//!
//! Steps and terraform run as the sandbox's host uid when the runner is root
//! ([`crate::executor::job::sandbox`]), and bubblewrap binds their work dirs as that
//! uid: it must be able to search every directory above them. The state dir, which
//! holds the signing key, the journal and the audit log, stays 0700 and the runner's
//! alone; the work dirs' directory and each entity's work dir are 0711 (searchable,
//! not listable), and the directories sandboxes write in them are the sandbox uid's.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The mode of the work dirs' directory and of each entity's work dir.
pub const MODE: u32 = 0o711;

/// Where runners before the separate work dirs' directory kept work dirs.
const IN_STATE_DIR: &str = "work";

/// Creates `root` (mode [`MODE`]); a `work` directory an older runner left in
/// `state_dir` becomes `root` when `root` does not exist yet (terraform state kept
/// there must not be lost).
pub fn prepare(state_dir: &Path, root: &Path) -> anyhow::Result<()> {
    let old = state_dir.join(IN_STATE_DIR);
    if old.is_dir() && old != root {
        if root.exists() {
            tracing::warn!(old = %old.display(), work_dir = %root.display(),
                "the state dir holds work dirs of an older runner; using the work dir, leaving them");
        } else {
            if let Some(parent) = root.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            std::fs::rename(&old, root).with_context(|| {
                format!(
                    "cannot move the work dirs from {} to {}: move them by hand (the runner \
                     keeps work dirs outside the state dir now)",
                    old.display(),
                    root.display()
                )
            })?;
            tracing::info!(from = %old.display(), to = %root.display(), "moved the work dirs out of the state dir");
        }
    }
    searchable_dir(root)
}

/// The work dir of entity `name` of kind `kind` (`component`, `sandbox`, `action`),
/// created mode [`MODE`]: `ROOT/<kind>-<name>`.
pub fn entity(root: &Path, kind: &str, name: &str) -> anyhow::Result<PathBuf> {
    let dir = root.join(format!("{kind}-{name}"));
    searchable_dir(&dir)?;
    Ok(dir)
}

/// Creates `dir` (and missing parents) and makes it mode [`MODE`].
fn searchable_dir(dir: &Path) -> anyhow::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(MODE)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, Permissions::from_mode(MODE)))
        .with_context(|| format!("cannot create {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn work_dirs_an_older_runner_kept_in_the_state_dir_move_out_of_it() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        let old = state.join("work/component-db/module");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("terraform.tfstate"), "{}").unwrap();
        let work = root.path().join("state-work");
        prepare(&state, &work).unwrap();
        assert!(!state.join("work").exists());
        assert_eq!(
            std::fs::read_to_string(work.join("component-db/module/terraform.tfstate")).unwrap(),
            "{}"
        );
        assert_eq!(std::fs::metadata(&work).unwrap().mode() & 0o777, MODE);
        let entity = entity(&work, "action", "migrate").unwrap();
        assert_eq!(entity, work.join("action-migrate"));
        assert_eq!(std::fs::metadata(&entity).unwrap().mode() & 0o777, MODE);
        // Started again: nothing left to move, the directory stays.
        prepare(&state, &work).unwrap();
        assert!(work.join("component-db/module/terraform.tfstate").exists());
    }
}
