//! The customer's local policies: every `*.rego` file in `--policies DIR`, evaluated on
//! the real diff an executor computed, before apply. The vendor cannot switch them off:
//! a module that does not compile or cannot be read denies (fails closed).

use std::path::Path;

use outpost_api::{Enforcement, PolicyInput};
use outpost_policy::{PolicyMeta, PolicyVerdict, compile};

use crate::executor::Diff;

/// The verdicts of every local policy on `diff` (one per `*.rego` file, in name order).
/// Each module applies to every input kind with `deny` enforcement.
pub fn evaluate(dir: &Path, diff: &Diff) -> Vec<PolicyVerdict> {
    let deny = |policy: String, message: String| PolicyVerdict {
        policy,
        enforcement: Enforcement::Deny,
        denials: vec![message],
        warnings: vec![],
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            return vec![deny(
                dir.display().to_string(),
                format!("cannot read the local policies: {e}"),
            )];
        }
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rego"))
        .collect();
    files.sort();
    let mut verdicts = Vec::new();
    for file in files {
        let name = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let module = match std::fs::read_to_string(&file) {
            Ok(module) => module,
            Err(e) => {
                verdicts.push(deny(name, format!("cannot read {}: {e}", file.display())));
                continue;
            }
        };
        let compiled = match compile(&file.display().to_string(), &module) {
            Ok(compiled) => compiled,
            Err(e) => {
                verdicts.push(deny(name, e.to_string()));
                continue;
            }
        };
        let meta = PolicyMeta {
            name,
            inputs: vec![
                PolicyInput::Kubernetes,
                PolicyInput::Terraform,
                PolicyInput::Images,
                PolicyInput::Plan,
                PolicyInput::Drift,
            ],
            enforcement: Enforcement::Deny,
        };
        verdicts.extend(outpost_policy::evaluate(
            &[(&meta, &compiled)],
            diff.input,
            &diff.document,
        ));
    }
    verdicts
}
