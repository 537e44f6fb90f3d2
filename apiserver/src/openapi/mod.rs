//! OpenAPI v3 as kube-apiserver serves it (`/openapi/v3` and
//! `/openapi/v3/apis/<group>/<version>`), so that `kubectl explain`, `kubectl
//! apply` and client-side validation work unchanged against this server.
//!
//! What kubectl reads from it:
//! * `kubectl explain` finds a kind's schema by its
//!   `x-kubernetes-group-version-kind` and follows `$ref`s (`metadata` →
//!   `ObjectMeta`);
//! * `kubectl apply` looks for a PATCH operation of the kind accepting
//!   `application/strategic-merge-patch+json`; there is none for custom
//!   resources, so it sends a JSON merge patch;
//! * `kubectl create/apply --validate` looks for a `fieldValidation` query
//!   parameter on the kind's PATCH operation and, finding it, leaves validation
//!   to the server (`?fieldValidation=Strict`).

mod meta;
mod paths;

use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceType};

/// `GET /openapi/v3`: where each document is, with a hash of its content so
/// clients can cache it. Keys are `apis/<group>/<version>`, `api/<version>`,
/// `api` and `apis`; each is served by [`document`].
///
/// ```no_run
/// # let registry = outpost_apiserver::registry::Registry::new();
/// let index = outpost_apiserver::openapi::discovery_index(&registry);
/// let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str().unwrap();
/// assert!(url.starts_with("/openapi/v3/apis/example.com/v1?hash="));
/// ```
pub fn discovery_index(registry: &Registry) -> Value {
    let mut keys = vec!["api".to_owned(), "apis".to_owned()];
    keys.extend(registry.core_versions().iter().map(|v| format!("api/{v}")));
    for (group, versions) in registry.groups() {
        keys.extend(versions.iter().map(|v| format!("apis/{group}/{v}")));
    }
    let paths: Map<String, Value> = keys
        .into_iter()
        .filter_map(|key| {
            let doc = document(registry, &key)?;
            let url = format!("/openapi/v3/{key}?hash={}", document_hash(&doc));
            Some((key, json!({"serverRelativeURL": url})))
        })
        .collect();
    json!({"paths": paths})
}

/// The document at `/openapi/v3/<path>` (`path` as a key of
/// [`discovery_index`]); `None` when nothing is served there.
pub fn document(registry: &Registry, path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api"] => Some(root_document("/api/", "getCoreAPIVersions", "core")),
        ["apis"] => Some(root_document("/apis/", "getAPIVersions", "apis")),
        ["api", version] => group_version_document(registry, "", version),
        ["apis", group, version] => group_version_document(registry, group, version),
        _ => None,
    }
}

/// The OpenAPI 3.0 document of one group/version: a schema per kind and list
/// kind (named like `com.example.v1.Widget`) plus the `meta/v1` schemas
/// they reference, and every endpoint's operations. `None` when the registry
/// serves no type in `group/version`.
///
/// A schemaless kind's schema is `type: object` with
/// `x-kubernetes-preserve-unknown-fields: true`.
pub fn group_version_document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = registry.in_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let mut schemas = meta::schemas();
    let mut paths = Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}/")
    } else {
        format!("/apis/{group}/{version}/")
    };
    let (tag_group, tag_version) = operation_group(group, version);
    paths.insert(
        prefix,
        json!({"get": {
            "tags": [format!("{}{}_{}", tag_group[..1].to_lowercase(), &tag_group[1..], tag_version)],
            "description": "get available resources",
            "operationId": format!("get{tag_group}{tag_version}APIResources"),
            "responses": {
                "200": {"description": "OK", "content": {
                    "application/json": {"schema": meta::meta("APIResourceList")},
                    "application/yaml": {"schema": meta::meta("APIResourceList")}
                }},
                "401": {"description": "Unauthorized"}
            }
        }}),
    );
    for rt in types {
        schemas.insert(schema_name(group, version, &rt.kind), kind_schema(rt));
        schemas.insert(schema_name(group, version, &rt.list_kind), list_schema(rt));
        paths.extend(paths::paths(rt));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"BearerToken": {
                "type": "apiKey", "name": "authorization", "in": "header",
                "description": "Bearer Token authentication"
            }}
        },
        "security": [{"BearerToken": []}]
    }))
}

/// The schema name kube-apiserver gives a kind: the group reversed, then
/// version and kind (`example.com`, `v1`, `Widget` →
/// `com.example.v1.Widget`); core kinds are `io.k8s.api.core.<version>.<kind>`.
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() {
        return format!("io.k8s.api.core.{version}.{kind}");
    }
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// A stable digest of a document, for the `hash` of its URL.
fn document_hash(doc: &Value) -> String {
    let hash = outpost_meta::content_hash(doc);
    hash.trim_start_matches("sha256:").to_uppercase()
}

/// `("ExampleCom", "V1")`: the group and version as operation ids and
/// tags spell them (`listExampleComV1NamespacedWidget`).
fn operation_group(group: &str, version: &str) -> (String, String) {
    let group = if group.is_empty() { "core" } else { group };
    let words: String = group.split(['.', '-']).map(capitalize).collect();
    (words, capitalize(version))
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn gvk(rt: &ResourceType, kind: &str) -> Value {
    json!([{"group": rt.group, "kind": kind, "version": rt.version}])
}

/// The kind's schema with `apiVersion`, `kind` and `metadata` (a `$ref` to
/// `ObjectMeta`) added, and its group-version-kind.
fn kind_schema(rt: &ResourceType) -> Value {
    let mut schema = rt
        .schema
        .clone()
        .unwrap_or_else(|| json!({"x-kubernetes-preserve-unknown-fields": true}));
    if let Some(s) = schema.as_object_mut() {
        s.insert("type".to_owned(), json!("object"));
        s.insert(
            "x-kubernetes-group-version-kind".to_owned(),
            gvk(rt, &rt.kind),
        );
    }
    let mut schema = meta::with_type_meta(schema);
    schema["properties"]["metadata"] = meta::meta_property(
        "ObjectMeta",
        "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    );
    schema
}

/// `<Kind>List`: `items` of the kind and `ListMeta`.
fn list_schema(rt: &ResourceType) -> Value {
    let item = meta::reference(&schema_name(&rt.group, &rt.version, &rt.kind));
    meta::with_type_meta(json!({
        "description": format!("{} is a list of {}", rt.list_kind, rt.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", rt.plural),
                "type": "array",
                "items": item
            },
            "metadata": meta::meta_property(
                "ListMeta",
                "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
            )
        },
        "x-kubernetes-group-version-kind": gvk(rt, &rt.list_kind)
    }))
}

/// `/openapi/v3/api` and `/openapi/v3/apis`: the discovery endpoint itself.
fn root_document(path: &str, operation_id: &str, tag: &str) -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": {path: {"get": {
            "tags": [tag],
            "description": "get available API versions",
            "operationId": operation_id,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
                "401": {"description": "Unauthorized"}
            }
        }}},
        "components": {"schemas": {}}
    })
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
