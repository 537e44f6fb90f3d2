//! The `paths` of a group-version document: every endpoint of a resource type
//! with kube-apiserver's operations, parameters and extensions.

use serde_json::{Map, Value, json};

use super::meta::{meta, reference};
use super::{operation_group, schema_name};
use crate::registry::{ResourceType, SubresourceBody};

/// The query parameters a list (and watch) takes.
const LIST_PARAMETERS: &[(&str, &str, &str)] = &[
    (
        "allowWatchBookmarks",
        "boolean",
        "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag.",
    ),
    (
        "continue",
        "string",
        "The continue option should be set when retrieving more results from the server.",
    ),
    (
        "fieldSelector",
        "string",
        "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
    ),
    (
        "labelSelector",
        "string",
        "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
    ),
    (
        "limit",
        "integer",
        "limit is a maximum number of responses to return for a list call.",
    ),
    (
        "resourceVersion",
        "string",
        "resourceVersion sets a constraint on what resource versions a request may be served from.",
    ),
    (
        "resourceVersionMatch",
        "string",
        "resourceVersionMatch determines how resourceVersion is applied to list calls.",
    ),
    (
        "sendInitialEvents",
        "boolean",
        "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection.",
    ),
    (
        "timeoutSeconds",
        "integer",
        "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
    ),
    (
        "watch",
        "boolean",
        "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
    ),
];

/// The query parameters of a write (create, replace, patch).
const WRITE_PARAMETERS: &[(&str, &str, &str)] = &[
    (
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    ),
    (
        "fieldManager",
        "string",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    ),
    (
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
    ),
];

/// The query parameters of a delete.
const DELETE_PARAMETERS: &[(&str, &str, &str)] = &[
    (
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
    ),
    (
        "gracePeriodSeconds",
        "integer",
        "The duration in seconds before the object should be deleted.",
    ),
    (
        "orphanDependents",
        "boolean",
        "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7.",
    ),
    (
        "propagationPolicy",
        "string",
        "Whether and how garbage collection will be performed. Acceptable values are: 'Orphan', 'Background', 'Foreground'.",
    ),
];

/// The media types a patch body may have; no strategic merge patch for custom
/// resources, which tells `kubectl apply` to use a JSON merge patch.
const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

/// Every path of `rt`, with its operations.
pub(super) fn paths(rt: &ResourceType) -> Vec<(String, Value)> {
    let ops = Operations::new(rt);
    let prefix = if rt.group.is_empty() {
        format!("/api/{}", rt.version)
    } else {
        format!("/apis/{}/{}", rt.group, rt.version)
    };
    let plural = &rt.plural;
    let mut paths = Vec::new();
    let (collection, scope) = if rt.namespaced {
        paths.push((
            format!("{prefix}/{plural}"),
            path_item(
                vec![query("pretty", "string", PRETTY)],
                [("get", ops.list(true))],
            ),
        ));
        (
            format!("{prefix}/namespaces/{{namespace}}/{plural}"),
            vec![namespace_parameter()],
        )
    } else {
        (format!("{prefix}/{plural}"), Vec::new())
    };
    let with = |mut extra: Vec<Value>| {
        extra.extend(scope.iter().cloned());
        extra.push(query("pretty", "string", PRETTY));
        extra
    };
    paths.push((
        collection.clone(),
        path_item(
            with(Vec::new()),
            [
                ("get", ops.list(false)),
                ("post", ops.create()),
                ("delete", ops.delete_collection()),
            ],
        ),
    ));
    let name = || vec![name_parameter(&rt.kind)];
    paths.push((
        format!("{collection}/{{name}}"),
        path_item(
            with(name()),
            [
                ("get", ops.item("read", "", "read the specified")),
                ("put", ops.replace("")),
                ("patch", ops.patch("")),
                ("delete", ops.delete()),
            ],
        ),
    ));
    if rt.status_subresource {
        paths.push((
            format!("{collection}/{{name}}/status"),
            path_item(
                with(name()),
                [
                    (
                        "get",
                        ops.item("read", "Status", "read status of the specified"),
                    ),
                    ("put", ops.replace("Status")),
                    ("patch", ops.patch("Status")),
                ],
            ),
        ));
    }
    for (sub, body) in rt.described_subresources() {
        let title = capitalized(sub);
        paths.push((
            format!("{collection}/{{name}}/{sub}"),
            path_item(
                with(name()),
                [
                    (
                        "get",
                        ops.item("read", &title, &format!("read {sub} of the specified")),
                    ),
                    ("patch", ops.subresource_write("patch", &title, body)),
                    ("put", ops.subresource_write("put", &title, body)),
                ],
            ),
        ));
    }
    paths
}

