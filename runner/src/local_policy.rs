//! The customer's local policies: the `*.rego` files of the runner's `--policies DIR`.
//!
//! They are evaluated on a terraform module's static configuration before it runs
//! (Plans and drift checks), and on the real [`Diff`] an executor computed, before apply, next to
//! the Plan's vendor policies; a local deny blocks the apply whatever the control plane
//! approved, and nothing the vendor sends can switch them off.
//!
//! Each file is one Rego v1 module declaring `package outpost.<name>`, with its
//! settings in `# outpost:` comments before the `package` line:
//!
//! ```rego
//! # outpost:inputs terraform,kubernetes
//! # outpost:enforcement warn
//! package outpost.no_database_recreate
//! ```
//!
//! * `inputs` (required): the input kinds (`kubernetes`, `terraform`, `images`, `plan`,
//!   `drift`, `static`) the policy is evaluated on, comma- or space-separated. `static`
//!   is a terraform module's configuration, read before `terraform init`: a deny there
//!   stops the Plan (or a drift check) before any vendor code runs;
//! * `enforcement` (optional): `deny` (default), `warn`, or `approve` (a `deny` result
//!   asks a person to approve the diff instead of denying it).
//!
//! Verdicts are named `local/<file name without .rego>`. Files are loaded in name
//! order; other files and subdirectories are ignored. Any file that does not compile
//! or declares no inputs fails the whole load, each error naming file, line and column.

use crate::executor::Diff;
use anyhow::Context as _;
use outpost_api::{Enforcement, PolicyInput};
use outpost_policy::{CompiledPolicy, PolicyMeta, PolicyVerdict, compile, evaluate};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The prefix of a local policy's verdict name.
pub const NAME_PREFIX: &str = "local/";

/// The compiled local policies of one directory.
#[derive(Debug, Clone, Default)]
pub struct LocalPolicies {
    policies: Vec<(PolicyMeta, CompiledPolicy)>,
}

/// Loads and compiles every `*.rego` file in `dir`.
///
/// # Errors
/// When `dir` cannot be read, or any file does not compile or lacks its
/// `# outpost:inputs` line: one line per bad file, `FILE:LINE:COLUMN: message`.
pub fn load(dir: &Path) -> anyhow::Result<LocalPolicies> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading local policies in {}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading local policies in {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "rego") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    let mut policies = Vec::new();
    let mut errors = String::new();
    for path in files {
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let module = std::fs::read_to_string(&path)
            .with_context(|| format!("reading local policy {}", path.display()))?;
        match compile_file(&file, &module) {
            Ok(policy) => policies.push(policy),
            Err(message) => {
                let _ = writeln!(errors, "{}/{message}", dir.display());
            }
        }
    }
    if !errors.is_empty() {
        anyhow::bail!("local policies do not compile:\n{}", errors.trim_end());
    }
    Ok(LocalPolicies { policies })
}

/// Compiles one file: its settings, then its module. Errors read `FILE:LINE:COL: ...`.
fn compile_file(file: &str, module: &str) -> Result<(PolicyMeta, CompiledPolicy), String> {
    let name = format!(
        "{NAME_PREFIX}{}",
        file.strip_suffix(".rego").unwrap_or(file)
    );
    let mut inputs = None;
    let mut enforcement = Enforcement::Deny;
    for (i, line) in module.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("package") {
            break;
        }
        let Some(setting) = trimmed
            .strip_prefix('#')
            .map(str::trim_start)
            .and_then(|c| c.strip_prefix("outpost:"))
        else {
            continue;
        };
        let at = |text: &str| {
            let column = line.find(text).map_or(1, |c| c + 1);
            format!("{file}:{}:{column}", i + 1)
        };
        let (key, value) = setting
            .split_once(char::is_whitespace)
            .unwrap_or((setting, ""));
        match key {
            "inputs" => {
                let mut kinds = Vec::new();
                for word in value.split([',', ' ', '\t']).filter(|w| !w.is_empty()) {
                    let kind =
                        serde_json::from_value::<PolicyInput>(word.into()).map_err(|_| {
                            format!(
                                "{}: unknown input {word:?}: expected kubernetes, terraform, \
                             images, plan, drift or static",
                                at(word)
                            )
                        })?;
                    kinds.push(kind);
                }
                if kinds.is_empty() {
                    return Err(format!("{}: outpost:inputs names no input", at("inputs")));
                }
                inputs = Some(kinds);
            }
            "enforcement" => {
                enforcement = serde_json::from_value(value.trim().into()).map_err(|_| {
                    format!(
                        "{}: enforcement {:?} must be deny, warn or approve",
                        at(value.trim()),
                        value.trim()
                    )
                })?;
            }
            other => {
                return Err(format!(
                    "{}: unknown setting outpost:{other} (expected inputs or enforcement)",
                    at(other)
                ));
            }
        }
    }
    let compiled = compile(file, module).map_err(|e| e.to_string())?;
    let inputs = inputs.ok_or_else(|| {
        format!(
            "{file}:1:1: missing `# outpost:inputs KIND[,KIND...]` comment before the package \
             line (kinds: kubernetes, terraform, images, plan, drift, static)"
        )
    })?;
    Ok((
        PolicyMeta {
            name,
            inputs,
            enforcement,
        },
        compiled,
    ))
}

