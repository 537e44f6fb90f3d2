//! Helpers for the wire format shared by every kind: `skip_serializing_if`
//! predicates and JSON schemas for fields that accept any JSON.
//!
//! `serde_json::Value` has the schema `true` in schemars, which is not a valid
//! structural schema for a CustomResourceDefinition. Fields of that type use
//! [`any_value`] (or [`any_value_map`] for maps) so the schema accepts any value
//! and the API server keeps unknown fields inside them.

use schemars::{Schema, SchemaGenerator, json_schema};

/// `skip_serializing_if` predicate: skip a `bool` that is `false`.
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

/// Schema of a field that holds any JSON value (object, array, string, number,
/// boolean).
pub(crate) fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema of a field that holds any JSON object (for example a CloudFormation
/// template).
pub(crate) fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema of a map from string keys to any JSON value.
pub(crate) fn any_value_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true },
    })
}

/// Schema of a list of any JSON values.
pub(crate) fn any_value_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "x-kubernetes-preserve-unknown-fields": true },
    })
}
