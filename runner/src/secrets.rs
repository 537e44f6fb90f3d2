//! Secrets: `${outpost-secret:NAME}` references in a Plan's desired state are resolved
//! by the runner at execution time from the customer's secret store. Values never
//! enter the control plane, the journal or the audit log: executors get them as
//! environment variables ([`env_name`]) and substitute them with [`substitute`] only
//! where they hand the state to the target system.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

const PREFIX: &str = "${outpost-secret:";

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The store has no such secret.
    #[error("secret {name:?} not found in {store}")]
    NotFound {
        /// The secret's name.
        name: String,
        /// Which store was asked.
        store: String,
    },
    /// The store failed.
    #[error("cannot read secret {name:?}")]
    Io {
        /// The secret's name.
        name: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Where the runner reads secrets from (a local directory today; AWS Secrets Manager
/// in a later issue).
pub trait SecretSource: Send + Sync {
    /// The value of the secret `name`.
    fn get(&self, name: &str) -> Result<String, SecretError>;
}

/// A directory with one file per secret, named like the secret (`--secrets-dir`).
/// One trailing newline is stripped.
pub struct DirectorySecrets {
    /// The directory.
    pub dir: PathBuf,
}

impl SecretSource for DirectorySecrets {
    fn get(&self, name: &str) -> Result<String, SecretError> {
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !name.starts_with('.');
        let not_found = || SecretError::NotFound {
            name: name.to_owned(),
            store: self.dir.display().to_string(),
        };
        if !valid {
            return Err(not_found());
        }
        match std::fs::read_to_string(self.dir.join(name)) {
            Ok(mut value) => {
                if value.ends_with('\n') {
                    value.pop();
                }
                Ok(value)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_found()),
            Err(source) => Err(SecretError::Io {
                name: name.to_owned(),
                source,
            }),
        }
    }
}

/// No secret store configured: every reference fails.
pub struct NoSecrets;

impl SecretSource for NoSecrets {
    fn get(&self, name: &str) -> Result<String, SecretError> {
        Err(SecretError::NotFound {
            name: name.to_owned(),
            store: "no secret store (pass --secrets-dir)".into(),
        })
    }
}

/// The environment variable an executor finds secret `name` in:
/// `OUTPOST_SECRET_<NAME>`, upper-cased, `-` and `.` as `_`.
pub fn env_name(name: &str) -> String {
    let mut out = String::from("OUTPOST_SECRET_");
    out.extend(name.chars().map(|c| match c {
        '-' | '.' => '_',
        c => c.to_ascii_uppercase(),
    }));
    out
}

/// The names of every secret referenced in `value`, sorted.
pub fn references(value: &Value) -> Vec<String> {
    let mut names = Vec::new();
    collect(value, &mut names);
    names.sort();
    names.dedup();
    names
}

fn collect(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(start) = rest.find(PREFIX) {
                let after = &rest[start + PREFIX.len()..];
                let Some(end) = after.find('}') else { break };
                names.push(after[..end].to_owned());
                rest = &after[end + 1..];
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, names)),
        Value::Object(map) => map.values().for_each(|v| collect(v, names)),
        _ => {}
    }
}

/// Resolves every secret referenced in `desired`, as `name → value`.
pub fn resolve(
    desired: &Value,
    source: &dyn SecretSource,
) -> Result<BTreeMap<String, String>, SecretError> {
    references(desired)
        .into_iter()
        .map(|name| source.get(&name).map(|value| (name, value)))
        .collect()
}

/// `value` with each `${outpost-secret:NAME}` replaced by its value from `secrets`
/// (references without a value are left as they are).
pub fn substitute(value: &Value, secrets: &BTreeMap<String, String>) -> Value {
    match value {
        Value::String(s) if s.contains(PREFIX) => {
            let mut out = s.clone();
            for (name, secret) in secrets {
                out = out.replace(&format!("{PREFIX}{name}}}"), secret);
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, secrets)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, secrets)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_resolve_from_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("db_password"), "hunter2\n").unwrap();
        let desired = json!({"env": {"URL": "postgres://app:${outpost-secret:db_password}@db/x"},
                             "list": ["${outpost-secret:db_password}"]});
        assert_eq!(references(&desired), ["db_password"]);
        let secrets = resolve(
            &desired,
            &DirectorySecrets {
                dir: dir.path().into(),
            },
        )
        .unwrap();
        assert_eq!(secrets["db_password"], "hunter2");
        assert_eq!(
            substitute(&desired, &secrets),
            json!({"env": {"URL": "postgres://app:hunter2@db/x"}, "list": ["hunter2"]})
        );
        assert_eq!(env_name("db-password.v1"), "OUTPOST_SECRET_DB_PASSWORD_V1");
    }

    #[test]
    fn a_missing_secret_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let source = DirectorySecrets {
            dir: dir.path().into(),
        };
        let err = resolve(&json!("${outpost-secret:api_key}"), &source).unwrap_err();
        assert!(
            err.to_string().starts_with("secret \"api_key\" not found"),
            "{err}"
        );
        assert!(source.get("../etc/passwd").is_err());
    }
}