/// `scale` → `Scale`, as operation ids spell a subresource.
fn capitalized(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

const PRETTY: &str = "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).";

fn path_item<const N: usize>(parameters: Vec<Value>, operations: [(&str, Value); N]) -> Value {
    let mut item = Map::new();
    for (method, operation) in operations {
        item.insert(method.to_owned(), operation);
    }
    item.insert("parameters".to_owned(), Value::Array(parameters));
    Value::Object(item)
}

fn query(name: &str, type_: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": type_, "uniqueItems": true}
    })
}

fn queries(parameters: &[(&str, &str, &str)]) -> Vec<Value> {
    parameters.iter().map(|(n, t, d)| query(n, t, d)).collect()
}

fn name_parameter(kind: &str) -> Value {
    json!({
        "name": "name", "in": "path", "required": true,
        "description": format!("name of the {kind}"),
        "schema": {"type": "string", "uniqueItems": true}
    })
}

fn namespace_parameter() -> Value {
    json!({
        "name": "namespace", "in": "path", "required": true,
        "description": "object name and auth scope, such as for teams and projects",
        "schema": {"type": "string", "uniqueItems": true}
    })
}

/// `{"<media type>": {"schema": schema}}` for each media type.
fn content(types: &[&str], schema: &Value) -> Value {
    Value::Object(
        types
            .iter()
            .map(|t| ((*t).to_owned(), json!({"schema": schema})))
            .collect(),
    )
}

/// Builds the operations of one resource type.
struct Operations<'a> {
    rt: &'a ResourceType,
    /// `ExampleComV1`, the group-version part of operation ids.
    group_version: String,
    /// `Namespaced` for namespaced types.
    scope: &'static str,
    object: Value,
    list: Value,
    gvk: Value,
}

impl<'a> Operations<'a> {
    fn new(rt: &'a ResourceType) -> Self {
        let (tag_group, version) = operation_group(&rt.group, &rt.version);
        Operations {
            rt,
            group_version: format!("{tag_group}{version}"),
            scope: if rt.namespaced { "Namespaced" } else { "" },
            object: reference(&schema_name(&rt.group, &rt.version, &rt.kind)),
            list: reference(&schema_name(&rt.group, &rt.version, &rt.list_kind)),
            gvk: json!({"group": rt.group, "version": rt.version, "kind": rt.kind}),
        }
    }

