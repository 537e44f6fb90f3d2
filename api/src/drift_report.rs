//! `DriftReport`: what the runner found when it compared an entity's live
//! state with its desired state. Written whole by the runner; no status.

use crate::operation::EntityRef;
use crate::plan::Verdict;
use crate::validation::{
    FieldError, NameRule, Validate, validate_name, validate_object_name, validate_required,
};
use crate::wire::any_value;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Spec of a `DriftReport`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "DriftReport",
    namespaced,
    derive = "PartialEq",
    shortname = "drift",
    category = "outpost",
    selectable = ".spec.install",
    doc = "The result of one drift check of an install's entity.",
    printcolumn(name = "Install", type_ = "string", json_path = ".spec.install"),
    printcolumn(name = "Entity", type_ = "string", json_path = ".spec.entity.name"),
    printcolumn(name = "InSync", type_ = "boolean", json_path = ".spec.inSync"),
    printcolumn(name = "Observed", type_ = "date", json_path = ".spec.observedAt")
)]
#[serde(rename_all = "camelCase")]
pub struct DriftReportSpec {
    /// Name of the Install.
    pub install: String,
    /// The entity checked.
    pub entity: EntityRef,
    /// Whether live state matches; `true` exactly when `diff` is empty.
    pub in_sync: bool,
    /// When the runner looked.
    pub observed_at: Time,
    /// Normalised differences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<DiffEntry>,
    /// The Plan whose apply is the baseline live state was compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// When live state started to differ (the first check that found this drift);
    /// absent while in sync. A new drift after a return to sync gets a new time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted_since: Option<Time>,
    /// Results of the policies with the `drift` input (the runner's local ones,
    /// `local/...`, and the install's vendor Policies) on this report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
}

/// One difference between desired and live state.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiffEntry {
    /// Path of the value (`Deployment/web.spec.replicas`).
    pub path: String,
    /// How it differs.
    pub op: DiffOp,
    /// Desired value (absent for `added`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub desired: Option<Value>,
    /// Live value (absent for `removed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub live: Option<Value>,
}

/// How a value differs, seen from desired state.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DiffOp {
    /// Present live, not desired.
    Added,
    /// Desired, missing live.
    Removed,
    /// Present in both with different values.
    Changed,
}

impl Validate for DriftReport {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        errors.extend(validate_name(
            "spec.install",
            &spec.install,
            NameRule::Label,
        ));
        errors.extend(validate_required("spec.entity.name", &spec.entity.name));
        if spec.in_sync != spec.diff.is_empty() {
            errors.push(FieldError::invalid(
                "spec.inSync",
                spec.in_sync,
                "must be true exactly when spec.diff is empty",
            ));
        }
        for (i, entry) in spec.diff.iter().enumerate() {
            let at = format!("spec.diff[{i}]");
            errors.extend(validate_required(&format!("{at}.path"), &entry.path));
            let (desired, live) = (entry.desired.is_some(), entry.live.is_some());
            let shape_ok = match entry.op {
                DiffOp::Added => !desired && live,
                DiffOp::Removed => desired && !live,
                DiffOp::Changed => desired && live,
            };
            if !shape_ok {
                errors.push(FieldError::invalid(
                    format!("{at}.op"),
                    serde_json::to_value(entry.op)
                        .unwrap_or_default()
                        .to_string(),
                    "added has only live, removed only desired, changed both",
                ));
            }
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;
    use serde_json::json;

    fn report(in_sync: bool, diff: serde_json::Value) -> DriftReport {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "DriftReport",
            "metadata": {"name": "acme-web-1"},
            "spec": {
                "install": "acme",
                "entity": {"kind": "component", "name": "web"},
                "inSync": in_sync,
                "observedAt": "2025-01-15T10:00:00Z",
                "diff": diff
            }
        }))
        .expect("test DriftReport is well-formed")
    }

    #[test]
    fn in_sync_matches_diff() {
        let changed = json!([{"path": "Deployment/web.spec.replicas", "op": "changed", "desired": 2, "live": 5}]);
        assert_eq!(report(true, json!([])).validate(), vec![]);
        assert_eq!(report(false, changed.clone()).validate(), vec![]);
        assert_eq!(report(true, changed).validate()[0].field, "spec.inSync");
        assert_eq!(report(false, json!([])).validate()[0].field, "spec.inSync");
    }

    #[test]
    fn diff_entries_have_the_values_their_op_needs() {
        let diff = json!([{"path": "x", "op": "added", "desired": 1}]);
        let errors = report(false, diff).validate();
        assert_eq!(
            (errors[0].field.as_str(), errors[0].kind),
            ("spec.diff[0].op", FieldErrorKind::Invalid)
        );
    }
}
