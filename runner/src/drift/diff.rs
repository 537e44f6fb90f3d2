//! The field-level difference between what was applied and what is live, both
//! already normalised by the executor (server-managed fields removed).
//!
//! Paths read like the fields they name: `Deployment/web.spec.replicas`,
//! `Deployment/web.spec.template.spec.containers[0].image`,
//! `ConfigMap/app.metadata.labels["app.kubernetes.io/name"]`. A list of Kubernetes
//! objects (what the `kubernetes_manifest` executor applies and observes) is compared
//! object by object, each path prefixed with `Kind/name`; a whole object gone from the
//! cluster is one `removed` entry. Anything else (terraform's normalised state, a job's
//! steps) is compared as one document.

use outpost_api::{DiffEntry, DiffOp};
use serde_json::Value;

/// The differences of `live` from `applied`, in path order.
pub fn field_diff(applied: &Value, live: &Value) -> Vec<DiffEntry> {
    let mut entries = Vec::new();
    match (applied, live) {
        (Value::Array(applied), Value::Array(live)) if applied.iter().all(is_object_like) => {
            for (i, expected) in applied.iter().enumerate() {
                let prefix = object_path(expected);
                compare(
                    &prefix,
                    Some(expected),
                    live.get(i).filter(|l| !l.is_null()),
                    &mut entries,
                );
            }
        }
        _ => compare("", Some(applied), Some(live), &mut entries),
    }
    entries
}

/// Whether `value` is a Kubernetes object (`kind` and `metadata.name`).
fn is_object_like(value: &Value) -> bool {
    value.get("kind").is_some_and(Value::is_string)
        && value
            .pointer("/metadata/name")
            .is_some_and(Value::is_string)
}

/// `Kind/name`, or `Kind/namespace/name` for namespaced objects.
fn object_path(object: &Value) -> String {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let kind = text("/kind").unwrap_or_default();
    let name = text("/metadata/name").unwrap_or_default();
    match text("/metadata/namespace") {
        Some(namespace) => format!("{kind}/{namespace}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

fn compare(path: &str, applied: Option<&Value>, live: Option<&Value>, out: &mut Vec<DiffEntry>) {
    let entry = |op, desired: Option<&Value>, live: Option<&Value>| DiffEntry {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_owned()
        },
        op,
        desired: desired.cloned(),
        live: live.cloned(),
    };
    match (applied, live) {
        (None, None) => {}
        (Some(a), None) => out.push(entry(DiffOp::Removed, Some(a), None)),
        (None, Some(l)) => out.push(entry(DiffOp::Added, None, Some(l))),
        (Some(Value::Object(a)), Some(Value::Object(l))) => {
            let mut keys: Vec<&String> = a.keys().chain(l.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                compare(&field(path, key), a.get(key), l.get(key), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(l))) => {
            for i in 0..a.len().max(l.len()) {
                compare(&format!("{path}[{i}]"), a.get(i), l.get(i), out);
            }
        }
        (Some(a), Some(l)) if a != l => out.push(entry(DiffOp::Changed, Some(a), Some(l))),
        (Some(_), Some(_)) => {}
    }
}

/// `path.key`, or `path["key"]` when the key is not a plain identifier.
fn field(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (plain, path.is_empty()) {
        (true, true) => key.to_owned(),
        (true, false) => format!("{path}.{key}"),
        (false, _) => format!("{path}[{}]", Value::from(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: u32, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
        })
    }

    fn paths(entries: &[DiffEntry]) -> Vec<(&str, DiffOp)> {
        entries.iter().map(|e| (e.path.as_str(), e.op)).collect()
    }

    #[test]
    fn identical_objects_have_no_diff() {
        let applied = json!([deployment(2, "web:1")]);
        assert_eq!(field_diff(&applied, &applied.clone()), vec![]);
    }

    #[test]
    fn changed_fields_name_object_and_path_with_both_values() {
        let applied = json!([deployment(2, "web:1")]);
        let live = json!([deployment(5, "web:2")]);
        let diff = field_diff(&applied, &live);
        assert_eq!(
            paths(&diff),
            vec![
                ("Deployment/shop/web.spec.replicas", DiffOp::Changed),
                (
                    "Deployment/shop/web.spec.template.spec.containers[0].image",
                    DiffOp::Changed
                ),
            ]
        );
        assert_eq!(
            (diff[0].desired.clone(), diff[0].live.clone()),
            (Some(json!(2)), Some(json!(5)))
        );
    }

    #[test]
    fn added_and_removed_fields_and_odd_keys() {
        let applied = json!([deployment(2, "web:1")]);
        let mut live = deployment(2, "web:1");
        live["metadata"]["labels"] = json!({"team.example/owner": "ops"});
        let diff = field_diff(&applied, &json!([live]));
        assert_eq!(
            paths(&diff),
            vec![
                (
                    r#"Deployment/shop/web.metadata.labels["app.kubernetes.io/name"]"#,
                    DiffOp::Removed
                ),
                (
                    r#"Deployment/shop/web.metadata.labels["team.example/owner"]"#,
                    DiffOp::Added
                ),
            ]
        );
        assert_eq!(diff[0].live, None);
        assert_eq!(diff[1].desired, None);
    }

    #[test]
    fn a_deleted_object_is_one_removed_entry() {
        let applied = json!([deployment(2, "web:1")]);
        let diff = field_diff(&applied, &json!([null]));
        assert_eq!(paths(&diff), vec![("Deployment/shop/web", DiffOp::Removed)]);
        assert_eq!(diff[0].desired, Some(deployment(2, "web:1")));
    }

    #[test]
    fn other_documents_compare_as_one() {
        let applied = json!({"resources": {"terraform_data.db": {"input": "a"}}, "outputs": {}});
        let live = json!({"resources": {"terraform_data.db": {"input": "b"}}, "outputs": {}});
        assert_eq!(
            paths(&field_diff(&applied, &live)),
            vec![(r#"resources["terraform_data.db"].input"#, DiffOp::Changed)]
        );
        assert_eq!(
            paths(&field_diff(&json!([1, 2]), &json!([1]))),
            vec![("[1]", DiffOp::Removed)]
        );
    }
}
