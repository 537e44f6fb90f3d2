//! The `meta/v1` schemas every group-version document references, as
//! kube-apiserver names them (a subset of their fields and descriptions).

use serde_json::{Map, Value, json};

/// Prefix of apimachinery's `meta/v1` schema names.
pub(super) const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// `{"$ref": "#/components/schemas/<name>"}`.
pub(super) fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A `meta/v1` schema reference.
pub(super) fn meta(name: &str) -> Value {
    reference(&format!("{META}.{name}"))
}

/// A property that is a `meta/v1` schema; `allOf` keeps the description next
/// to the `$ref`, as kube-apiserver publishes it.
pub(super) fn meta_property(name: &str, description: &str) -> Value {
    json!({"allOf": [meta(name)], "description": description})
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn integer(description: &str) -> Value {
    json!({"type": "integer", "format": "int64", "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string", "default": ""}, "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description})
}

/// `apiVersion` and `kind`, the type metadata of every object.
pub(super) fn type_meta_properties() -> [(String, Value); 2] {
    [
        (
            "apiVersion".to_owned(),
            string(
                "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
            ),
        ),
        (
            "kind".to_owned(),
            string(
                "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.",
            ),
        ),
    ]
}

/// `schema` with `apiVersion` and `kind` among its properties.
pub(super) fn with_type_meta(mut schema: Value) -> Value {
    if let Some(properties) = schema
        .as_object_mut()
        .map(|s| s.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        properties.extend(type_meta_properties());
    }
    schema
}

/// The `meta/v1` (and `runtime`) schemas, keyed by their full names.
pub(super) fn schemas() -> Map<String, Value> {
    let time = || meta("Time");
    let mut schemas = Map::new();
    let mut add = |name: &str, schema: Value| {
        schemas.insert(format!("{META}.{name}"), schema);
    };
    add(
        "ObjectMeta",
        json!({
            "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
            "type": "object",
            "properties": {
                "annotations": string_map("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata."),
                "creationTimestamp": {"allOf": [time()], "description": "CreationTimestamp is a timestamp representing the server time when this object was created. Populated by the system. Read-only."},
                "deletionGracePeriodSeconds": integer("Number of seconds allowed for this object to gracefully terminate before it will be removed from the system. Read-only."),
                "deletionTimestamp": {"allOf": [time()], "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted. Populated by the system when a graceful deletion is requested. Read-only."},
                "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge", "description": "Must be empty before the object is deleted from the registry."},
                "generateName": string("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
                "generation": integer("A sequence number representing a specific generation of the desired state. Populated by the system. Read-only."),
                "labels": string_map("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
                "managedFields": {"type": "array", "items": {"allOf": [meta("ManagedFieldsEntry")], "default": {}}, "x-kubernetes-list-type": "atomic", "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow."},
                "name": string("Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Cannot be updated."),
                "namespace": string("Namespace defines the space within which each name must be unique. An empty namespace is equivalent to the \"default\" namespace. Cannot be updated."),
                "ownerReferences": {"type": "array", "items": {"allOf": [meta("OwnerReference")], "default": {}}, "x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map", "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge", "description": "List of objects depended by this object."},
                "resourceVersion": string("An opaque value that represents the internal version of this object that can be used by clients to determine when objects have changed. Populated by the system. Read-only."),
                "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
                "uid": string("UID is the unique in time and space value for this object. Populated by the system. Read-only.")
            }
        }),
    );
    add(
        "ListMeta",
        json!({
            "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
            "type": "object",
            "properties": {
                "continue": string("continue may be set if the user set a limit on the number of items returned, and indicates that the server has more data available."),
                "remainingItemCount": integer("remainingItemCount is the number of subsequent items in the list which are not included in this list response."),
                "resourceVersion": string("String that identifies the server's internal version of this object that can be used by clients to determine when objects have changed."),
                "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system.")
            }
        }),
    );
    add(
        "Time",
        json!({
            "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON, in RFC 3339 form.",
            "type": "string",
            "format": "date-time"
        }),
    );
    add(
        "FieldsV1",
        json!({
            "description": "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format.",
            "type": "object"
        }),
    );
    add(
        "ManagedFieldsEntry",
        json!({
            "description": "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that the fieldset applies to.",
            "type": "object",
            "properties": {
                "apiVersion": string("APIVersion defines the version of this resource that this field set applies to."),
                "fieldsType": string("FieldsType is the discriminator for the different fields format and version. There is currently only one possible value: \"FieldsV1\""),
                "fieldsV1": {"allOf": [meta("FieldsV1")], "description": "FieldsV1 holds the first JSON version format as described in the \"FieldsV1\" type."},
                "manager": string("Manager is an identifier of the workflow managing these fields."),
                "operation": string("Operation is the type of operation which lead to this ManagedFieldsEntry being created. The only valid values for this field are 'Apply' and 'Update'."),
                "subresource": string("Subresource is the name of the subresource used to update that object, or empty string if the object was updated through the main resource."),
                "time": {"allOf": [time()], "description": "Time is the timestamp of when the ManagedFields entry was added."}
            }
        }),
    );
    add(
        "OwnerReference",
        json!({
            "description": "OwnerReference contains enough information to let you identify an owning object.",
            "type": "object",
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {
                "apiVersion": string("API version of the referent."),
                "blockOwnerDeletion": {"type": "boolean", "description": "If true, AND if the owner has the \"foregroundDeletion\" finalizer, then the owner cannot be deleted from the key-value store until this reference is removed."},
                "controller": {"type": "boolean", "description": "If true, this reference points to the managing controller."},
                "kind": string("Kind of the referent."),
                "name": string("Name of the referent."),
                "uid": string("UID of the referent.")
            },
            "x-kubernetes-map-type": "atomic"
        }),
    );
    add(
        "Status",
        with_type_meta(json!({
            "description": "Status is a return value for calls that don't return other objects.",
            "type": "object",
            "properties": {
                "code": {"type": "integer", "format": "int32", "description": "Suggested HTTP return code for this status, 0 if not set."},
                "details": {"allOf": [meta("StatusDetails")], "description": "Extended data associated with the reason."},
                "message": string("A human-readable description of the status of this operation."),
                "metadata": meta_property("ListMeta", "Standard list metadata."),
                "reason": string("A machine-readable description of why this operation is in the \"Failure\" status."),
                "status": string("Status of the operation. One of: \"Success\" or \"Failure\".")
            },
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}]
        })),
    );
    add(
        "StatusDetails",
        json!({
            "description": "StatusDetails is a set of additional properties that MAY be set by the server to provide additional information about a response.",
            "type": "object",
            "properties": {
                "causes": {"type": "array", "items": {"allOf": [meta("StatusCause")], "default": {}}, "x-kubernetes-list-type": "atomic", "description": "The Causes array includes more details associated with the StatusReason failure."},
                "group": string("The group attribute of the resource associated with the status StatusReason."),
                "kind": string("The kind attribute of the resource associated with the status StatusReason."),
                "name": string("The name attribute of the resource associated with the status StatusReason (when there is a single name which can be described)."),
                "retryAfterSeconds": {"type": "integer", "format": "int32", "description": "If specified, the time in seconds before the operation should be retried."},
                "uid": string("UID of the resource.")
            }
        }),
    );
    add(
        "StatusCause",
        json!({
            "description": "StatusCause provides more information about an api.Status failure, including cases when multiple errors are encountered.",
            "type": "object",
            "properties": {
                "field": string("The field of the resource that has caused this error, as named by its JSON serialization."),
                "message": string("A human-readable description of the cause of the error."),
                "reason": string("A machine-readable description of the cause of the error.")
            }
        }),
    );
    add(
        "WatchEvent",
        json!({
            "description": "Event represents a single event to a watched resource.",
            "type": "object",
            "required": ["type", "object"],
            "properties": {
                "object": {"allOf": [reference("io.k8s.apimachinery.pkg.runtime.RawExtension")], "description": "Object is: * If Type is Added or Modified: the new state of the object. * If Type is Deleted: the state of the object immediately before deletion. * If Type is Error: *Status is recommended; other types may make sense depending on context."},
                "type": {"type": "string", "default": ""}
            }
        }),
    );
    add(
        "DeleteOptions",
        with_type_meta(json!({
            "description": "DeleteOptions may be provided when deleting an API object.",
            "type": "object",
            "properties": {
                "dryRun": strings("When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed"),
                "gracePeriodSeconds": integer("The duration in seconds before the object should be deleted."),
                "orphanDependents": {"type": "boolean", "description": "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7."},
                "preconditions": {"allOf": [meta("Preconditions")], "description": "Must be fulfilled before a deletion is carried out. If not possible, a 409 Conflict status will be returned."},
                "propagationPolicy": string("Whether and how garbage collection will be performed. Acceptable values are: 'Orphan', 'Background', 'Foreground'.")
            }
        })),
    );
    add(
        "Preconditions",
        json!({
            "description": "Preconditions must be fulfilled before an operation (update, delete, etc.) is carried out.",
            "type": "object",
            "properties": {
                "resourceVersion": string("Specifies the target ResourceVersion"),
                "uid": string("Specifies the target UID.")
            }
        }),
    );
    add(
        "Patch",
        json!({
            "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
            "type": "object"
        }),
    );
    add(
        "APIResourceList",
        json!({
            "description": "APIResourceList is a list of APIResource, it is used to expose the name of the resources supported in a specific group and version, and if the resource is namespaced.",
            "type": "object",
            "required": ["groupVersion", "resources"],
            "properties": {
                "groupVersion": {"type": "string", "default": "", "description": "groupVersion is the group and version this APIResourceList is for."},
                "resources": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "atomic", "description": "resources contains the name of the resources and if they are namespaced."}
            }
        }),
    );
    schemas.insert(
        "io.k8s.apimachinery.pkg.runtime.RawExtension".to_owned(),
        json!({"description": "RawExtension is used to hold extensions in external versions.", "type": "object"}),
    );
    schemas
}
