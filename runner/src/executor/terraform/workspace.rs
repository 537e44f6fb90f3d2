//! The terraform working directory of one entity: which module a Plan's desired state
//! names, and laying it out (module files, variables) under the entity's work dir.
//!
//! Layout of `StepContext::work_dir`:
//!
//! | path | what |
//! |---|---|
//! | `module/` | the module's files, `outpost.auto.tfvars.json`, with a state bucket `outpost_backend.tf.json` ([`super::StateBackend`]), and what terraform keeps: `.terraform/`, `.terraform.lock.hcl`, `terraform.tfstate` (local state, kept across Plans; none with a state bucket) |
//! | `plans/<plan>.tfplan` | the saved plan of one Plan, applied by `apply`, removed after |
//! | `terraform.rc` | the runner's terraform CLI configuration (the provider allow-list), rewritten before each command; read-only to terraform |

use super::TerraformError;
use super::module_paths;
use crate::executor::secret_ref;
use outpost_api::TerraformSource;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Name of the generated variables file (no secret values in it).
pub const TFVARS_FILE: &str = "outpost.auto.tfvars.json";

/// What terraform keeps in the module directory between Plans.
pub(super) const KEPT: [&str; 5] = [
    ".terraform",
    ".terraform.lock.hcl",
    "terraform.tfstate",
    "terraform.tfstate.backup",
    ".terraform.tfstate.lock.info",
];

/// The module a Plan's desired state names.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleSpec {
    /// Where the files come from.
    pub origin: Origin,
    /// Variables, as rendered (strings, possibly with secret references).
    pub variables: BTreeMap<String, String>,
}

/// Where a module's files come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A local directory, copied.
    Directory(PathBuf),
    /// Inline files.
    Files(BTreeMap<String, String>),
}

/// The sandbox block of an App (`{type, source or files, variables}`).
#[derive(Deserialize)]
struct SandboxBlock {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
}

/// Reads the module out of a desired state: a rendered ComponentSpec (`terraform`), a
/// sandbox (`{"sandbox": {...}}` or the sandbox block itself). `None` when the desired
/// state names no module (a teardown Plan's `{"component": NAME}`). Inline file names
/// are checked ([`module_paths::file_name`]).
pub fn module_of(desired: &Value) -> Result<Option<ModuleSpec>, TerraformError> {
    let module = named_module(desired)?;
    if let Some(ModuleSpec {
        origin: Origin::Files(files),
        ..
    }) = &module
    {
        for name in files.keys() {
            module_paths::file_name(name)?;
        }
    }
    Ok(module)
}

fn named_module(desired: &Value) -> Result<Option<ModuleSpec>, TerraformError> {
    let invalid = |e: serde_json::Error| TerraformError::InvalidDesiredState(e.to_string());
    if let Some(block) = desired.get("terraform") {
        let source: TerraformSource = serde_json::from_value(block.clone()).map_err(invalid)?;
        let origin = if source.files.is_empty() {
            Origin::Directory(local_directory(&source.source)?)
        } else {
            Origin::Files(source.files)
        };
        return Ok(Some(ModuleSpec {
            origin,
            variables: source.variables,
        }));
    }
    let sandbox = desired.get("sandbox").unwrap_or(desired);
    let names_module = sandbox.get("source").is_some() || sandbox.get("files").is_some();
    if names_module && sandbox.get("type").is_some() {
        let block: SandboxBlock = serde_json::from_value(sandbox.clone()).map_err(invalid)?;
        if block.type_ != "terraform_module" {
            return Err(TerraformError::InvalidDesiredState(format!(
                "sandbox type {:?} is not terraform_module",
                block.type_
            )));
        }
        let origin = if block.files.is_empty() {
            Origin::Directory(local_directory(&block.source)?)
        } else {
            Origin::Files(block.files)
        };
        return Ok(Some(ModuleSpec {
            origin,
            variables: block.variables,
        }));
    }
    Ok(None)
}

/// The directory a local source names: an absolute path or a `file://` URL.
fn local_directory(source: &str) -> Result<PathBuf, TerraformError> {
    let path = source.strip_prefix("file://").unwrap_or(source);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(TerraformError::UnsupportedSource(source.to_owned()))
    }
}

/// The module directory under `work_dir`.
pub fn module_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("module")
}

/// The directory of saved plans under `work_dir`.
pub fn plans_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("plans")
}

/// Where one Plan's saved plan lives.
pub fn plan_file(work_dir: &Path, plan: &str) -> PathBuf {
    plans_dir(work_dir).join(format!("{plan}.tfplan"))
}

