//! Where a Plan's module may come from and where its files may go: the checks that
//! keep a vendor's desired state from writing or reading outside the entity's work dir.
//!
//! * **Inline file names** (`terraform.files`, a sandbox's `files`) are plain relative
//!   paths: no absolute path, no `..` or `.` component, no empty component, no trailing
//!   `/`, and nothing inside terraform's own state and caches ([`KEPT`]: a Plan cannot
//!   plant a provider in `.terraform/` or rewrite `terraform.tfstate`). They are
//!   written without following symlinks ([`write_inline`]): every directory on the way
//!   must be a real directory, and the file is created new.
//! * **Local module sources** (an absolute directory or `file://` URL) are allowed only
//!   under the runner's module roots (`--module-root`, none by default: a runner
//!   started without one accepts inline modules only). The source is resolved
//!   (symlinks followed) before the check, and a symlink inside it must resolve under a
//!   root too, since copying follows it.
//!
//! A refused name or source fails the Plan before its module directory is touched.

use super::TerraformError;
use super::workspace::KEPT;
use std::path::{Component, Path, PathBuf};

/// Checks an inline file name; the relative path it names.
pub fn file_name(name: &str) -> Result<PathBuf, TerraformError> {
    let refuse = |reason: &str| TerraformError::UnsafeFileName {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() {
        return Err(refuse("it is empty"));
    }
    if name.starts_with('/') {
        return Err(refuse("it is an absolute path"));
    }
    if name.ends_with('/') {
        return Err(refuse("it names a directory"));
    }
    let mut path = PathBuf::new();
    for part in name.split('/') {
        match Path::new(part).components().next() {
            _ if part.is_empty() => return Err(refuse("it has an empty path component")),
            Some(Component::ParentDir) => return Err(refuse("it has a `..` component")),
            Some(Component::CurDir) => return Err(refuse("it has a `.` component")),
            Some(Component::Normal(_)) if !part.contains('\0') => path.push(part),
            _ => return Err(refuse("it has an invalid path component")),
        }
    }
    if path == Path::new(super::BACKEND_FILE) {
        return Err(refuse(
            "the runner writes it: the state backend in the install's bucket",
        ));
    }
    let first = path.components().next().map(|c| c.as_os_str());
    if KEPT
        .iter()
        .any(|kept| first == Some(std::ffi::OsStr::new(kept)))
    {
        return Err(refuse(
            "it is inside terraform's state or caches, which the runner keeps",
        ));
    }
    Ok(path)
}

/// Checks a local module source against `roots`; the resolved directory to copy.
pub fn source(source: &Path, roots: &[PathBuf]) -> Result<PathBuf, TerraformError> {
    let outside = |reason: String| TerraformError::SourceOutsideRoots {
        module: source.display().to_string(),
        reason,
    };
    if roots.is_empty() {
        return Err(outside(
            "the runner has no --module-root, so it accepts inline modules only".into(),
        ));
    }
    let resolved = std::fs::canonicalize(source)
        .map_err(|e| outside(format!("it cannot be resolved: {e}")))?;
    let under_root = |path: &Path| {
        roots
            .iter()
            .any(|root| std::fs::canonicalize(root).is_ok_and(|root| path.starts_with(root)))
    };
    if !under_root(&resolved) {
        return Err(outside(format!(
            "it resolves to {}, which is not under a module root ({})",
            resolved.display(),
            list(roots)
        )));
    }
    if !resolved.is_dir() {
        return Err(outside("it is not a directory".into()));
    }
    check_links(&resolved, &under_root).map_err(outside)?;
    Ok(resolved)
}

/// Refuses a symlink under `dir` that resolves outside the module roots.
fn check_links(dir: &Path, under_root: &dyn Fn(&Path) -> bool) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", dir.display()))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if kind.is_symlink() {
            let target = std::fs::canonicalize(&path)
                .map_err(|e| format!("its link {} cannot be resolved: {e}", path.display()))?;
            if !under_root(&target) {
                return Err(format!(
                    "its link {} points to {}, outside the module roots",
                    path.display(),
                    target.display()
                ));
            }
        } else if kind.is_dir() {
            check_links(&path, under_root)?;
        }
    }
    Ok(())
}

