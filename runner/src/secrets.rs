//! Secrets: `${outpost-secret:NAME}` references in a Plan's desired state are resolved
//! by the runner at execution time from the customer's secret store. Values never
//! enter the control plane, the journal or the audit log: executors get them as
//! environment variables ([`env_name`]) and substitute them with [`substitute`] only
//! where they hand the state to the target system.

use std::collections::BTreeMap;
use std::path::PathBuf;

use futures::future::BoxFuture;
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
    /// The store answered with an error (AWS Secrets Manager: access denied, …).
    #[error("cannot read secret {name:?} from {store}: {reason}")]
    Store {
        /// The secret's name.
        name: String,
        /// Which store was asked.
        store: String,
        /// The store's error (never the value).
        reason: String,
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

/// Where the runner reads secrets from: a local directory ([`DirectorySecrets`]) or the
/// customer's AWS Secrets Manager ([`SecretsManagerSecrets`]).
pub trait SecretSource: Send + Sync {
    /// The value of the secret `name`.
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, SecretError>>;
}

/// Whether `name` is a secret name the stores accept: letters, digits, `-`, `_`, `.`,
/// not starting with `.` (no path can be formed from it).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
}

/// A directory with one file per secret, named like the secret (`--secrets-dir`).
/// One trailing newline is stripped.
pub struct DirectorySecrets {
    /// The directory.
    pub dir: PathBuf,
}

impl SecretSource for DirectorySecrets {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, SecretError>> {
        Box::pin(std::future::ready(self.read(name)))
    }
}

impl DirectorySecrets {
    fn read(&self, name: &str) -> Result<String, SecretError> {
        let valid = valid_name(name);
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
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, SecretError>> {
        Box::pin(std::future::ready(Err(SecretError::NotFound {
            name: name.to_owned(),
            store: "no secret store (pass --secrets-dir or --stack)".into(),
        })))
    }
}

/// The customer's AWS Secrets Manager: secret `NAME` of install `NS/INSTALL` is the one
/// the install stack creates, named `outpost/NS/INSTALL/NAME`. A Plan's secrets are
/// read with the credentials of the Plan's assumed role, a drift check's with those of
/// the component's deploy role ([`crate::drift::role`]). The stack lets every role read
/// exactly those secrets.
pub struct SecretsManagerSecrets {
    client: aws_sdk_secretsmanager::Client,
    prefix: String,
}

impl SecretsManagerSecrets {
    /// The secrets of install `namespace/install` in the account `config` reaches.
    pub fn new(config: &aws_config::SdkConfig, namespace: &str, install: &str) -> Self {
        Self {
            client: aws_sdk_secretsmanager::Client::new(config),
            prefix: format!("outpost/{namespace}/{install}/"),
        }
    }

    /// The Secrets Manager name of secret `name`.
    pub fn secret_id(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

impl SecretSource for SecretsManagerSecrets {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, SecretError>> {
        use aws_sdk_secretsmanager::error::ProvideErrorMetadata as _;
        Box::pin(async move {
            let id = self.secret_id(name);
            let store = format!("AWS Secrets Manager ({id})");
            if !valid_name(name) {
                return Err(SecretError::NotFound {
                    name: name.to_owned(),
                    store,
                });
            }
            match self.client.get_secret_value().secret_id(&id).send().await {
                Ok(value) => {
                    value
                        .secret_string()
                        .map(str::to_owned)
                        .ok_or_else(|| SecretError::Store {
                            name: name.to_owned(),
                            store,
                            reason: "the secret has no string value".into(),
                        })
                }
                Err(e) if e.code() == Some("ResourceNotFoundException") => {
                    Err(SecretError::NotFound {
                        name: name.to_owned(),
                        store,
                    })
                }
                Err(e) => Err(SecretError::Store {
                    name: name.to_owned(),
                    store,
                    reason: match (e.code(), e.raw_response()) {
                        (Some(code), _) => format!("{code}: {}", e.message().unwrap_or_default()),
                        // An answer the SDK could not read (an XML error from an
                        // emulator): its status and the start of its body, which holds
                        // no secret (there was no value).
                        (None, Some(raw)) => format!(
                            "HTTP {}: {}",
                            raw.status().as_u16(),
                            String::from_utf8_lossy(raw.body().bytes().unwrap_or_default())
                                .chars()
                                .take(300)
                                .collect::<String>()
                        ),
                        (None, None) => e.to_string(),
                    },
                }),
            }
        })
    }
}

/// The prefix of the environment variables holding resolved secrets ([`env_name`]).
pub const ENV_PREFIX: &str = "OUTPOST_SECRET_";

/// The environment variable an executor finds secret `name` in:
/// `OUTPOST_SECRET_<NAME>`, upper-cased, `-` and `.` as `_`.
pub fn env_name(name: &str) -> String {
    let mut out = String::from(ENV_PREFIX);
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
pub async fn resolve(
    desired: &Value,
    source: &dyn SecretSource,
) -> Result<BTreeMap<String, String>, SecretError> {
    let mut resolved = BTreeMap::new();
    for name in references(desired) {
        let value = source.get(&name).await?;
        resolved.insert(name, value);
    }
    Ok(resolved)
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

    #[tokio::test]
    async fn references_resolve_from_a_directory() {
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
        .await
        .unwrap();
        assert_eq!(secrets["db_password"], "hunter2");
        assert_eq!(
            substitute(&desired, &secrets),
            json!({"env": {"URL": "postgres://app:hunter2@db/x"}, "list": ["hunter2"]})
        );
        assert_eq!(env_name("db-password.v1"), "OUTPOST_SECRET_DB_PASSWORD_V1");
    }

    #[tokio::test]
    async fn a_missing_secret_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let source = DirectorySecrets {
            dir: dir.path().into(),
        };
        let err = resolve(&json!("${outpost-secret:api_key}"), &source)
            .await
            .unwrap_err();
        assert!(
            err.to_string().starts_with("secret \"api_key\" not found"),
            "{err}"
        );
        assert!(source.get("../etc/passwd").await.is_err());
    }
}