impl LocalPolicies {
    /// Evaluates the policies that apply to `diff.input` against `diff.document`, one
    /// verdict per such policy, in file name order.
    pub fn evaluate(&self, diff: &Diff) -> Vec<PolicyVerdict> {
        self.evaluate_document(diff.input, &diff.document)
    }

    /// Evaluates the policies that apply to `input` against `document` (a DriftReport's
    /// spec for `drift`, see [`outpost_policy::input`]).
    pub fn evaluate_document(&self, input: PolicyInput, document: &Value) -> Vec<PolicyVerdict> {
        let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> =
            self.policies.iter().map(|(m, c)| (m, c)).collect();
        evaluate(&pairs, input, document)
    }

    /// The loaded policies' names and settings.
    pub fn policies(&self) -> impl Iterator<Item = &PolicyMeta> {
        self.policies.iter().map(|(meta, _)| meta)
    }

    /// How many policies were loaded.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether no policy was loaded.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NO_DB_REPLACE: &str = r#"# outpost:inputs terraform
package outpost.no_db_replace

deny contains msg if {
  some rc in input.resource_changes
  rc.type == "terraform_data"
  rc.name == "db"
  "delete" in rc.change.actions
  "create" in rc.change.actions
  msg := sprintf("%s would be replaced", [rc.address])
}
"#;

    const LABELS: &str = r#"# A customer policy.
#   outpost:inputs kubernetes, plan
# outpost:enforcement warn
package outpost.labels

deny contains "no team label" if not input.metadata.labels.team
"#;

    fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).expect("write policy");
        }
        dir
    }

    fn diff(input: PolicyInput, document: serde_json::Value) -> Diff {
        Diff {
            input,
            document,
            summary: String::new(),
            changes: true,
            resources: None,
            basis: serde_json::Value::Null,
        }
    }

    #[test]
    fn policies_apply_to_their_inputs() {
        let d = dir(&[
            ("no-db-replace.rego", NO_DB_REPLACE),
            ("labels.rego", LABELS),
            ("README.md", "not a policy"),
        ]);
        let local = load(d.path()).unwrap();
        assert_eq!(local.len(), 2);
        let names: Vec<&str> = local.policies().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["local/labels", "local/no-db-replace"]);

        let replace = diff(
            PolicyInput::Terraform,
            json!({"resource_changes": [{"address": "terraform_data.db", "type": "terraform_data",
                "name": "db", "change": {"actions": ["delete", "create"]}}]}),
        );
        let verdicts = local.evaluate(&replace);
        assert_eq!(verdicts.len(), 1);
        assert_eq!(verdicts[0].policy, "local/no-db-replace");
        assert_eq!(verdicts[0].denials, ["terraform_data.db would be replaced"]);

        let update = diff(
            PolicyInput::Terraform,
            json!({"resource_changes": [{"address": "terraform_data.db", "type": "terraform_data",
                "name": "db", "change": {"actions": ["update"]}}]}),
        );
        assert!(!local.evaluate(&update)[0].denied());

        let drift = local.evaluate_document(PolicyInput::Drift, &json!({"inSync": false}));
        assert!(drift.is_empty(), "no policy declares the drift input");

        let object = diff(PolicyInput::Kubernetes, json!({"metadata": {"name": "x"}}));
        let verdicts = local.evaluate(&object);
        assert_eq!(verdicts.len(), 1);
        assert!(!verdicts[0].denied(), "warn enforcement never denies");
        assert_eq!(verdicts[0].warnings, ["no team label"]);
    }

    #[test]
    fn compile_errors_name_file_line_and_column() {
        let d = dir(&[
            ("ok.rego", NO_DB_REPLACE),
            (
                "broken.rego",
                "# outpost:inputs plan\npackage outpost.broken\n\ndeny contains msg if {\n  input.a == = 1\n}\n",
            ),
        ]);
        let err = format!("{:#}", load(d.path()).unwrap_err());
        let expected = format!(
            "{}/broken.rego:5:14: expecting expression",
            d.path().display()
        );
        assert!(err.contains(&expected), "{err}");
    }

    #[test]
    fn settings_are_checked() {
        let missing = compile_file("m.rego", "package outpost.m\n").unwrap_err();
        assert!(
            missing.starts_with("m.rego:1:1: missing `# outpost:inputs"),
            "{missing}"
        );
        let unknown = compile_file(
            "u.rego",
            "# outpost:inputs terraform,cloud\npackage outpost.u\n",
        )
        .unwrap_err();
        assert!(
            unknown.starts_with("u.rego:1:28: unknown input \"cloud\""),
            "{unknown}"
        );
        let enforcement = compile_file(
            "e.rego",
            "# outpost:inputs plan\n# outpost:enforcement block\npackage outpost.e\n",
        )
        .unwrap_err();
        assert!(
            enforcement.starts_with("e.rego:2:23: enforcement"),
            "{enforcement}"
        );
        let package = compile_file("p.rego", "# outpost:inputs plan\npackage main\n").unwrap_err();
        assert_eq!(package, "p.rego:2:1: package main must be outpost.<name>");
    }

    #[test]
    fn a_missing_directory_is_an_error_and_an_empty_one_loads_nothing() {
        assert!(load(Path::new("/nonexistent/outpost/policies")).is_err());
        let d = dir(&[]);
        assert!(load(d.path()).unwrap().is_empty());
    }
}