fn list(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes inline file `name` (checked by [`file_name`]) under `dir`: the directories on
/// the way are created or must be real directories (not symlinks), and the file must
/// not exist yet (so no symlink is followed at the end either).
pub async fn write_inline(dir: &Path, name: &str, content: &str) -> Result<(), TerraformError> {
    use tokio::io::AsyncWriteExt as _;
    let relative = file_name(name)?;
    let io = |what: String| move |source| TerraformError::Io { what, source };
    let mut at = dir.to_owned();
    let parts: Vec<_> = relative.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match tokio::fs::symlink_metadata(&at).await {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(TerraformError::UnsafeFileName {
                    name: name.to_owned(),
                    reason: format!("{} is not a directory", at.display()),
                });
            }
            Err(_) => tokio::fs::create_dir(&at)
                .await
                .map_err(io(format!("creating {}", at.display())))?,
        }
    }
    let path = dir.join(&relative);
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .await
        .map_err(io(format!("writing {}", path.display())))?;
    file.write_all(content.as_bytes())
        .await
        .map_err(io(format!("writing {}", path.display())))?;
    file.flush()
        .await
        .map_err(io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(name: &str) -> String {
        file_name(name).unwrap_err().to_string()
    }

    #[test]
    fn plain_relative_names_are_accepted() {
        assert_eq!(file_name("main.tf").unwrap(), PathBuf::from("main.tf"));
        assert_eq!(
            file_name("modules/db/main.tf").unwrap(),
            PathBuf::from("modules/db/main.tf")
        );
        assert_eq!(
            file_name(".terraformrc.tf").unwrap(),
            PathBuf::from(".terraformrc.tf")
        );
    }

    #[test]
    fn names_that_escape_or_touch_terraforms_files_are_refused_by_name() {
        for (name, says) in [
            ("/etc/cron.d/x", "absolute path"),
            ("../x.tf", "`..` component"),
            ("a/../../x.tf", "`..` component"),
            ("./main.tf", "`.` component"),
            ("a//b.tf", "empty path component"),
            ("", "it is empty"),
            ("modules/", "names a directory"),
            ("terraform.tfstate", "terraform's state or caches"),
            (".terraform/providers/x", "terraform's state or caches"),
        ] {
            let error = refusal(name);
            assert!(
                error.contains(&format!("inline file {name:?}")) && error.contains(says),
                "{name}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn writing_never_follows_a_symlink() {
        let root = tempfile::tempdir().unwrap();
        let (module, outside) = (root.path().join("module"), root.path().join("outside"));
        std::fs::create_dir_all(&module).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, module.join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.join("f.tf"), module.join("f.tf")).unwrap();
        let error = write_inline(&module, "linked/x.tf", "x").await.unwrap_err();
        assert!(error.to_string().contains("is not a directory"), "{error}");
        let error = write_inline(&module, "f.tf", "x").await.unwrap_err();
        assert!(error.to_string().contains("writing"), "{error}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        write_inline(&module, "nested/dir/ok.tf", "ok")
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(module.join("nested/dir/ok.tf")).unwrap(),
            "ok"
        );
    }

    #[test]
    fn local_sources_only_under_a_module_root() {
        let root = tempfile::tempdir().unwrap();
        let modules = root.path().join("modules");
        let db = modules.join("db");
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir_all(&db).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let roots = [modules.clone()];
        assert_eq!(
            source(&db, &roots).unwrap(),
            std::fs::canonicalize(&db).unwrap()
        );
        for (dir, roots, says) in [
            (db.clone(), &[][..], "has no --module-root"),
            (elsewhere.clone(), &roots[..], "not under a module root"),
            (
                db.join("../../elsewhere"),
                &roots[..],
                "not under a module root",
            ),
            (modules.join("missing"), &roots[..], "cannot be resolved"),
        ] {
            let error = source(&dir, roots).unwrap_err().to_string();
            assert!(
                error.contains(&format!("module source {:?}", dir.display().to_string()))
                    && error.contains(says),
                "{}: {error}",
                dir.display()
            );
        }
        // A symlink to outside the roots, as the source or inside it.
        let link = modules.join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let error = source(&link, &roots).unwrap_err().to_string();
        assert!(error.contains("not under a module root"), "{error}");
        std::os::unix::fs::symlink(elsewhere.join("x"), db.join("x.tf")).unwrap();
        std::fs::write(elsewhere.join("x"), "secret").unwrap();
        let error = source(&db, &roots).unwrap_err().to_string();
        assert!(error.contains("outside the module roots"), "{error}");
    }
}
