//! Objects as the executor compares, names and records them: normalised (without what
//! the server manages), parsed from a manifest, addressed as diffs name them, and their
//! references kept in the entity's work directory for teardown.

use super::*;

/// A live or applied object without what the server manages: `metadata.managedFields`,
/// `resourceVersion`, `uid`, `creationTimestamp`, `generation`, and `status`. Drift and
/// "unchanged" are decided on this.
pub fn normalise(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    object
}

/// A Secret the runner wrote without its data (policies read teardown diffs); any other
/// object as it is.
pub(super) fn without_secret_data(mut object: Value) -> Value {
    let label = format!(
        "/metadata/labels/{}",
        secret_objects::MANAGED_BY_LABEL.replace('/', "~1")
    );
    if object["kind"] == "Secret"
        && object.pointer(&label) == Some(&json!("outpost"))
        && let Some(map) = object.as_object_mut()
    {
        map.remove("data");
        map.remove("stringData");
    }
    object
}

pub(super) fn without_managed_fields(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    object
}

/// Every object of a multi-document YAML manifest; `List`s are expanded, empty
/// documents skipped.
pub fn parse_manifest(content: &str) -> anyhow::Result<Vec<Value>> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(content).context("the manifest is not valid YAML")?;
    let mut objects = Vec::new();
    for document in documents {
        match document {
            Value::Null => {}
            Value::Object(ref map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && map.get("items").is_some_and(Value::is_array) =>
            {
                objects.extend(map["items"].as_array().cloned().unwrap_or_default());
            }
            Value::Object(ref map)
                if map.contains_key("apiVersion") && map.contains_key("kind") =>
            {
                objects.push(document);
            }
            other => bail!("a manifest document is not a Kubernetes object: {other}"),
        }
    }
    Ok(objects)
}

/// The references among `recorded` whose object is not among `wanted` (references
/// too: same kind, namespace and name), last recorded first (the order teardown
/// deletes in).
pub(super) fn dropped(recorded: &[Value], wanted: &[Value]) -> Vec<Value> {
    let key = |r: &Value| (r["kind"].clone(), r["namespace"].clone(), r["name"].clone());
    recorded
        .iter()
        .rev()
        .filter(|r| !wanted.iter().any(|w| key(w) == key(r)))
        .cloned()
        .collect()
}

/// `Kind/namespace/name` (`Kind/name` when cluster-scoped), as diffs name objects.
pub(super) fn address(target: &Target) -> String {
    match &target.namespace {
        Some(ns) => format!("{}/{ns}/{}", target.resource.kind, target.name),
        None => format!("{}/{}", target.resource.kind, target.name),
    }
}

/// [`address`] of an object as the API server returned it.
pub(super) fn object_address(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

pub(super) fn describe(target: &Target) -> String {
    let kind = target.resource.kind.to_lowercase();
    match &target.namespace {
        Some(ns) => format!("{kind} {ns}/{}", target.name),
        None => format!("{kind} {}", target.name),
    }
}

pub(super) fn write_references(work_dir: &Path, references: &[Value]) -> anyhow::Result<()> {
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let path = work_dir.join(OBJECTS_FILE);
    std::fs::write(&path, serde_json::to_vec_pretty(references)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

pub(super) fn read_references(work_dir: &Path) -> anyhow::Result<Vec<Value>> {
    let path = work_dir.join(OBJECTS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a list of object references", path.display())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}
