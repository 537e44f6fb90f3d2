use serde_json::{Value, json};

use super::{discovery_index, document, group_version_document, schema_name};
use crate::registry::{Registry, ResourceType};

fn widgets() -> Registry {
    crate::testing::test_registry()
}

fn gv_doc(registry: &Registry) -> Value {
    group_version_document(registry, "example.com", "v1").expect("example.com/v1 is served")
}

/// Resolves a local `$ref` the way kubectl does.
fn resolve<'a>(doc: &'a Value, reference: &Value) -> &'a Value {
    let path = reference["$ref"].as_str().expect("a $ref");
    let name = path
        .strip_prefix("#/components/schemas/")
        .expect("a local schema ref");
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "{name} is defined");
    schema
}

#[test]
fn index_lists_every_document_with_a_content_hash() {
    let registry = widgets();
    let index = discovery_index(&registry);
    let paths = index["paths"].as_object().expect("paths");
    assert!(paths.contains_key("api"));
    assert!(paths.contains_key("apis"));
    let url = paths["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url");
    let hash = url
        .strip_prefix("/openapi/v3/apis/example.com/v1?hash=")
        .expect("kube's URL form");
    assert_eq!(hash.len(), 64);
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
    // Stable for the same registry, different when the document changes.
    assert_eq!(discovery_index(&widgets()), index);
    let mut changed = widgets();
    changed.register(ResourceType::schemaless(
        "example.com",
        "v1",
        "Extra",
        "extras",
        true,
    ));
    assert_ne!(
        discovery_index(&changed)["paths"]["apis/example.com/v1"],
        paths["apis/example.com/v1"]
    );
    assert_eq!(discovery_index(&changed)["paths"]["api"], paths["api"]);
    // Every listed document is served.
    for key in paths.keys() {
        assert!(document(&registry, key).is_some(), "{key}");
    }
    assert!(document(&registry, "apis/example.com/v9").is_none());
    assert!(group_version_document(&registry, "nope.dev", "v1").is_none());
}