    fn operation(
        &self,
        action: &str,
        id: String,
        description: String,
        parameters: Vec<Value>,
        body: Option<Value>,
        responses: Value,
    ) -> Value {
        let (tag_group, version) = operation_group(&self.rt.group, &self.rt.version);
        let tag = format!(
            "{}{}_{version}",
            tag_group[..1].to_lowercase(),
            &tag_group[1..]
        );
        let mut op = json!({
            "tags": [tag],
            "description": description,
            "operationId": id,
            "responses": responses,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !parameters.is_empty() {
            op["parameters"] = Value::Array(parameters);
        }
        if let Some(body) = body {
            op["requestBody"] = body;
        }
        op
    }

    fn responses(&self, codes: &[(&str, &str)], schema: &Value, types: &[&str]) -> Value {
        let mut responses: Map<String, Value> = codes
            .iter()
            .map(|(code, description)| {
                let response =
                    json!({"description": description, "content": content(types, schema)});
                ((*code).to_owned(), response)
            })
            .collect();
        responses.insert("401".to_owned(), json!({"description": "Unauthorized"}));
        Value::Object(responses)
    }

    fn object_body(&self) -> Option<Value> {
        Some(json!({"content": content(&["*/*"], &self.object), "required": true}))
    }

    fn list(&self, all_namespaces: bool) -> Value {
        let kind = &self.rt.kind;
        let id = if all_namespaces {
            format!("list{}{kind}ForAllNamespaces", self.group_version)
        } else {
            format!("list{}{}{kind}", self.group_version, self.scope)
        };
        let types = [
            "application/json",
            "application/json;stream=watch",
            "application/yaml",
        ];
        let responses = self.responses(&[("200", "OK")], &self.list, &types);
        let description = format!("list or watch objects of kind {kind}");
        self.operation(
            "list",
            id,
            description,
            queries(LIST_PARAMETERS),
            None,
            responses,
        )
    }

    fn create(&self) -> Value {
        let kind = &self.rt.kind;
        let id = format!("create{}{}{kind}", self.group_version, self.scope);
        let codes = [("200", "OK"), ("201", "Created"), ("202", "Accepted")];
        let responses = self.responses(
            &codes,
            &self.object,
            &["application/json", "application/yaml"],
        );
        let description = format!("create a {kind}");
        self.operation(
            "post",
            id,
            description,
            queries(WRITE_PARAMETERS),
            self.object_body(),
            responses,
        )
    }

    fn delete_collection(&self) -> Value {
        let kind = &self.rt.kind;
        let id = format!("delete{}Collection{}{kind}", self.group_version, self.scope);
        let mut parameters = queries(DELETE_PARAMETERS);
        parameters.extend(
            queries(LIST_PARAMETERS)
                .into_iter()
                .filter(|p| p["name"] != "watch" && p["name"] != "allowWatchBookmarks"),
        );
        let responses = self.responses(
            &[("200", "OK")],
            &meta("Status"),
            &["application/json", "application/yaml"],
        );
        let body = json!({"content": content(&["*/*"], &meta("DeleteOptions"))});
        let description = format!("delete collection of {kind}");
        self.operation(
            "deletecollection",
            id,
            description,
            parameters,
            Some(body),
            responses,
        )
    }

    fn item(&self, verb: &str, suffix: &str, what: &str) -> Value {
        let kind = &self.rt.kind;
        let id = format!("{verb}{}{}{kind}{suffix}", self.group_version, self.scope);
        let responses = self.responses(
            &[("200", "OK")],
            &self.object,
            &["application/json", "application/yaml"],
        );
        self.operation(
            "get",
            id,
            format!("{what} {kind}"),
            Vec::new(),
            None,
            responses,
        )
    }

    /// A write of a plugin's subresource (`NAME/SUB`): the body is the subresource's
    /// own, described by `body`.
    fn subresource_write(&self, method: &str, title: &str, body: &SubresourceBody) -> Value {
        let kind = &self.rt.kind;
        let verb = if method == "patch" {
            "patch"
        } else {
            "replace"
        };
        let id = format!("{verb}{}{}{kind}{title}", self.group_version, self.scope);
        let responses = self.responses(
            &[("200", "OK")],
            &self.object,
            &["application/json", "application/yaml"],
        );
        let types: Vec<&str> = body.content_types.iter().map(String::as_str).collect();
        let request = json!({"content": content(&types, &body.schema), "required": true});
        self.operation(
            method,
            id,
            format!("{} {kind}", body.summary),
            queries(WRITE_PARAMETERS),
            Some(request),
            responses,
        )
    }

    fn replace(&self, suffix: &str) -> Value {
        let kind = &self.rt.kind;
        let id = format!("replace{}{}{kind}{suffix}", self.group_version, self.scope);
        let codes = [("200", "OK"), ("201", "Created")];
        let responses = self.responses(
            &codes,
            &self.object,
            &["application/json", "application/yaml"],
        );
        let what = if suffix.is_empty() {
            "replace the specified"
        } else {
            "replace status of the specified"
        };
        self.operation(
            "put",
            id,
            format!("{what} {kind}"),
            queries(WRITE_PARAMETERS),
            self.object_body(),
            responses,
        )
    }

    fn patch(&self, suffix: &str) -> Value {
        let kind = &self.rt.kind;
        let id = format!("patch{}{}{kind}{suffix}", self.group_version, self.scope);
        let mut parameters = queries(WRITE_PARAMETERS);
        parameters.push(query("force", "boolean", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests."));
        let codes = [("200", "OK"), ("201", "Created")];
        let responses = self.responses(
            &codes,
            &self.object,
            &["application/json", "application/yaml"],
        );
        let body = json!({"content": content(PATCH_TYPES, &meta("Patch")), "required": true});
        let what = if suffix.is_empty() {
            "partially update the specified"
        } else {
            "partially update status of the specified"
        };
        self.operation(
            "patch",
            id,
            format!("{what} {kind}"),
            parameters,
            Some(body),
            responses,
        )
    }

    fn delete(&self) -> Value {
        let kind = &self.rt.kind;
        let id = format!("delete{}{}{kind}", self.group_version, self.scope);
        let codes = [("200", "OK"), ("202", "Accepted")];
        let responses = self.responses(
            &codes,
            &self.object,
            &["application/json", "application/yaml"],
        );
        let body = json!({"content": content(&["*/*"], &meta("DeleteOptions"))});
        self.operation(
            "delete",
            id,
            format!("delete a {kind}"),
            queries(DELETE_PARAMETERS),
            Some(body),
            responses,
        )
    }
}
