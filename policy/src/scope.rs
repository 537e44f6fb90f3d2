//! Which installs a `Policy` applies to: its `app` (every App when omitted) and its
//! `installSelector` (every install when omitted). The control plane's gate and the
//! runner's drift checks pick an install's vendor policies with [`applies_to_install`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use outpost_api::{Install, Policy};

/// Whether `policy` applies to `install`: same App (or none named) and selected.
pub fn applies_to_install(policy: &Policy, install: &Install) -> bool {
    policy
        .spec
        .app
        .as_deref()
        .is_none_or(|app| app == install.spec.app)
        && selects(policy.spec.install_selector.as_ref(), install)
}

/// Whether a Policy's `installSelector` selects `install` (no selector: every install).
pub fn selects(selector: Option<&LabelSelector>, install: &Install) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let empty = BTreeMap::new();
    let labels: &BTreeMap<String, String> = install.metadata.labels.as_ref().unwrap_or(&empty);
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_expressions
}
