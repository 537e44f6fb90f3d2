//! `meta.k8s.io/v1` `Table` responses, which `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Columns and cells follow
//! kube-apiserver's table convertor for custom resources.

mod jsonpath;

pub use jsonpath::JsonPath;

use std::time::Duration;

use serde_json::{Value, json};

use crate::registry::{PrinterColumn, ResourceType};
use crate::status::ApiError;

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Whether an `Accept` header asks for a `Table` (`as=Table;g=meta.k8s.io` with
/// `v=v1` or `v=v1beta1`) in any of its media ranges.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media_type = parts.next().unwrap_or_default();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let param = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        media_type.eq_ignore_ascii_case("application/json")
            && param("as") == Some("Table")
            && param("g") == Some("meta.k8s.io")
            && matches!(param("v"), Some("v1" | "v1beta1"))
    })
}

/// What each row carries in `object` (the `includeObject` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object: `null`.
    None,
    /// A `PartialObjectMetadata` (kube's default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses `includeObject`; absent or empty means [`IncludeObject::Metadata`].
    pub fn from_query(value: Option<&str>) -> Result<IncludeObject, ApiError> {
        match value.unwrap_or_default() {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(ApiError::BadRequest(format!(
                "unrecognized includeObject value: {other:?}"
            ))),
        }
    }
}

/// The `Table` of `objects` of type `rt`; `list_meta` (`resourceVersion`,
/// `continue`, `remainingItemCount`) becomes its `metadata`, and `now` ages `date`
/// columns.
///
/// Columns are `Name` then the type's printer columns; a type without printer
/// columns gets `Age` (`.metadata.creationTimestamp`), as kube serves CRDs.
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    list_meta: Value,
    include_object: IncludeObject,
    now: jiff::Timestamp,
) -> Value {
    let columns = columns(rt);
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| row(&columns, object, include_object, now))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_definitions(&columns),
        "rows": rows,
    })
}

/// The `Table` sent as the object of one watch event for `kubectl get -w`: one row,
/// and column definitions only when `with_headers` (kube sends them with the first
/// event only).
pub fn table_row_for_watch(
    rt: &ResourceType,
    object: &Value,
    include_object: IncludeObject,
    with_headers: bool,
    now: jiff::Timestamp,
) -> Value {
    let resource_version = object
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let mut table = table(
        rt,
        std::slice::from_ref(object),
        json!({"resourceVersion": resource_version}),
        include_object,
        now,
    );
    if !with_headers {
        table["columnDefinitions"] = json!([]);
    }
    table
}

fn columns(rt: &ResourceType) -> Vec<PrinterColumn> {
    if !rt.printer_columns.is_empty() {
        return rt.printer_columns.clone();
    }
    vec![PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: None,
        description: CREATION_TIMESTAMP_DESCRIPTION.into(),
        json_path: ".metadata.creationTimestamp".into(),
        priority: 0,
    }]
}

fn column_definitions(columns: &[PrinterColumn]) -> Vec<Value> {
    let mut definitions = vec![json!({
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": NAME_DESCRIPTION,
        "priority": 0,
    })];
    definitions.extend(columns.iter().map(|c| {
        let description = if c.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                c.json_path
            )
        } else {
            c.description.clone()
        };
        json!({
            "name": c.name,
            "type": c.type_,
            "format": c.format.clone().unwrap_or_default(),
            "description": description,
            "priority": c.priority,
        })
    }));
    definitions
}

fn row(
    columns: &[PrinterColumn],
    object: &Value,
    include: IncludeObject,
    now: jiff::Timestamp,
) -> Value {
    let name = object
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(json!(""));
    let mut cells = vec![name];
    cells.extend(columns.iter().map(|column| {
        let found = JsonPath::parse(&column.json_path)
            .ok()
            .and_then(|path| path.find(object).first().map(|v| (*v).clone()));
        match found {
            Some(value) => cell(&column.type_, &value, now),
            None => Value::Null,
        }
    }));
    let object = match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
        }),
        IncludeObject::Object => object.clone(),
    };
    json!({"cells": cells, "object": object})
}

/// A cell as kube's `cellForJSONValue`: the value when it has the column's type,
/// `null` otherwise; strings print any value; dates print as ages.
fn cell(type_: &str, value: &Value, now: jiff::Timestamp) -> Value {
    match (type_, value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(_)) => value.clone(),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => match n.as_i64() {
            Some(i) => json!(i),
            None => n.as_f64().map_or(Value::Null, |f| json!(f)),
        },
        ("boolean", Value::Bool(_)) => value.clone(),
        ("date", Value::String(text)) => json!(age(text, now)),
        _ => Value::Null,
    }
}

/// How long ago `timestamp` (RFC 3339) was, as kubectl shows it.
fn age(timestamp: &str, now: jiff::Timestamp) -> String {
    let Ok(then) = timestamp.parse::<jiff::Timestamp>() else {
        return "<invalid>".into();
    };
    if timestamp.starts_with("0001-01-01T00:00:00") {
        // Go's zero time.
        return "<unknown>".into();
    }
    let elapsed = now.as_nanosecond() - then.as_nanosecond();
    if elapsed < 0 {
        // Like HumanDuration: up to 2s in the future is clock skew, more is invalid.
        return if elapsed <= -2_000_000_000 {
            "<invalid>"
        } else {
            "0s"
        }
        .into();
    }
    human_duration(Duration::from_nanos(
        u64::try_from(elapsed).unwrap_or(u64::MAX),
    ))
}

/// A succinct age with ~2-3 significant figures, exactly as apimachinery's
/// `duration.HumanDuration` (`45s`, `3m12s`, `5h`, `2d3h`, `12d`, `3y120d`).
pub fn human_duration(d: Duration) -> String {
    let seconds = d.as_secs();
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{}y", days / 365),
            d => format!("{}y{d}d", days / 365),
        };
    }
    format!("{}y", days / 365)
}

#[cfg(test)]
mod tests;