#[test]
fn core_group_documents_live_under_api() {
    let mut registry = Registry::new();
    registry.register(ResourceType::schemaless(
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        true,
    ));
    let index = discovery_index(&registry);
    assert!(
        index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .expect("url")
            .starts_with("/openapi/v3/api/v1?hash=")
    );
    let doc = document(&registry, "api/v1").expect("core document");
    assert!(doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"].is_object());
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"].is_object());
}

#[test]
fn kinds_are_named_like_kube_and_carry_their_gvk() {
    assert_eq!(
        schema_name("example.com", "v1", "Widget"),
        "com.example.v1.Widget"
    );
    let doc = gv_doc(&widgets());
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = &doc["components"]["schemas"];
    let widget = &schemas["com.example.v1.Widget"];
    assert_eq!(
        widget["x-kubernetes-group-version-kind"],
        json!([{"group": "example.com", "kind": "Widget", "version": "v1"}])
    );
    assert_eq!(widget["type"], "object");
    assert_eq!(widget["properties"]["apiVersion"]["type"], "string");
    assert_eq!(widget["properties"]["kind"]["type"], "string");
    // The CRD schema is kept, with what clients read from it: list map keys
    // (server-side apply), int-or-string, defaults (`kubectl explain`).
    let spec = &widget["properties"]["spec"]["properties"];
    assert_eq!(
        spec["settings"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    assert_eq!(spec["port"]["x-kubernetes-int-or-string"], true);
    assert_eq!(spec["replicas"]["default"], 1);
    let object_meta = resolve(&doc, &widget["properties"]["metadata"]["allOf"][0]);
    assert!(object_meta["properties"]["labels"].is_object());
    let managed = resolve(
        &doc,
        &object_meta["properties"]["managedFields"]["items"]["allOf"][0],
    );
    resolve(&doc, &managed["properties"]["time"]["allOf"][0]);

    let list = &schemas["com.example.v1.WidgetList"];
    assert_eq!(
        list["x-kubernetes-group-version-kind"][0]["kind"],
        "WidgetList"
    );
    assert_eq!(resolve(&doc, &list["properties"]["items"]["items"]), widget);
    resolve(&doc, &list["properties"]["metadata"]["allOf"][0]);
    for name in ["Status", "WatchEvent", "DeleteOptions", "Patch", "ListMeta"] {
        assert!(
            schemas[format!("io.k8s.apimachinery.pkg.apis.meta.v1.{name}")].is_object(),
            "{name}"
        );
    }
}

#[test]
fn every_ref_resolves() {
    fn walk(doc: &Value, value: &Value) {
        match value {
            Value::Object(map) => {
                if map.contains_key("$ref") {
                    resolve(doc, value);
                }
                map.values().for_each(|v| walk(doc, v));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(doc, v)),
            _ => {}
        }
    }
    let doc = gv_doc(&widgets());
    walk(&doc, &doc);
}

#[test]
fn schemaless_kinds_preserve_unknown_fields() {
    let mut registry = Registry::new();
    registry.register(ResourceType::schemaless(
        "example.com",
        "v1",
        "Thing",
        "things",
        false,
    ));
    let doc = group_version_document(&registry, "example.com", "v1").expect("served");
    let thing = &doc["components"]["schemas"]["com.example.v1.Thing"];
    assert_eq!(thing["type"], "object");
    assert_eq!(thing["x-kubernetes-preserve-unknown-fields"], true);
    assert!(
        thing["properties"]["metadata"]["allOf"][0]["$ref"]
            .as_str()
            .expect("ref")
            .ends_with(".ObjectMeta")
    );
}

fn parameter_names(operation: &Value) -> Vec<String> {
    operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["name"].as_str().expect("named").to_owned())
        .collect()
}

#[test]
fn namespaced_paths_and_operations() {
    let doc = gv_doc(&widgets());
    let paths = &doc["paths"];
    let all = &paths["/apis/example.com/v1/widgets"];
    assert_eq!(all["get"]["x-kubernetes-action"], "list");
    assert_eq!(
        all["get"]["operationId"],
        "listExampleComV1WidgetForAllNamespaces"
    );
    assert!(all.get("post").is_none(), "no create without a namespace");

    let collection = &paths["/apis/example.com/v1/namespaces/{namespace}/widgets"];
    assert_eq!(parameter_names(collection), ["namespace", "pretty"]);
    let list = &collection["get"];
    for name in [
        "watch",
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "resourceVersion",
        "timeoutSeconds",
        "allowWatchBookmarks",
        "sendInitialEvents",
    ] {
        assert!(
            parameter_names(list).contains(&name.to_owned()),
            "list takes {name}"
        );
    }
    let gvk = json!({"group": "example.com", "version": "v1", "kind": "Widget"});
    for (method, action) in [
        ("get", "list"),
        ("post", "post"),
        ("delete", "deletecollection"),
    ] {
        assert_eq!(collection[method]["x-kubernetes-action"], action);
        assert_eq!(collection[method]["x-kubernetes-group-version-kind"], gvk);
    }
    assert_eq!(
        collection["post"]["operationId"],
        "createExampleComV1NamespacedWidget"
    );

    let item = &paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"];
    assert_eq!(parameter_names(item), ["name", "namespace", "pretty"]);
    for (method, action) in [
        ("get", "get"),
        ("put", "put"),
        ("patch", "patch"),
        ("delete", "delete"),
    ] {
        assert_eq!(item[method]["x-kubernetes-action"], action, "{method}");
        assert_eq!(item[method]["x-kubernetes-group-version-kind"], gvk);
    }
    for op in [&collection["post"], &item["put"], &item["patch"]] {
        let names = parameter_names(op);
        for name in ["fieldValidation", "dryRun", "fieldManager"] {
            assert!(
                names.contains(&name.to_owned()),
                "{} takes {name}",
                op["operationId"]
            );
        }
        assert!(
            op["parameters"]
                .as_array()
                .expect("parameters")
                .iter()
                .all(|p| p["in"] == "query")
        );
    }
    let patch_types: Vec<&String> = item["patch"]["requestBody"]["content"]
        .as_object()
        .expect("content")
        .keys()
        .collect();
    assert_eq!(
        patch_types,
        [
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json"
        ]
    );
    assert_eq!(
        resolve(
            &doc,
            &item["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        )["x-kubernetes-group-version-kind"][0]["kind"],
        "Widget"
    );

    let status = &paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status"];
    assert_eq!(
        status["put"]["operationId"],
        "replaceExampleComV1NamespacedWidgetStatus"
    );
    assert!(status["patch"].is_object());
    assert!(status.get("delete").is_none());
}

#[test]
fn cluster_scoped_kinds_and_types_without_status() {
    let mut registry = Registry::new();
    registry.register(ResourceType::schemaless(
        "example.com",
        "v1",
        "Thing",
        "things",
        false,
    ));
    let doc = group_version_document(&registry, "example.com", "v1").expect("served");
    let paths = doc["paths"].as_object().expect("paths");
    let mut keys: Vec<&String> = paths.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "/apis/example.com/v1/",
            "/apis/example.com/v1/things",
            "/apis/example.com/v1/things/{name}"
        ]
    );
    let collection = &paths["/apis/example.com/v1/things"];
    assert_eq!(collection["get"]["operationId"], "listExampleComV1Thing");
    assert_eq!(collection["post"]["x-kubernetes-action"], "post");
    assert_eq!(
        parameter_names(&paths["/apis/example.com/v1/things/{name}"]),
        ["name", "pretty"]
    );
}

/// What kubectl's `supportsQueryParamV3` does: the first PATCH operation of the
/// kind decides whether the server validates fields.
#[test]
fn kubectl_finds_field_validation_on_the_kinds_patch() {
    let doc = gv_doc(&widgets());
    for kind in ["Widget", "Tenant"] {
        let patch = doc["paths"]
            .as_object()
            .expect("paths")
            .values()
            .filter_map(|item| item.get("patch"))
            .find(|op| op["x-kubernetes-group-version-kind"]["kind"] == kind)
            .unwrap_or_else(|| panic!("a PATCH for {kind}"));
        assert!(parameter_names(patch).contains(&"fieldValidation".to_owned()));
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_none()
        );
    }
}
