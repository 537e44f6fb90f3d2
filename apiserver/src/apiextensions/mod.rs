//! `apiextensions.k8s.io/v1` CustomResourceDefinitions served as a kind: a stored CRD
//! makes the server serve its versions as resource types, as kube-apiserver's
//! apiextensions server does.
//!
//! * [`resource_type`] is the CRD kind itself (cluster-scoped, with a `/status`
//!   subresource).
//! * [`validate`] checks a CRD on every write: its own fields (names, scope, versions, a
//!   structural schema), that its names clash with no served type, that an update
//!   keeps its group, scope and names; [`accept`] writes the `NamesAccepted` and
//!   `Established` conditions (kube-apiserver's controllers set them moments after the
//!   create; here they are written with it, because the type is served once the create
//!   answers).
//! * [`served_registry`] turns the stored CRDs into the registry the server serves; the
//!   watch caches' feed ([`crate::watch_cache::Served`]) calls it whenever a CRD
//!   changes, loads the new types' caches, and deletes the objects of a CRD that is
//!   gone.

pub mod validate;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::registry::{PrinterColumn, Registry, ResourceType};

pub use validate::{accept, validate};

/// The API group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The plural they are served under.
pub const PLURAL: &str = "customresourcedefinitions";

/// The CustomResourceDefinition kind: cluster-scoped, `crd`/`crds`, a `/status`
/// subresource, validated by [`validate::definition`] (the checks that need no other
/// object; [`validate`] adds those that need the served types).
pub fn resource_type() -> ResourceType {
    let mut rt = ResourceType::schemaless(GROUP, "v1", "CustomResourceDefinition", PLURAL, false);
    rt.short_names = vec!["crd".into(), "crds".into()];
    rt.status_subresource = true;
    // A built-in kind for kubectl, which may send it strategic merge patches.
    rt.strategic_merge = true;
    rt.strategy = std::sync::Arc::new(Definitions);
    rt.printer_columns = vec![PrinterColumn {
        name: "Created At".into(),
        type_: "date".into(),
        format: None,
        description: String::new(),
        json_path: ".metadata.creationTimestamp".into(),
        priority: 0,
    }];
    rt
}

/// The CustomResourceDefinition kind's own rules: [`validate::definition`].
#[derive(Debug)]
struct Definitions;

impl crate::strategy::Strategy for Definitions {
    fn validate(&self, object: &serde_json::Value) -> Vec<crate::status::FieldError> {
        validate::definition(object)
    }
}

/// Whether `rt` is the CustomResourceDefinition kind, whose writes change what is served.
pub fn defines_types(rt: &ResourceType) -> bool {
    rt.group == GROUP && rt.plural == PLURAL
}

/// The registry that serves `base` and the types of the stored `crds`. The CRDs are
/// taken oldest first (creation time, then name); one whose types clash with a type
/// already taken is left out and logged (admission refuses such a CRD, so only two
/// written at the same moment, or one stored before `base` gained a kind, get here).
pub fn served_registry(base: &Registry, crds: &[Value]) -> Registry {
    let mut crds: Vec<(String, String, CustomResourceDefinition)> = crds
        .iter()
        .filter_map(|value| {
            let name = value.pointer("/metadata/name")?.as_str()?.to_owned();
            let created = value
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            match serde_json::from_value(value.clone()) {
                Ok(crd) => Some((created, name, crd)),
                Err(error) => {
                    tracing::error!(%name, %error, "a stored CustomResourceDefinition does not decode");
                    None
                }
            }
        })
        .collect();
    crds.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut registry = base.clone();
    for (_, name, crd) in crds {
        let clashes = validate::clashes(&registry, base, &crd);
        if let Some(clash) = clashes.first() {
            tracing::warn!(%name, field = %clash.field, message = %clash.message, "a CustomResourceDefinition is not served: its names clash");
            continue;
        }
        for rt in ResourceType::from_crd(&crd) {
            registry.register(rt);
        }
    }
    registry
}

/// `true` when the type at `group`/`plural` is defined by one of the stored `crds`
/// (served or not): its objects stay while the CRD does.
pub fn defined_by(crds: &[Value], group: &str, plural: &str) -> bool {
    crds.iter().any(|crd| {
        crd.pointer("/spec/group").and_then(Value::as_str) == Some(group)
            && crd.pointer("/spec/names/plural").and_then(Value::as_str) == Some(plural)
    })
}

/// The condition `type_` = True, as the apiextensions controllers write it.
fn condition(type_: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    })
}

#[cfg(test)]
mod tests;
