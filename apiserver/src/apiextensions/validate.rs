//! What a CustomResourceDefinition must be to be stored, and the conditions written on
//! it once it is.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use outpost_meta::FieldError;
use outpost_meta::validation::{is_dns1123_label, is_dns1123_subdomain};
use serde_json::{Value, json};

use crate::registry::{Registry, ResourceType};

/// The checks of a CRD that need no other object (the kind's admission): it decodes as
/// `apiextensions.k8s.io/v1`, its name is `PLURAL.GROUP`, names are lowercase DNS labels
/// (the kinds CamelCase), the scope is `Namespaced` or `Cluster`, the versions are
/// unique with exactly one storage version, and every version has a structural schema
/// (an `object` at the root and a `type` on every field, but where
/// `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields` stands for it).
pub fn definition(object: &Value) -> Vec<FieldError> {
    let crd: CustomResourceDefinition = match serde_json::from_value(object.clone()) {
        Ok(crd) => crd,
        Err(error) => {
            return vec![FieldError::invalid(
                "spec",
                "",
                format!("not a CustomResourceDefinition: {error}"),
            )];
        }
    };
    let spec = &crd.spec;
    let names = &spec.names;
    let mut causes = Vec::new();
    if !is_dns1123_subdomain(&spec.group) || !spec.group.contains('.') {
        causes.push(FieldError::invalid(
            "spec.group",
            &spec.group,
            "should be a domain with at least one dot",
        ));
    }
    let expected = format!("{}.{}", names.plural, spec.group);
    if crd.metadata.name.as_deref() != Some(expected.as_str()) {
        causes.push(FieldError::invalid(
            "metadata.name",
            crd.metadata.name.as_deref().unwrap_or_default(),
            format!("must be spec.names.plural+\".\"+spec.group ({expected:?})"),
        ));
    }
    let mut label = |field: &str, value: &str| {
        if !is_label(value) {
            causes.push(FieldError::invalid(
                field,
                value,
                "must be a lowercase DNS-1035 label",
            ));
        }
    };
    label("spec.names.plural", &names.plural);
    if let Some(singular) = &names.singular {
        label("spec.names.singular", singular);
    }
    for (i, short) in names.short_names.iter().flatten().enumerate() {
        label(&format!("spec.names.shortNames[{i}]"), short);
    }
    for (field, kind) in [
        ("spec.names.kind", Some(&names.kind)),
        ("spec.names.listKind", names.list_kind.as_ref()),
    ] {
        if let Some(kind) = kind
            && !is_kind(kind)
        {
            causes.push(FieldError::invalid(
                field,
                kind,
                "must start with an uppercase letter and hold only letters and digits",
            ));
        }
    }
    if !matches!(spec.scope.as_str(), "Namespaced" | "Cluster") {
        causes.push(FieldError::not_supported(
            "spec.scope",
            &spec.scope,
            &["Cluster", "Namespaced"],
        ));
    }
    causes.extend(versions(&crd));
    causes
}

fn versions(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let versions = &crd.spec.versions;
    let mut causes = Vec::new();
    if versions.is_empty() {
        causes.push(FieldError::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
        return causes;
    }
    if versions.iter().filter(|v| v.storage).count() != 1 {
        causes.push(FieldError::invalid(
            "spec.versions",
            versions.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, version) in versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        if !is_label(&version.name) {
            causes.push(FieldError::invalid(
                format!("{at}.name"),
                &version.name,
                "must be a lowercase DNS-1035 label",
            ));
        }
        if versions[..i].iter().any(|v| v.name == version.name) {
            causes.push(FieldError::duplicate(format!("{at}.name"), &version.name));
        }
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok());
        match schema {
            None => causes.push(FieldError::required(
                format!("{at}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            Some(schema) => {
                let at = format!("{at}.schema.openAPIV3Schema");
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    causes.push(FieldError::invalid(
                        format!("{at}.type"),
                        schema.get("type").cloned().unwrap_or(Value::Null),
                        "must be object at the root",
                    ));
                }
                structural(&schema, &at, &mut causes);
            }
        }
    }
    causes
}

/// Every field below `schema` has a `type` (or an extension that stands for one).
fn structural(schema: &Value, at: &str, causes: &mut Vec<FieldError>) {
    let mut check = |child: &Value, at: String| {
        let typed = child
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty())
            || [
                "x-kubernetes-int-or-string",
                "x-kubernetes-preserve-unknown-fields",
            ]
            .iter()
            .any(|x| child.get(*x) == Some(&Value::Bool(true)));
        if !typed {
            causes.push(FieldError::required(
                format!("{at}.type"),
                "must not be empty for specified object fields",
            ));
        }
        structural(child, &at, causes);
    };
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            check(child, format!("{at}.properties[{name}]"));
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        check(items, format!("{at}.items"));
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        check(extra, format!("{at}.additionalProperties"));
    }
}

