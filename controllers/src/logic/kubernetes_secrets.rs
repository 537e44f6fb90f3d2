//! Kubernetes Secret targets of a deploy Plan: which of the App's secrets the runner
//! writes into the install's cluster before it applies a `kubernetes_manifest`
//! component.
//!
//! An App secret with `kubernetesSecret: {namespace, name, key}` is kept in the
//! cluster as that Secret. The rule: a `kubernetes_manifest` component's deploy Plan
//! carries the targets whose Secret its manifest references by name from an object in
//! the target's namespace (`secretKeyRef`, `secretRef`, a `secret` volume or projection,
//! a `secretName`, `imagePullSecrets`). So the Secret exists before the first object
//! that needs it, is re-applied with it, and is read under the role of the component
//! that uses it, not under every component's.
//!
//! A target goes into the Plan's desired state as `kubernetesSecrets[]`: `namespace`,
//! `name`, `key`, the App secret's name (`secret`) and `value`, a *reference*
//! `${outpost-secret:<secret>}` the runner resolves at execution time like any other.
//! No value ever enters the Plan.

use std::collections::BTreeSet;

use outpost_api::{App, ComponentType};
use serde_json::{Value, json};

use crate::logic::template::secret_reference;

/// The key of the targets in a deploy Plan's desired state.
pub const DESIRED_KEY: &str = "kubernetesSecrets";

/// `rendered` (a component's rendered spec) with the Secret targets its manifest
/// references under [`DESIRED_KEY`]; unchanged when there are none (so components that
/// use no Secret keep their Plan names).
pub fn with_kubernetes_secrets(app: &App, rendered: Value) -> Value {
    let targets = targets(app, &rendered);
    if targets.is_empty() {
        return rendered;
    }
    let mut rendered = rendered;
    if let Some(map) = rendered.as_object_mut() {
        map.insert(DESIRED_KEY.to_owned(), Value::Array(targets));
    }
    rendered
}

/// The Secret targets of the App that `rendered`'s manifest references, in the App's
/// order.
pub fn targets(app: &App, rendered: &Value) -> Vec<Value> {
    // Most Apps have no Secret targets: then the manifest need not be parsed.
    if !app
        .spec
        .secrets
        .iter()
        .any(|s| s.kubernetes_secret.is_some())
    {
        return Vec::new();
    }
    let manifest_type = serde_json::to_value(ComponentType::KubernetesManifest).ok();
    if rendered.get("type") != manifest_type.as_ref() {
        return Vec::new();
    }
    let referenced = referenced_secrets(rendered);
    app.spec
        .secrets
        .iter()
        .filter_map(|secret| {
            let target = secret.kubernetes_secret.as_ref()?;
            referenced
                .contains(&(target.namespace.clone(), target.name.clone()))
                .then(|| {
                    json!({
                        "namespace": target.namespace,
                        "name": target.name,
                        "key": target.key,
                        "secret": secret.name,
                        "value": secret_reference(&secret.name),
                    })
                })
        })
        .collect()
}

/// `(namespace, name)` of every Secret the manifest's objects reference. An object's
/// namespace is its own, else the manifest's, else `default`. A manifest that does not
/// parse references nothing (the runner fails its Plan with the reason).
fn referenced_secrets(rendered: &Value) -> BTreeSet<(String, String)> {
    let manifest = &rendered["manifest"];
    let default_namespace = manifest["namespace"].as_str().unwrap_or("default");
    let content = manifest["content"].as_str().unwrap_or_default();
    let documents: Vec<Value> = serde_saphyr::from_multiple(content).unwrap_or_default();
    let objects = documents.into_iter().flat_map(|document| {
        match document.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None => vec![document],
        }
    });
    let mut found = BTreeSet::new();
    for object in objects {
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(default_namespace)
            .to_owned();
        let mut names = Vec::new();
        collect(&object, None, &mut names);
        found.extend(names.into_iter().map(|name| (namespace.clone(), name)));
    }
    found
}

/// Secret names referenced anywhere in `value` (`key` is the field it is under).
fn collect(value: &Value, key: Option<&str>, names: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let name = map.get("name").and_then(Value::as_str);
            if let (Some("secretKeyRef" | "secretRef" | "secret"), Some(name)) = (key, name) {
                names.push(name.to_owned());
            }
            if let Some(name) = map.get("secretName").and_then(Value::as_str) {
                names.push(name.to_owned());
            }
            for (field, inner) in map {
                collect(inner, Some(field), names);
            }
        }
        Value::Array(items) => {
            for item in items {
                if key == Some("imagePullSecrets")
                    && let Some(name) = item.get("name").and_then(Value::as_str)
                {
                    names.push(name.to_owned());
                }
                collect(item, None, names);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> App {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "shop"},
            "spec": {"secrets": [
                {"name": "db_password", "kubernetesSecret": {"namespace": "shop", "name": "database", "key": "password"}},
                {"name": "tls_key", "kubernetesSecret": {"namespace": "shop", "name": "tls", "key": "tls.key"}},
                {"name": "pull", "kubernetesSecret": {"namespace": "other", "name": "pull", "key": ".dockerconfigjson"}},
                {"name": "api_key"}
            ]}
        }))
        .expect("a valid App")
    }

    fn component(content: &str) -> Value {
        json!({"type": "kubernetes_manifest", "manifest": {"namespace": "shop", "content": content}})
    }

    const WEB: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          env:\n            - name: P\n              valueFrom: {secretKeyRef: {name: database, key: password}}\n";

    #[test]
    fn a_component_carries_the_targets_its_manifest_references() {
        let desired = with_kubernetes_secrets(&app(), component(WEB));
        assert_eq!(
            desired[DESIRED_KEY],
            json!([{"namespace": "shop", "name": "database", "key": "password",
                    "secret": "db_password", "value": "${outpost-secret:db_password}"}])
        );
    }

    #[test]
    fn volumes_ingress_tls_and_pull_secrets_count_in_their_namespace() {
        let content = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web}\nspec: {tls: [{secretName: tls}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: other}\nspec: {imagePullSecrets: [{name: pull}], volumes: [{name: v, secret: {secretName: database}}]}\n";
        let names: Vec<Value> = targets(&app(), &component(content))
            .iter()
            .map(|t| t["secret"].clone())
            .collect();
        // `database` is referenced from namespace `other`, not the target's.
        assert_eq!(names, [json!("tls_key"), json!("pull")]);
    }

    #[test]
    fn other_components_are_unchanged() {
        let cache = component("apiVersion: v1\nkind: Service\nmetadata: {name: cache}\n");
        assert_eq!(with_kubernetes_secrets(&app(), cache.clone()), cache);
        let terraform = json!({"type": "terraform_module", "manifest": {"content": WEB}});
        assert_eq!(
            with_kubernetes_secrets(&app(), terraform.clone()),
            terraform
        );
    }
}
