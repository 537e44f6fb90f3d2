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

use std::collections::{HashMap, HashSet, VecDeque};

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
    if !doc.is_object() {
        // `{"$patch": "delete"}` at the top: the object itself cannot be patched away.
        return Err(ApiError::BadRequest(
            "the patched object must be a JSON object".into(),
        ));
    }
    super::check_trackable(&doc)?;
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
        let keep: HashSet<&str> = keep.iter().filter_map(Value::as_str).collect();
        object.retain(|k, _| keep.contains(k.as_str()) || patch.contains_key(k));
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/")
                && let (Some(Value::Array(list)), Value::Array(gone)) =
                    (object.get_mut(field), value)
            {
                let gone: HashSet<String> = gone.iter().map(Value::to_string).collect();
                list.retain(|v| !gone.contains(&v.to_string()));
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
        let mut seen: HashSet<String> = merged.iter().map(Value::to_string).collect();
        for item in items {
            if seen.insert(item.to_string()) {
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
    // Items by the JSON text of their key (each the first live item with it first), and
    // deleted items as `None` until the end: one lookup per patch item, not a scan of
    // the list (a large patch of a large list was quadratic).
    let mut merged: Vec<Option<Value>> = existing.into_iter().map(Some).collect();
    let mut by_id: HashMap<String, VecDeque<usize>> = HashMap::new();
    for (i, item) in merged.iter().enumerate() {
        if let Some(id) = item.as_ref().and_then(|m| m.get(key)) {
            by_id.entry(id.to_string()).or_default().push_back(i);
        }
    }
    for item in items {
        let Some(id) = item.get(key) else { continue };
        let slots = by_id.entry(id.to_string()).or_default();
        let patch = item.as_object().cloned().unwrap_or_default();
        match (
            slots.front().copied(),
            patch.get("$patch").and_then(Value::as_str),
        ) {
            (Some(i), Some("delete")) => {
                merged[i] = None;
                slots.pop_front();
            }
            (None, Some("delete")) => {}
            (Some(i), _) => {
                if let Some(target) = merged[i].as_mut() {
                    merge_map(target, &patch);
                }
            }
            (None, _) => {
                slots.push_back(merged.len());
                merged.push(Some(Value::Object(strip_directives(patch))));
            }
        }
    }
    let mut merged: Vec<Value> = merged.into_iter().flatten().collect();
    if let Some(Value::Array(order)) = order {
        let mut ranks: HashMap<Option<String>, usize> = HashMap::new();
        for (i, o) in order.iter().enumerate() {
            ranks.entry(o.get(key).map(Value::to_string)).or_insert(i);
        }
        merged.sort_by_cached_key(|v| {
            ranks
                .get(&v.get(key).map(Value::to_string))
                .copied()
                .unwrap_or(usize::MAX)
        });
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

    /// Found while writing the fuzz targets: merging by key, finalizers as a set,
    /// `$setElementOrder` and `$deleteFromPrimitiveList` scanned the whole list for
    /// each patch item, so a 3 MiB patch of a large list took minutes. They now look
    /// items up by their JSON text; this checks that the result is unchanged at a size
    /// where the scans took 20,000² comparisons.
    #[test]
    fn large_list_patches_merge_by_lookup_with_the_same_result() {
        const N: usize = 20_000;
        let containers: Vec<Value> = (0..N)
            .map(|i| json!({"name": format!("c{i}"), "image": "a"}))
            .collect();
        let existing = json!({
            "metadata": {"finalizers": (0..N).map(|i| format!("f{i}")).collect::<Vec<_>>()},
            "spec": {"containers": containers, "args": (0..N).collect::<Vec<_>>()},
        });
        // Every existing container changed, in reverse order, each other one deleted, and
        // as many new ones; half the finalizers again and as many new ones.
        let patch_items: Vec<Value> = (0..2 * N)
            .rev()
            .map(|i| match i {
                i if i >= N => json!({"name": format!("c{i}"), "image": "new"}),
                i if i % 2 == 1 => json!({"name": format!("c{i}"), "$patch": "delete"}),
                i => json!({"name": format!("c{i}"), "image": "b"}),
            })
            .collect();
        let order: Vec<Value> = (0..2 * N)
            .rev()
            .map(|i| json!({"name": format!("c{i}")}))
            .collect();
        let patch = json!({
            "metadata": {"finalizers": (N / 2..N + N / 2).map(|i| format!("f{i}")).collect::<Vec<_>>()},
            "spec": {
                "containers": patch_items,
                "$setElementOrder/containers": order,
                "$deleteFromPrimitiveList/args": (0..N).filter(|i| i % 3 == 0).collect::<Vec<_>>(),
            },
        });
        let out = patched(existing, patch);
        let finalizers = out["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(finalizers.len(), N + N / 2);
        assert_eq!(finalizers[N], format!("f{N}"));
        let containers = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), N + N / 2);
        // In the order given: the newest first, then the kept ones, highest first.
        assert_eq!(
            containers[0],
            json!({"name": format!("c{}", 2 * N - 1), "image": "new"})
        );
        assert_eq!(
            containers[N],
            json!({"name": format!("c{}", N - 2), "image": "b"})
        );
        assert_eq!(
            containers.last().unwrap(),
            &json!({"name": "c0", "image": "b"})
        );
        assert_eq!(
            out["spec"]["args"].as_array().unwrap().len(),
            N - N.div_ceil(3)
        );
    }

    /// Found writing the fuzz targets' "a patch makes an object" property: a top-level
    /// `$patch: delete` turned the object into `null` and handed that to the write
    /// path. It is a 400, as `apply_patch` answers for a non-object.
    #[test]
    fn a_top_level_delete_directive_is_refused() {
        let cm = json!({"kind": "ConfigMap", "data": {"a": "1"}});
        for body in [
            json!({"$patch": "delete"}),
            json!({"$patch": "delete", "data": {}}),
        ] {
            let err = apply_strategic_merge(&cm, body.to_string().as_bytes()).unwrap_err();
            assert_eq!(err.code(), 400);
            assert_eq!(err.to_string(), "the patched object must be a JSON object");
        }
    }
}
