//! Value checks of a structural schema, with kube-apiserver's messages.

use crate::status::{FieldError, FieldErrorKind};
use serde_json::{Number, Value};

use super::{Path, flag, sub_schemas};

/// Every way `object` breaks `schema` (the CRD's `openAPIV3Schema` of the whole
/// object), as Kubernetes reports it: `spec.replicas: Invalid value: "string":
/// spec.replicas in body must be of type integer: "string"`.
///
/// Checks `type` (with `nullable`), `required`, `enum`, `minimum`/`maximum`
/// (and their `exclusive` forms), `multipleOf`, `minLength`/`maxLength`,
/// `pattern`, `format: date-time`, `minItems`/`maxItems`/`uniqueItems`,
/// `minProperties`/`maxProperties`, `properties`, `additionalProperties`,
/// `items`, `allOf`/`anyOf`/`oneOf` and `x-kubernetes-int-or-string`. Unknown
/// fields are not errors here: see [`unknown_fields`](super::unknown_fields).
///
/// Where Kubernetes uses a reason [`FieldErrorKind`] lacks (`FieldValueTypeInvalid`,
/// `FieldValueTooMany`), the error is [`FieldErrorKind::Invalid`] with
/// Kubernetes' message.
///
/// ```no_run
/// let schema = serde_json::json!({"type": "object", "properties": {
///     "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}});
/// let object = serde_json::json!({"spec": {"replicas": "abc"}});
/// let errors = outpost_apiserver::schema::validate(&schema, &object);
/// assert_eq!(errors[0].field, "spec.replicas");
/// ```
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(metadata) = object.get("metadata")
        && !metadata.is_object()
    {
        errors.push(type_error(
            &Path::Root.field("metadata"),
            metadata,
            "object",
        ));
    }
    check(schema, object, &Path::Root, true, &mut errors);
    errors
}

/// Checks `value` at `path` against `schema`; `root` skips `apiVersion`,
/// `kind` and `metadata`.
fn check(schema: &Value, value: &Value, path: &Path<'_>, root: bool, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        if !flag(schema, "nullable")
            && let Some(expected) = declared_type(schema)
        {
            errors.push(type_error(path, value, expected));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(is_integer(value) || value.is_string()) {
            errors.push(type_error(path, value, "integer-or-string"));
            return;
        }
    } else if let Some(expected) = schema.get("type").and_then(Value::as_str)
        && !has_type(value, expected)
    {
        errors.push(type_error(path, value, expected));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(|v| quote(&plain(v))).collect();
        errors.push(FieldError {
            field: path.render(),
            kind: FieldErrorKind::NotSupported,
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_value(value),
                supported.join(", ")
            ),
        });
    }
    match value {
        Value::String(s) => check_string(schema, s, value, path, errors),
        Value::Number(n) => check_number(schema, n, value, path, errors),
        Value::Array(items) => check_array(schema, items, value, path, errors),
        Value::Object(_) => check_object(schema, value, path, root, errors),
        Value::Bool(_) | Value::Null => {}
    }
    for sub in sub_schemas(schema, "allOf") {
        check(sub, value, path, root, errors);
    }
    let passes = |keyword: &str| {
        sub_schemas(schema, keyword)
            .filter(|sub| {
                let mut sub_errors = Vec::new();
                check(sub, value, path, root, &mut sub_errors);
                sub_errors.is_empty()
            })
            .count()
    };
    if schema.get("anyOf").is_some() && passes("anyOf") == 0 {
        errors.push(invalid(
            path,
            value,
            "must validate at least one schema (anyOf)",
        ));
    }
    if schema.get("oneOf").is_some() && passes("oneOf") != 1 {
        errors.push(invalid(
            path,
            value,
            "must validate one and only one schema (oneOf)",
        ));
    }
}

