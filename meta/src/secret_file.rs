//! Files that hold a credential (tokens, private keys, kubeconfigs): created mode 0600
//! inside a directory of mode 0700, whatever the umask, and brought back to those
//! modes when they already exist. The one way Outpost's binaries write such files.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// The mode of a file holding a credential: owner read and write.
pub const FILE_MODE: u32 = 0o600;
/// The mode of the directory holding it: owner only.
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` and its missing parents mode 0700, or makes an existing `dir` 0700.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
}

/// Creates (or truncates) `path` for writing, mode 0600, in a directory made 0700.
pub fn create(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        private_dir(parent)?;
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    // A file that existed keeps its mode on open: set it.
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Writes `contents` to `path`, mode 0600, in a directory made 0700.
///
/// ```no_run
/// outpost_meta::secret_file::write(std::path::Path::new(".outpost/runner/token"), "opr_…\n")?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write(path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    let mut file = create(path)?;
    file.write_all(contents.as_ref())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn secrets_are_0600_in_0700_directories_even_when_they_existed() {
        let root = std::env::temp_dir().join(format!("outpost-secret-{}", std::process::id()));
        let token = root.join("a/b/token");
        write(&token, "t1").unwrap();
        assert_eq!(std::fs::read_to_string(&token).unwrap(), "t1");
        assert_eq!(mode(&token), 0o600);
        assert_eq!(mode(&root.join("a/b")), 0o700);
        assert_eq!(mode(&root.join("a")), 0o700, "missing parents too");

        // Made readable by others behind our back: rewriting restores the modes.
        std::fs::set_permissions(&token, Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(root.join("a/b"), Permissions::from_mode(0o755)).unwrap();
        write(&token, "t2").unwrap();
        assert_eq!(std::fs::read_to_string(&token).unwrap(), "t2");
        assert_eq!((mode(&token), mode(&root.join("a/b"))), (0o600, 0o700));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
