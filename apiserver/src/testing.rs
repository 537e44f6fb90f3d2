//! The core's own test kinds (`#[cfg(test)]`): real CustomResourceDefinitions in the
//! neutral group `example.com` ([`crds.yaml`](testing/crds.yaml)), served without rules,
//! so the core's unit tests exercise schemas, subresources, printer columns, selectable
//! fields and the watch cache's index over CRDs no product defines.
//!
//! * `Widget` (`widgets`, namespaced): a status subresource, printer columns, the
//!   selectable field `spec.tenant`, a schema with defaults, int-or-string, a list with
//!   map keys, enums, nullable fields and values that preserve unknown fields; filed in
//!   the watch cache under its tenant ([`TENANT_LABEL`], `spec.tenant`).
//! * `Tenant` (`tenants`, cluster-scoped): a plain spec, no subresources.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::registry::{IndexBy, Registry};
use crate::strategy::NoRules;

/// The label (and, as `spec.tenant`, the field) widgets are indexed by.
pub(crate) const TENANT_LABEL: &str = "example.com/tenant";

/// The test kinds' CRDs.
pub(crate) fn crds() -> Vec<CustomResourceDefinition> {
    serde_saphyr::from_multiple(include_str!("testing/crds.yaml"))
        .expect("testing/crds.yaml holds CustomResourceDefinitions")
}

/// A registry serving the test kinds, widgets indexed by tenant.
pub(crate) fn test_registry() -> Registry {
    let mut registry = Registry::new();
    for crd in crds() {
        registry.register_crd(&crd, Arc::new(NoRules));
    }
    registry.update_all(|rt| {
        if rt.plural == "widgets" {
            rt.index = Some(IndexBy {
                label: TENANT_LABEL.into(),
                field: "spec.tenant".into(),
            })
        }
    });
    registry
}

/// The `Widget` kind's OpenAPI schema, as the registry serves it.
pub(crate) fn widget_schema() -> serde_json::Value {
    test_registry()
        .get("example.com", "v1", "widgets")
        .expect("widgets are served")
        .schema
        .clone()
        .expect("widgets have a schema")
}