fn check_string(
    schema: &Value,
    s: &str,
    value: &Value,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let chars = s.chars().count();
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (chars as u64) < min
    {
        errors.push(invalid(
            path,
            value,
            &format!("should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && (chars as u64) > max
    {
        errors.push(FieldError::too_long(path.render(), max as usize));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        // A pattern that does not compile would have been refused with the CRD.
        && let Some(re) = compiled(pattern)
        && !re.is_match(s)
    {
        errors.push(invalid(path, value, &format!("should match '{pattern}'")));
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && s.parse::<jiff::Timestamp>().is_err()
    {
        errors.push(invalid(
            path,
            value,
            &format!("must be of type date-time: {}", quote(s)),
        ));
    }
}

fn check_number(
    schema: &Value,
    n: &Number,
    value: &Value,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let Some(x) = n.as_f64() else { return };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMinimum");
        if x < min || (exclusive && x == min) {
            let op = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(invalid(
                path,
                value,
                &format!("should be {op} {}", number_text(min)),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMaximum");
        if x > max || (exclusive && x == max) {
            let op = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(invalid(
                path,
                value,
                &format!("should be {op} {}", number_text(max)),
            ));
        }
    }
    if let Some(factor) = schema.get("multipleOf").and_then(Value::as_f64)
        && factor > 0.0
        && (x / factor).fract() != 0.0
    {
        let detail = format!("should be a multiple of {}", number_text(factor));
        errors.push(invalid(path, value, &detail));
    }
}

fn check_array(
    schema: &Value,
    items: &[Value],
    value: &Value,
    path: &Path<'_>,
    errors: &mut Vec<FieldError>,
) {
    let len = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && len < min
    {
        errors.push(invalid(
            path,
            value,
            &format!("should have at least {min} items"),
        ));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && len > max
    {
        errors.push(FieldError {
            field: path.render(),
            kind: FieldErrorKind::Invalid,
            message: format!("Too many: {len}: must have at most {max} items"),
        });
    }
    if flag(schema, "uniqueItems") {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                errors.push(FieldError {
                    field: path.index(i).render(),
                    kind: FieldErrorKind::Duplicate,
                    message: format!("Duplicate value: {}", go_value(item)),
                });
            }
        }
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item_schema, item, &path.index(i), false, errors);
        }
    }
}

fn check_object(
    schema: &Value,
    value: &Value,
    path: &Path<'_>,
    root: bool,
    errors: &mut Vec<FieldError>,
) {
    let Some(fields) = value.as_object() else {
        return;
    };
    let server_owned = |name: &str| root && matches!(name, "apiVersion" | "kind" | "metadata");
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = name.as_str()
            && !server_owned(name)
            && !fields.contains_key(name)
        {
            errors.push(FieldError::required(path.field(name).render(), ""));
        }
    }
    let count = fields.len() as u64;
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && count < min
    {
        errors.push(invalid(
            path,
            value,
            &format!("should have at least {min} properties"),
        ));
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && count > max
    {
        errors.push(invalid(
            path,
            value,
            &format!("should have at most {max} properties"),
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (name, field) in fields {
        if server_owned(name) {
            continue;
        }
        if let Some(property) = properties.and_then(|p| p.get(name)) {
            check(property, field, &path.field(name), false, errors);
        } else if let Some(additional) = additional {
            check(additional, field, &path.key(name), false, errors);
        }
    }
}

/// `pattern` compiled, once per pattern rather than once per string checked (as
/// kube-apiserver compiles a CRD's schema once); `None` if it does not compile.
fn compiled(pattern: &str) -> Option<regex::Regex> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    /// Patterns come from CRDs, a few each; the bound only keeps a stream of
    /// different CRDs from growing the map without end.
    const KEPT: usize = 512;
    static COMPILED: LazyLock<Mutex<HashMap<String, Option<regex::Regex>>>> =
        LazyLock::new(Default::default);
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(re) = compiled.get(pattern) {
        return re.clone();
    }
    if compiled.len() >= KEPT {
        compiled.clear();
    }
    let re = regex::Regex::new(pattern).ok();
    compiled.insert(pattern.to_owned(), re.clone());
    re
}

/// The type a schema demands of a value, if any.
fn declared_type(schema: &Value) -> Option<&str> {
    if flag(schema, "x-kubernetes-int-or-string") {
        return Some("integer-or-string");
    }
    schema.get("type").and_then(Value::as_str)
}

/// Whether `value` is of OpenAPI type `expected`; like kube-openapi, an integral
/// float is an integer and an integer is a number.
fn has_type(value: &Value, expected: &str) -> bool {
    match expected {
        "string" => value.is_string(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        // A type the CRD could not have declared: nothing to check.
        _ => true,
    }
}

fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// The JSON type of a value as kube-openapi names it in messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Kubernetes reports the type it found, not the value:
/// `Invalid value: "string": spec.replicas in body must be of type integer: "string"`.
fn type_error(path: &Path<'_>, value: &Value, expected: &str) -> FieldError {
    let found = Value::String(type_name(value).to_owned());
    let detail = format!("must be of type {expected}: {}", quote(type_name(value)));
    invalid(path, &found, &detail)
}

/// `Invalid value: <value>: <path> in body <detail>`.
fn invalid(path: &Path<'_>, value: &Value, detail: &str) -> FieldError {
    let path = path.render();
    let subject = if path.is_empty() {
        "body".to_owned()
    } else {
        format!("{path} in body")
    };
    FieldError {
        field: path,
        kind: FieldErrorKind::Invalid,
        message: format!("Invalid value: {}: {subject} {detail}", go_value(value)),
    }
}

/// A value as Kubernetes prints it in `Invalid value: ...`: strings quoted,
/// numbers and booleans bare, `null` quoted, the rest as JSON.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => quote(s),
        Value::Null => quote("null"),
        Value::Number(n) => n
            .as_f64()
            .filter(|_| n.is_f64())
            .map_or_else(|| n.to_string(), number_text),
        other => other.to_string(),
    }
}

/// A value's text without JSON quotes for strings.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A string quoted like Go's `%q`.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A number as Go's `%v` prints a float64: `0`, not `0.0`.
fn number_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
