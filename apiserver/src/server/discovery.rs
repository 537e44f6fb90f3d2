//! `/version`, discovery (`/api`, `/apis`, per group and version, and aggregated
//! discovery v2) and OpenAPI v3.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::ServerState;
use super::body::json;
use crate::registry::{Registry, ResourceType};
use crate::status::ApiError;

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// The Kubernetes version this server speaks.
pub const KUBERNETES_MINOR: &str = "33";

pub fn version() -> Response {
    json(
        StatusCode::OK,
        &json!({
            "major": "1",
            "minor": KUBERNETES_MINOR,
            "gitVersion": format!("v1.{KUBERNETES_MINOR}.0-outpost.{}", env!("CARGO_PKG_VERSION")),
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
            "goVersion": "rust",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }),
    )
}

pub fn answer(state: &ServerState, path: &str, accept: &str) -> Result<Response, ApiError> {
    let registry = state.registry();
    let registry = registry.as_ref();
    let aggregated = if accept
        .replace(' ', "")
        .contains("v=v2;as=APIGroupDiscoveryList")
    {
        Some(AGGREGATED_V2)
    } else if accept
        .replace(' ', "")
        .contains("v=v2beta1;as=APIGroupDiscoveryList")
    {
        Some(AGGREGATED_V2BETA1)
    } else {
        None
    };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api"] => Ok(match aggregated {
            Some(media) => aggregated_response(media, aggregated_list(registry, true, media)),
            None => json(
                StatusCode::OK,
                &json!({
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
                }),
            ),
        }),
        ["apis"] => Ok(match aggregated {
            Some(media) => aggregated_response(media, aggregated_list(registry, false, media)),
            None => json(
                StatusCode::OK,
                &json!({
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": registry.groups().iter().map(|(g, v)| api_group(g, v)).collect::<Vec<_>>(),
                }),
            ),
        }),
        ["apis", group] => {
            let groups = registry.groups();
            let versions = groups.get(*group).ok_or(ApiError::NoRoute)?;
            Ok(json(StatusCode::OK, &api_group(group, versions)))
        }
        ["api", "v1"] => Ok(json(StatusCode::OK, &resource_list(registry, "", "v1"))),
        ["apis", group, version] => {
            if registry.in_group_version(group, version).next().is_none() {
                return Err(ApiError::NoRoute);
            }
            Ok(json(
                StatusCode::OK,
                &resource_list(registry, group, version),
            ))
        }
        ["openapi", "v3"] => Ok(json(
            StatusCode::OK,
            &crate::openapi::discovery_index(registry),
        )),
        ["openapi", "v3", rest @ ..] => {
            let document =
                crate::openapi::document(registry, &rest.join("/")).ok_or(ApiError::NoRoute)?;
            Ok(json(StatusCode::OK, &document))
        }
        _ => Err(ApiError::NoRoute),
    }
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    })
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_list(registry: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for rt in registry.in_group_version(group, version) {
        resources.push(json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
            "shortNames": rt.short_names,
            "categories": rt.categories,
        }));
        if rt.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for (name, _) in rt.described_subresources() {
            resources.push(json!({
                "name": format!("{}/{name}", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

fn discovery_resource(rt: &ResourceType) -> Value {
    let response_kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let mut resource = json!({
        "resource": rt.plural,
        "responseKind": response_kind,
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": VERBS,
    });
    if !rt.short_names.is_empty() {
        resource["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        resource["categories"] = json!(rt.categories);
    }
    let mut subresources = Vec::new();
    if rt.status_subresource {
        subresources.push(json!({
            "subresource": "status",
            "responseKind": response_kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    for (name, _) in rt.described_subresources() {
        subresources.push(json!({
            "subresource": name,
            "responseKind": response_kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if !subresources.is_empty() {
        resource["subresources"] = json!(subresources);
    }
    resource
}

fn aggregated_list(registry: &Registry, core: bool, media: &str) -> Value {
    let api_version = if media == AGGREGATED_V2 {
        "apidiscovery.k8s.io/v2"
    } else {
        "apidiscovery.k8s.io/v2beta1"
    };
    let items: Vec<Value> = if core {
        let resources: Vec<Value> = registry
            .in_group_version("", "v1")
            .map(|rt| discovery_resource(rt))
            .collect();
        vec![json!({
            "metadata": {"creationTimestamp": null},
            "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}],
        })]
    } else {
        registry
            .groups()
            .iter()
            .map(|(group, versions)| {
                let versions: Vec<Value> = versions
                    .iter()
                    .map(|v| {
                        let resources: Vec<Value> = registry
                            .in_group_version(group, v)
                            .map(|rt| discovery_resource(rt))
                            .collect();
                        json!({"version": v, "resources": resources, "freshness": "Current"})
                    })
                    .collect();
                json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
            })
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": api_version,
        "metadata": {},
        "items": items,
    })
}

fn aggregated_response(media: &'static str, body: Value) -> Response {
    let bytes = serde_json::to_vec(&body).expect("a JSON value serialises");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(media))],
        bytes,
    )
        .into_response()
}
