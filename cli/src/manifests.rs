//! Reading kubectl-style manifest directories and applying them.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kube_client::api::{Api, DynamicObject, Patch, PatchParams};
use kube_client::core::{ApiResource, GroupVersionKind};
use outpost_apiserver::registry::Registry;
use serde_json::Value;

/// Every document of every `*.yaml`/`*.yml`/`*.json` file under `dir`, in path order.
pub fn read_dir(dir: &Path) -> anyhow::Result<Vec<(PathBuf, Value)>> {
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("{} is not valid YAML", file.display()))?;
        documents.extend(
            docs.into_iter()
                .filter(|d| !d.is_null())
                .map(|d| (file.clone(), d)),
        );
    }
    Ok(documents)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(path);
        }
    }
    Ok(())
}

/// Server-side applies every document to `namespace` as `manager`.
pub async fn apply(
    client: &kube_client::Client,
    registry: &Registry,
    namespace: &str,
    documents: &[(PathBuf, Value)],
    manager: &str,
) -> anyhow::Result<usize> {
    for (file, document) in documents {
        let object: DynamicObject = serde_json::from_value(document.clone())
            .with_context(|| format!("{}: not a Kubernetes object", file.display()))?;
        let types = object
            .types
            .as_ref()
            .with_context(|| format!("{}: apiVersion and kind are required", file.display()))?;
        let gvk = GroupVersionKind::try_from(types)?;
        let rt = registry
            .all()
            .find(|rt| rt.group == gvk.group && rt.version == gvk.version && rt.kind == gvk.kind)
            .with_context(|| {
                format!(
                    "{}: the server does not serve {}",
                    file.display(),
                    types.kind
                )
            })?;
        let resource = ApiResource::from_gvk_with_plural(&gvk, &rt.plural);
        let name = object.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        api.patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("cannot apply {} {name} from {}", types.kind, file.display()))?;
    }
    Ok(documents.len())
}