/// Replaces the module's files in `dir` with `spec`'s (keeping terraform's state and
/// caches) and writes the non-secret variables to [`TFVARS_FILE`].
pub async fn lay_out(dir: &Path, spec: &ModuleSpec) -> Result<(), TerraformError> {
    let io = |what: String| move |source| TerraformError::Io { what, source };
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(io(format!("creating {}", dir.display())))?;
    let mut entries = tokio::fs::read_dir(dir)
        .await
        .map_err(io(format!("reading {}", dir.display())))?;
    while let Some(entry) = entries
        .next_entry()
        .await
        .map_err(io(format!("reading {}", dir.display())))?
    {
        if KEPT.iter().any(|k| entry.file_name() == **k) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            tokio::fs::remove_dir_all(&path).await
        } else {
            tokio::fs::remove_file(&path).await
        };
        removed.map_err(io(format!("removing {}", path.display())))?;
    }
    match &spec.origin {
        Origin::Files(files) => {
            for (name, content) in files {
                module_paths::write_inline(dir, name, content).await?;
            }
        }
        Origin::Directory(source) => {
            let (source, dir) = (source.clone(), dir.to_owned());
            tokio::task::spawn_blocking(move || copy_module(&source, &dir))
                .await
                .map_err(|e| TerraformError::Io {
                    what: "copying the module".into(),
                    source: std::io::Error::other(e),
                })??;
        }
    }
    let tfvars = serde_json::to_vec_pretty(&tfvars(&spec.variables)).unwrap_or_default();
    let path = dir.join(TFVARS_FILE);
    tokio::fs::write(&path, tfvars)
        .await
        .map_err(io(format!("writing {}", path.display())))
}

/// Copies a module directory, without terraform's state and caches.
fn copy_module(from: &Path, to: &Path) -> Result<(), TerraformError> {
    let io = |what: String| move |source| TerraformError::Io { what, source };
    let entries =
        std::fs::read_dir(from).map_err(io(format!("reading module source {}", from.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("reading {}", from.display())))?;
        let name = entry.file_name();
        if KEPT.iter().any(|k| name == **k) || name.to_string_lossy().ends_with(".tfstate") {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry
            .file_type()
            .map_err(io(format!("reading {}", src.display())))?;
        if kind.is_dir() {
            std::fs::create_dir_all(&dst).map_err(io(format!("creating {}", dst.display())))?;
            copy_module(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(io(format!("copying {}", src.display())))?;
        }
    }
    Ok(())
}

/// The variables file: variables without secret references. A value that parses as a
/// JSON array or object is passed decoded (for `list`/`map`/`object` variables); every
/// other value stays a string, which terraform converts to `number` or `bool` when the
/// variable's type asks for it (so `"1.10"` stays `"1.10"` for a string variable).
pub fn tfvars(variables: &BTreeMap<String, String>) -> Value {
    let mut out = Map::new();
    for (name, value) in variables {
        if secret_ref::has_reference(value) {
            continue;
        }
        out.insert(name.clone(), decode(value));
    }
    Value::Object(out)
}

fn decode(value: &str) -> Value {
    match serde_json::from_str::<Value>(value) {
        Ok(decoded @ (Value::Array(_) | Value::Object(_))) => decoded,
        _ => Value::String(value.to_owned()),
    }
}

/// Environment variables (`TF_VAR_<name>`) for the variables that reference secrets,
/// resolved from `env`: secret values reach terraform only through its environment.
pub fn secret_variables(
    variables: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, TerraformError> {
    variables
        .iter()
        .filter(|(_, value)| secret_ref::has_reference(value))
        .map(|(name, value)| {
            let resolved = secret_ref::resolve(value, env)?;
            let resolved = match decode(&resolved) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            Ok((format!("TF_VAR_{name}"), resolved))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn desired_states_that_name_a_module() {
        let component = json!({"app": "a", "type": "terraform_module",
            "terraform": {"source": "file:///m", "variables": {"a": "1"}}});
        let spec = module_of(&component).unwrap().unwrap();
        assert_eq!(spec.origin, Origin::Directory("/m".into()));
        assert_eq!(spec.variables["a"], "1");
        let sandbox = json!({"sandbox": {"type": "terraform_module", "source": "/s"}});
        assert_eq!(
            module_of(&sandbox).unwrap().unwrap().origin,
            Origin::Directory("/s".into())
        );
        let bare = json!({"type": "terraform_module", "source": "/s", "operationRoles": {}});
        assert!(module_of(&bare).unwrap().is_some());
        let inline = json!({"type": "terraform_module", "files": {"main.tf": "x"},
            "variables": {"name": "n"}});
        let spec = module_of(&inline).unwrap().unwrap();
        assert_eq!(
            spec.origin,
            Origin::Files(BTreeMap::from([("main.tf".into(), "x".into())]))
        );
        assert_eq!(spec.variables["name"], "n");
        assert_eq!(module_of(&json!({"component": "db"})).unwrap(), None);
        let remote = json!({"terraform": {"source": "registry.terraform.io/acme/db/aws"}});
        assert!(matches!(
            module_of(&remote),
            Err(TerraformError::UnsupportedSource(_))
        ));
    }

    #[test]
    fn tfvars_decode_collections_only_and_skip_secrets() {
        let vars = BTreeMap::from([
            ("list".to_owned(), r#"["a","b"]"#.to_owned()),
            ("version".to_owned(), "1.10".to_owned()),
            ("flag".to_owned(), "true".to_owned()),
            ("password".to_owned(), "${outpost-secret:pw}".to_owned()),
        ]);
        assert_eq!(
            tfvars(&vars),
            json!({"list": ["a", "b"], "version": "1.10", "flag": "true"})
        );
        let env = BTreeMap::from([(crate::secrets::env_name("pw"), "hunter2".to_owned())]);
        assert_eq!(
            secret_variables(&vars, &env).unwrap(),
            [("TF_VAR_password".to_owned(), "hunter2".to_owned())]
        );
    }
}