/// The checks that need the served types: the CRD's names clash with no type `served`
/// serves but its own, and an update keeps `spec.group`, `spec.scope` and the names
/// its objects are reached by (`plural`, `singular`, `kind`, `listKind`; kube-apiserver
/// lets the names change and re-accepts them, here they are refused: a changed name
/// would move or orphan stored objects). `shortNames` and `categories` may change.
pub fn validate(
    served: &Registry,
    base: &Registry,
    new: &Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let Ok(crd) = serde_json::from_value::<CustomResourceDefinition>(new.clone()) else {
        return Vec::new(); // refused by [`definition`]
    };
    let mut causes = clashes(served, base, &crd);
    if let Some(old) = old {
        for path in [
            "spec.group",
            "spec.scope",
            "spec.names.plural",
            "spec.names.singular",
            "spec.names.kind",
            "spec.names.listKind",
        ] {
            let pointer = format!("/{}", path.replace('.', "/"));
            let value = new.pointer(&pointer);
            if value != old.pointer(&pointer) {
                causes.push(FieldError::invalid(
                    path,
                    value.cloned().unwrap_or(Value::Null),
                    "field is immutable",
                ));
            }
        }
    }
    causes
}

/// The clashes of `crd`'s names with the types `served` serves, but its own (the type
/// at its group and plural, unless a built-in type of `base` is there): its plural
/// in its group, its kind in its group, any of its short names anywhere.
pub(super) fn clashes(
    served: &Registry,
    base: &Registry,
    crd: &CustomResourceDefinition,
) -> Vec<FieldError> {
    let spec = &crd.spec;
    let names = &spec.names;
    let same_resource = |rt: &ResourceType| rt.group == spec.group && rt.plural == names.plural;
    let built_in = base.all().any(|rt| same_resource(rt));
    let mut causes: Vec<FieldError> = Vec::new();
    let mut push = |cause: FieldError| {
        if !causes.iter().any(|c| c.field == cause.field) {
            causes.push(cause);
        }
    };
    for rt in served.all() {
        if same_resource(rt) {
            if built_in {
                push(FieldError::invalid(
                    "spec.names.plural",
                    &names.plural,
                    format!("{} is already served", rt.qualified_resource()),
                ));
            }
            continue;
        }
        if rt.group == spec.group && rt.kind == names.kind {
            push(FieldError::invalid(
                "spec.names.kind",
                &names.kind,
                format!("is already the kind of {}", rt.qualified_resource()),
            ));
        }
        for (i, short) in names.short_names.iter().flatten().enumerate() {
            if rt.short_names.contains(short) || rt.plural == *short {
                push(FieldError::invalid(
                    format!("spec.names.shortNames[{i}]"),
                    short,
                    format!("is already a name of {}", rt.qualified_resource()),
                ));
            }
        }
    }
    causes
}

/// Writes the status of a stored CRD: `acceptedNames` (its names), `storedVersions`
/// (every storage version it has had) and the `NamesAccepted` and `Established`
/// conditions, True (a condition already True keeps its transition time, so writing the
/// same CRD again changes nothing).
pub fn accept(object: &mut Value, old: Option<&Value>) {
    let now = crate::object_meta::now();
    let previous = |type_: &str| {
        old.and_then(|o| o.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == type_ && c["status"] == "True")
            })
            .cloned()
    };
    let conditions: Vec<Value> = [
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        (
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ]
    .into_iter()
    .map(|(type_, reason, message)| {
        previous(type_).unwrap_or_else(|| super::condition(type_, reason, message, &now))
    })
    .collect();
    let mut stored: Vec<Value> = old
        .and_then(|o| o.pointer("/status/storedVersions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage = object
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .map(|v| v["name"].clone());
    if let Some(storage) = storage
        && !stored.contains(&storage)
    {
        stored.push(storage);
    }
    let names = object.pointer("/spec/names").cloned().unwrap_or(json!({}));
    object["status"] = json!({
        "conditions": conditions,
        "acceptedNames": names,
        "storedVersions": stored,
    });
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter (what kube-apiserver
/// requires of resource and version names).
fn is_label(value: &str) -> bool {
    is_dns1123_label(value) && value.starts_with(|c: char| c.is_ascii_lowercase())
}

fn is_kind(value: &str) -> bool {
    value.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_alphanumeric())
}
