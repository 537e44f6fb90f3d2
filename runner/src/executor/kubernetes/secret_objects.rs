//! The Kubernetes Secrets a deploy Plan writes before its manifest: the App's secrets
//! with a `kubernetesSecret` target, listed by the control plane in the desired state's
//! `kubernetesSecrets[]` (`namespace`, `name`, `key`, `secret`, and `value`, a
//! `${outpost-secret:NAME}` reference; see the controllers' `kubernetes_secrets`).
//!
//! The runner resolved each reference under the Plan's role before the executor runs
//! (the step's environment); here each Secret is built (type `Opaque`, label
//! [`MANAGED_BY_LABEL`]` = outpost`, annotation [`SECRETS_ANNOTATION`] naming the App
//! secrets it holds) and server-side applied with the runner's field manager. Values
//! stay in this process and the cluster: the diff, the Plan's log, the drift baseline
//! and the outputs name the Secret only; the audit log gets each key's `sha256`.

use std::collections::BTreeMap;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::{Value, json};

use crate::executor::StepContext;
use crate::executor::secret_ref;

/// The desired state's list of Secret targets.
pub const DESIRED_KEY: &str = "kubernetesSecrets";
/// The label on every Secret the runner writes, with value `outpost`.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The annotation naming the App secrets a Secret holds (comma-separated).
pub use outpost_api::annotations::SECRETS as SECRETS_ANNOTATION;

/// One Secret to write, with its values resolved.
pub struct SecretObject {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `key → (App secret, value)`.
    entries: BTreeMap<String, (String, String)>,
}

impl std::fmt::Debug for SecretObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretObject")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("keys", &self.entries.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl SecretObject {
    /// The object to server-side apply.
    pub fn object(&self) -> Value {
        let engine = base64::engine::general_purpose::STANDARD;
        let data: serde_json::Map<String, Value> = self
            .entries
            .iter()
            .map(|(key, (_, value))| (key.clone(), Value::String(engine.encode(value))))
            .collect();
        let secrets: Vec<&str> = self
            .entries
            .values()
            .map(|(secret, _)| secret.as_str())
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {MANAGED_BY_LABEL: "outpost"},
                "annotations": {SECRETS_ANNOTATION: secrets.join(",")},
            },
            "type": "Opaque",
            "data": data,
        })
    }

    /// Whether `live` (the Secret as the cluster has it, if at all) already holds every
    /// key with its value and the label.
    pub fn is_current(&self, live: Option<&Value>) -> bool {
        let Some(live) = live else { return false };
        let wanted = self.object();
        live.pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_BY_LABEL.replace('/', "~1")
        )) == Some(&json!("outpost"))
            && wanted["data"]
                .as_object()
                .into_iter()
                .flatten()
                .all(|(key, value)| live["data"].get(key) == Some(value))
    }

    /// What the audit log records: the target and each value's digest, never a value.
    pub fn audit(&self) -> Vec<Value> {
        self.entries
            .iter()
            .map(|(key, (secret, value))| {
                json!({"namespace": self.namespace, "name": self.name, "key": key,
                       "secret": secret, "sha256": crate::example_image::sha256(value.as_bytes())})
            })
            .collect()
    }

    /// `secret NS/NAME (keys: a, b)`, for summaries and the Plan's log.
    pub fn describe(&self) -> String {
        let keys: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        format!(
            "secret {}/{} (keys: {})",
            self.namespace,
            self.name,
            keys.join(", ")
        )
    }
}

/// The Secrets `ctx`'s desired state lists, targets of one Secret merged, each value
/// resolved from the step's environment. A reference the runner did not resolve fails.
pub fn secret_objects(ctx: &StepContext) -> anyhow::Result<Vec<SecretObject>> {
    let mut objects: BTreeMap<(String, String), SecretObject> = BTreeMap::new();
    let targets = ctx
        .desired
        .get(DESIRED_KEY)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for target in targets {
        let field = |name: &str| {
            target
                .get(name)
                .and_then(Value::as_str)
                .with_context(|| format!("a {DESIRED_KEY} entry has no {name}: {target}"))
        };
        let (namespace, name, key) = (field("namespace")?, field("name")?, field("key")?);
        let secret = field("secret")?;
        let value = secret_ref::resolve(field("value")?, &ctx.env)?;
        objects
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| SecretObject {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                entries: BTreeMap::new(),
            })
            .entries
            .insert(key.to_owned(), (secret.to_owned(), value));
    }
    Ok(objects.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outpost_api::Operation;
    use std::time::Duration;

    fn ctx(desired: Value, env: BTreeMap<String, String>) -> StepContext {
        StepContext {
            plan: "p".into(),
            plan_uid: "u".into(),
            operation: Operation::Deploy,
            entity: "web".into(),
            desired,
            work_dir: std::env::temp_dir(),
            env,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn targets_of_one_secret_merge_and_values_never_show() {
        let desired = json!({DESIRED_KEY: [
            {"namespace": "shop", "name": "db", "key": "password", "secret": "db_password",
             "value": "${outpost-secret:db_password}"},
            {"namespace": "shop", "name": "db", "key": "user", "secret": "db_user",
             "value": "${outpost-secret:db_user}"},
        ]});
        let env = BTreeMap::from([
            (
                crate::secrets::env_name("db_password"),
                "hunter2".to_owned(),
            ),
            (crate::secrets::env_name("db_user"), "app".to_owned()),
        ]);
        let objects = secret_objects(&ctx(desired.clone(), env)).unwrap();
        assert_eq!(objects.len(), 1);
        let object = objects[0].object();
        assert_eq!(
            object["data"],
            json!({"password": "aHVudGVyMg==", "user": "YXBw"})
        );
        assert_eq!(object["type"], "Opaque");
        assert_eq!(
            object["metadata"]["annotations"][SECRETS_ANNOTATION],
            "db_password,db_user"
        );
        assert!(objects[0].is_current(Some(&object)));
        assert!(!objects[0].is_current(None));
        let shown = format!(
            "{:?} {} {}",
            objects[0],
            objects[0].describe(),
            Value::Array(objects[0].audit())
        );
        assert!(
            !shown.contains("hunter2") && !shown.contains("aHVudGVyMg"),
            "{shown}"
        );
        assert!(
            shown.contains(&crate::example_image::sha256(b"hunter2")),
            "{shown}"
        );

        let unresolved = secret_objects(&ctx(desired, BTreeMap::new())).unwrap_err();
        assert!(
            unresolved.to_string().contains("db_password"),
            "{unresolved}"
        );

        // A teardown's diff (which policies read) lists the Secret without its data.
        let listed = super::super::without_secret_data(object);
        assert_eq!(listed["metadata"]["name"], "db");
        assert!(listed.get("data").is_none(), "{listed}");
        let other =
            json!({"kind": "Secret", "metadata": {"name": "vendor"}, "data": {"k": "dg=="}});
        assert_eq!(super::super::without_secret_data(other.clone()), other);
    }
}
