//! Strategic merge patch, for the built-in Kubernetes kinds the stand-in cluster
//! serves (`kubectl edit`, `kubectl patch` and client-side `kubectl apply` send it for
//! kinds kubectl knows).
//!
//! Kube-apiserver reads each list's patch strategy from the Go types; a schemaless
//! stand-in has no types, so lists are merged by the merge keys the core and apps types
//! declare for fields of that name (`containers` by `name`, `ports` by
//! `containerPort` or `port`, ...). Every other list is replaced, and maps merge as in a
//! JSON merge patch. The directives kubectl emits are honoured: `$patch`
//! (`replace`, `delete`, `merge`), `$setElementOrder/FIELD`, `$retainKeys` and
//! `$deleteFromPrimitiveList/FIELD`.

use serde_json::{Map, Value};

use crate::status::ApiError;

/// The merge key of a list field, by the field's name, as declared by the Kubernetes
/// core, apps and networking types; `None` for lists that are replaced whole.
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    let has = |key: &str| items.iter().any(|i| i.get(key).is_some());
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "hostAliases" => Some("ip"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        // Container ports merge by `containerPort`, Service ports by `port`.
        "ports" if has("containerPort") => Some("containerPort"),
        "ports" if has("port") => Some("port"),
        _ => None,
    }
}

/// Primitive lists that merge as sets rather than being replaced.
fn merges_as_set(field: &str) -> bool {
    field == "finalizers"
}

/// Applies a strategic merge patch `body` to `existing`.
pub fn apply_strategic_merge(existing: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    let Value::Object(patch) = patch else {
        return Err(ApiError::BadRequest(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let mut doc = existing.clone();
    merge_map(&mut doc, &patch);
    Ok(doc)
}

fn merge_map(target: &mut Value, patch: &Map<String, Value>) {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(strip_directives(replaced));
            return;
        }
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let object = target.as_object_mut().expect("made an object above");
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        object.retain(|k, _| keep.iter().any(|r| r == k) || patch.contains_key(k));
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/")
                && let (Some(Value::Array(list)), Value::Array(gone)) =
                    (object.get_mut(field), value)
            {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        match value {
            Value::Null => {
                object.remove(key);
            }
            Value::Object(sub) => {
                let slot = object.entry(key.clone()).or_insert(Value::Null);
                merge_map(slot, sub);
                if slot.is_null() {
                    object.remove(key);
                }
            }
            Value::Array(items) => {
                let order = patch.get(&format!("$setElementOrder/{key}"));
                let merged = merge_list(key, object.get(key), items, order);
                object.insert(key.clone(), merged);
            }
            other => {
                object.insert(key.clone(), other.clone());
            }
        }
    }
}

fn merge_list(
    field: &str,
    existing: Option<&Value>,
    items: &[Value],
    order: Option<&Value>,
) -> Value {
    let existing = existing
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if merges_as_set(field) {
        let mut merged = existing;
        for item in items {
            if !merged.contains(item) {
                merged.push(item.clone());
            }
        }
        return Value::Array(merged);
    }
    let Some(key) = merge_key(field, items).or_else(|| merge_key(field, &existing)) else {
        return Value::Array(
            items
                .iter()
                .map(|i| match i {
                    Value::Object(m) => Value::Object(strip_directives(m.clone())),
                    other => other.clone(),
                })
                .collect(),
        );
    };
    let mut merged = existing;
    for item in items {
        let Some(id) = item.get(key) else { continue };
        let position = merged.iter().position(|m| m.get(key) == Some(id));
        let patch = item.as_object().cloned().unwrap_or_default();
        match (position, patch.get("$patch").and_then(Value::as_str)) {
            (Some(i), Some("delete")) => {
                merged.remove(i);
            }
            (None, Some("delete")) => {}
            (Some(i), _) => merge_map(&mut merged[i], &patch),
            (None, _) => merged.push(Value::Object(strip_directives(patch))),
        }
    }
    if let Some(Value::Array(order)) = order {
        let rank = |v: &Value| {
            order
                .iter()
                .position(|o| o.get(key) == v.get(key))
                .unwrap_or(usize::MAX)
        };
        merged.sort_by_key(rank);
    }
    Value::Array(merged)
}

fn strip_directives(mut map: Map<String, Value>) -> Map<String, Value> {
    map.retain(|k, _| !k.starts_with('$'));
    for value in map.values_mut() {
        if let Value::Object(sub) = value {
            *sub = strip_directives(std::mem::take(sub));
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patched(existing: Value, patch: Value) -> Value {
        apply_strategic_merge(&existing, patch.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn containers_merge_by_name_and_maps_merge() {
        let deployment = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}]},
            {"name": "sidecar", "image": "envoy"},
        ]}}}});
        // What `kubectl edit` sends after changing one image and the replicas.
        let patch = json!({"spec": {"replicas": 3, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
            "containers": [{"name": "web", "image": "nginx:2"}],
        }}}});
        let out = patched(deployment, patch);
        assert_eq!(out["spec"]["replicas"], 3);
        let containers = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "nginx:2");
        assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
        assert_eq!(containers[1]["image"], "envoy");
        let deleted = patched(
            out,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}}),
        );
        assert_eq!(
            deleted["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn nulls_delete_and_plain_lists_replace() {
        let cm = json!({"data": {"a": "1", "b": "2"}, "metadata": {"labels": {"x": "y"}}, "spec": {"rules": [1, 2]}});
        let out = patched(
            cm,
            json!({"data": {"a": null}, "spec": {"rules": [3]}, "metadata": {"labels": {"$patch": "replace", "z": "w"}}}),
        );
        assert_eq!(out["data"], json!({"b": "2"}));
        assert_eq!(out["spec"]["rules"], json!([3]));
        assert_eq!(out["metadata"]["labels"], json!({"z": "w"}));
    }
}
