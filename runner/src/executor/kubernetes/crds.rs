//! CustomResourceDefinitions first, as Helm and Argo CD apply them.
//!
//! * **Order**: a manifest's CRDs are applied before everything else, then its
//!   Namespaces, then the rest in the manifest's order ([`install_order`]); teardown
//!   and pruning go the other way (last applied first), so custom resources are
//!   deleted before their CRDs.
//! * **Plan**: a custom resource whose kind the cluster does not serve yet, but whose
//!   CRD the same manifest carries, cannot be dry-run; it is resolved from that CRD
//!   ([`defined_by`]) and shown as a create with a note (Argo CD's
//!   `SkipDryRunOnMissingResource`). Policies still see it as rendered.
//! * **Apply**: after the CRDs are applied, the runner waits until each is
//!   `Established` ([`await_established`], at most [`ESTABLISHED_TIMEOUT`]) before it
//!   applies anything that may need them.

use std::future::Future;
use std::time::Duration;

use anyhow::bail;
use kube_client::core::{ApiResource, GroupVersionKind};
use kube_client::discovery::Scope;
use serde_json::Value;

/// How long the apply waits for a CRD to be `Established` (Helm waits 60 s too).
pub const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);
/// How often it looks.
const POLL: Duration = Duration::from_millis(200);

/// Whether `object` is an `apiextensions.k8s.io` CustomResourceDefinition.
pub fn is_crd(object: &Value) -> bool {
    object["kind"] == "CustomResourceDefinition"
        && object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))
}

/// Where `object` goes in the apply: CRDs (0), then Namespaces (1), then the rest (2);
/// a stable sort by it keeps the manifest's order within each.
pub fn install_order(object: &Value) -> u8 {
    if is_crd(object) {
        0
    } else if object["kind"] == "Namespace" && object["apiVersion"] == "v1" {
        1
    } else {
        2
    }
}

/// The resource of `api_version`/`kind` as one of `crds` defines it (a served version
/// of its group), with its scope and the CRD's name; `None` when none does.
pub fn defined_by(
    crds: &[Value],
    api_version: &str,
    kind: &str,
) -> Option<(ApiResource, Scope, String)> {
    let (group, version) = api_version.rsplit_once('/')?;
    crds.iter().find_map(|crd| {
        let spec = &crd["spec"];
        let served = spec["versions"]
            .as_array()?
            .iter()
            .any(|v| v["name"] == version && v["served"].as_bool().unwrap_or(false));
        if spec["group"] != group || spec["names"]["kind"] != kind || !served {
            return None;
        }
        let plural = spec["names"]["plural"].as_str()?;
        let scope = match spec["scope"].as_str()? {
            "Cluster" => Scope::Cluster,
            _ => Scope::Namespaced,
        };
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let name = crd["metadata"]["name"].as_str()?.to_owned();
        Some((resource, scope, name))
    })
}

/// Whether a live CRD has the condition `Established` = True.
pub fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

/// Waits until every CRD of `names` is `Established`, reading each with `get` (`None`:
/// not found), looking every 200 ms for at most `timeout`. The error names the first
/// CRD that is not, and what its conditions say.
pub async fn await_established<F, Fut>(
    names: &[String],
    timeout: Duration,
    mut get: F,
) -> anyhow::Result<()>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = anyhow::Result<Option<Value>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    for name in names {
        loop {
            let live = get(name.clone()).await?;
            if live.as_ref().is_some_and(is_established) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let conditions = live
                    .as_ref()
                    .and_then(|l| l.pointer("/status/conditions"))
                    .map_or_else(|| "none".to_owned(), Value::to_string);
                bail!(
                    "the CustomResourceDefinition {name} is not Established after {} s (its conditions: {conditions}); the objects that need it were not applied",
                    timeout.as_secs_f32()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [
                    {"name": "v1", "served": true, "storage": true},
                    {"name": "v0", "served": false, "storage": false}
                ]
            }
        })
    }

    fn established(name: &str) -> Value {
        json!({"metadata": {"name": name}, "status": {"conditions": [
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"}
        ]}})
    }

    #[test]
    fn crds_go_first_then_namespaces_then_the_rest_in_order() {
        let mut objects = [
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
            widget_crd(),
        ];
        objects.sort_by_key(install_order);
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "CustomResourceDefinition",
                "Namespace",
                "Widget",
                "ConfigMap"
            ]
        );
    }

    #[test]
    fn a_custom_resource_is_resolved_from_a_served_version_of_its_crd() {
        let crds = [widget_crd()];
        let (resource, scope, name) = defined_by(&crds, "example.com/v1", "Widget").unwrap();
        assert_eq!(resource.plural, "widgets");
        assert_eq!(resource.api_version, "example.com/v1");
        assert!(matches!(scope, Scope::Namespaced));
        assert_eq!(name, "widgets.example.com");
        assert!(
            defined_by(&crds, "example.com/v0", "Widget").is_none(),
            "not served"
        );
        assert!(defined_by(&crds, "example.com/v1", "Gadget").is_none());
        assert!(defined_by(&crds, "v1", "Widget").is_none());
    }

    #[tokio::test]
    async fn the_apply_waits_until_each_crd_is_established() {
        let reads = Arc::new(AtomicUsize::new(0));
        let counter = reads.clone();
        let names = ["widgets.example.com".to_owned()];
        await_established(&names, ESTABLISHED_TIMEOUT, |name| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                // Not found, then found without conditions, then established.
                Ok(match n {
                    0 => None,
                    1 => Some(json!({"metadata": {"name": name}})),
                    _ => Some(established(&name)),
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_crd_never_established_fails_naming_it() {
        let names = ["widgets.example.com".to_owned()];
        let err = await_established(&names, Duration::from_millis(300), |name| async move {
            Ok(Some(
                json!({"metadata": {"name": name}, "status": {"conditions": [
                    {"type": "Established", "status": "False", "reason": "Installing"}
                ]}}),
            ))
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("widgets.example.com is not Established after 0.3 s")
                && err.contains("Installing"),
            "{err}"
        );
    }
}
