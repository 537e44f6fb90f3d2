//! The input documents policies see, one shape per [`PolicyInput`] kind.
//!
//! | kind | `input` in Rego |
//! |---|---|
//! | `kubernetes` | one rendered Kubernetes object (`apiVersion`, `kind`, `metadata`, `spec`, ...). A JSON array or a `List`/`*List` with `items` is evaluated once per object. |
//! | `terraform` | `terraform show -json` plan output: `resource_changes[]` with `address`, `type`, `name`, `change.actions` (`["delete","create"]` is a replacement), `change.before`, `change.after`. |
//! | `images` | `{"images": [{"reference": "ghcr.io/acme/web:1.2", "digest": "sha256:..."}]}` ([`images`]). |
//! | `plan` | the Plan: `install`, `operation`, `entity` (`kind`, `name`), `role` (`name`, `level`, `rule`) once resolved, `reason`, `release`, `desiredState`, `contentHash` ([`plan`]). |
//! | `drift` | a DriftReport's spec: `install`, `entity`, `inSync`, `observedAt`, `diff[]` (`path`, `op`, `desired`, `live`) ([`drift`]). |
//! | `static` | a terraform module's configuration, read by the runner before `terraform init`: `providers[]` (`source` like `registry.terraform.io/hashicorp/aws`, `builtin`, `allowed` by the runner's allow-list, `modules`, `localNames`, `versions`), `modules[]` (`module`, `name`, `source`, `path`), `resources[]` (`module`, `mode`, `type`, `name`, `provider`), `files[]` (`path`, `content`, `null` past 256 KiB). |

use outpost_api::{DriftReportSpec, Plan, PolicyInput};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The documents `input` is evaluated as: each object of a Kubernetes list or array,
/// otherwise `input` itself. `null` documents (empty YAML documents) are dropped.
pub fn documents(kind: PolicyInput, input: &Value) -> Vec<Value> {
    let items = match (kind, input) {
        (PolicyInput::Kubernetes, Value::Array(items)) => items.clone(),
        (PolicyInput::Kubernetes, Value::Object(o))
            if o.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && o.get("items").is_some_and(Value::is_array) =>
        {
            o["items"].as_array().cloned().unwrap_or_default()
        }
        _ => vec![input.clone()],
    };
    items.into_iter().filter(|d| !d.is_null()).collect()
}

/// An image a Plan deploys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// The reference as written, `ghcr.io/acme/web:1.2`.
    pub reference: String,
    /// The resolved digest, `sha256:...`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// The `images` input: `{"images": [{"reference", "digest"}]}`.
pub fn images(images: &[ImageRef]) -> Value {
    json!({ "images": images })
}

/// The `plan` input: the Plan's spec with the resolved role (`status.role`) added
/// as `role`.
pub fn plan(plan: &Plan) -> Value {
    let mut document = serde_json::to_value(&plan.spec).unwrap_or_else(|_| json!({}));
    if let (Some(object), Some(role)) = (
        document.as_object_mut(),
        plan.status.as_ref().and_then(|s| s.role.as_ref()),
    ) {
        object.insert(
            "role".to_owned(),
            serde_json::to_value(role).unwrap_or(Value::Null),
        );
    }
    document
}

/// The `drift` input: the DriftReport's spec.
pub fn drift(report: &DriftReportSpec) -> Value {
    serde_json::to_value(report).unwrap_or_else(|_| json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_lists_and_arrays_split_other_kinds_do_not() {
        let list = json!({"kind": "ConfigMapList", "items": [{"kind": "ConfigMap"}, null]});
        assert_eq!(documents(PolicyInput::Kubernetes, &list).len(), 1);
        let array = json!([{"kind": "A"}, {"kind": "B"}]);
        assert_eq!(documents(PolicyInput::Kubernetes, &array).len(), 2);
        assert_eq!(documents(PolicyInput::Terraform, &array), vec![array]);
    }

    #[test]
    fn images_document_shape() {
        let doc = images(&[ImageRef {
            reference: "ghcr.io/acme/web:1".into(),
            digest: None,
        }]);
        assert_eq!(
            doc,
            json!({"images": [{"reference": "ghcr.io/acme/web:1"}]})
        );
    }
}
