//! Fields a structural schema does not know: found for strict field validation,
//! dropped (pruned) otherwise, as kube-apiserver does.

use serde_json::{Map, Value};

use super::{OBJECT_META_FIELDS, Path, child, flag, sub_schemas};

/// Dotted paths (`spec.foo`, `spec.inputs[0].bar`, `metadata.foo`) of every field
/// of `object` that `schema` does not declare, in the order of the object's keys.
///
/// A field is known when a `properties` entry (including one inside
/// `allOf`/`anyOf`/`oneOf`) names it, or the object allows it through
/// `additionalProperties` (a schema or `true`) or
/// `x-kubernetes-preserve-unknown-fields` (which keeps the whole subtree). At the
/// root, `apiVersion` and `kind` are always known, and so is every `ObjectMeta`
/// field of `metadata`; the same holds under `x-kubernetes-embedded-resource`.
///
/// ```no_run
/// use serde_json::json;
/// let schema = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
/// let object = json!({"metadata": {"name": "a", "foo": 1}, "spec": {"bar": 2}});
/// let unknown = outpost_apiserver::schema::unknown_fields(&schema, &object);
/// assert_eq!(unknown, ["metadata.foo", "spec.bar"]);
/// ```
pub fn unknown_fields(schema: &Value, object: &Value) -> Vec<String> {
    // Every write walks its whole object here, and almost every object has nothing
    // unknown: the walk reads without copying and writes out only the paths it reports.
    // It visits what `prune` visits, in the same order (pinned by a test).
    let mut unknown = Vec::new();
    find_in_resource(schema, object, &Path::Root, &mut unknown);
    unknown
}

/// Drops every field [`unknown_fields`] reports, as kube-apiserver does before
/// storing an object with `fieldValidation=Ignore` or `Warn`.
///
/// ```no_run
/// use serde_json::json;
/// let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
///     "properties": {"a": {"type": "string"}}}}});
/// let mut object = json!({"kind": "X", "spec": {"a": "x", "b": 1}});
/// outpost_apiserver::schema::prune(&schema, &mut object);
/// assert_eq!(object, json!({"kind": "X", "spec": {"a": "x"}}));
/// ```
pub fn prune(schema: &Value, object: &mut Value) {
    let mut unknown = Vec::new();
    prune_resource(schema, object, "", &mut unknown);
}

/// kube-apiserver's error for `fieldValidation=Strict`:
/// `strict decoding error: unknown field "spec.foo", unknown field "spec.bar"`.
/// Empty when there are no unknown fields.
pub fn strict_decoding_message(paths: &[String]) -> String {
    if paths.is_empty() {
        return String::new();
    }
    let fields: Vec<String> = paths
        .iter()
        .map(|p| {
            format!(
                "unknown field {}",
                serde_json::to_string(p).unwrap_or_default()
            )
        })
        .collect();
    format!("strict decoding error: {}", fields.join(", "))
}

/// [`prune_resource`] without pruning: what it would drop, in the order it reports.
fn find_in_resource(schema: &Value, value: &Value, path: &Path<'_>, unknown: &mut Vec<String>) {
    let Some(fields) = value.as_object() else {
        return find_in_value(Some(schema), value, path, unknown);
    };
    let mut found = Vec::new();
    let fields_of_type = fields
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "apiVersion" | "kind"));
    find_in_fields(Some(schema), fields_of_type, path, &mut found);
    if let Some(meta) = fields.get("metadata").and_then(Value::as_object) {
        let path = path.field("metadata");
        found.extend(
            meta.keys()
                .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
                .map(|k| path.field(k).render()),
        );
    }
    found.sort();
    unknown.extend(found);
}

/// [`prune_value`] without pruning.
fn find_in_value(
    schema: Option<&Value>,
    value: &Value,
    path: &Path<'_>,
    unknown: &mut Vec<String>,
) {
    if let Some(schema) = embedded_resource(schema, value) {
        return find_in_resource(schema, value, path, unknown);
    }
    match value {
        Value::Object(fields) => find_in_fields(schema, fields.iter(), path, unknown),
        Value::Array(items) => {
            let Some(items_schema) = items_of(schema) else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                find_in_value(items_schema, item, &path.index(i), unknown);
            }
        }
        _ => {}
    }
}

/// [`prune_fields`] without pruning.
fn find_in_fields<'a>(
    schema: Option<&Value>,
    fields: impl Iterator<Item = (&'a String, &'a Value)>,
    path: &Path<'_>,
    unknown: &mut Vec<String>,
) {
    let rules = FieldRules::of(schema);
    for (name, field) in fields {
        match rules.field(name) {
            Field::Under(schema) => find_in_value(Some(schema), field, &path.field(name), unknown),
            Field::Kept => {}
            Field::Unknown => unknown.push(path.field(name).render()),
        }
    }
}

/// A resource root (the object itself or an embedded resource): `apiVersion`
/// and `kind` are always known, `metadata` may hold what `ObjectMeta` holds.
fn prune_resource(schema: &Value, value: &mut Value, path: &str, unknown: &mut Vec<String>) {
    let Some(fields) = value.as_object_mut() else {
        return prune_value(Some(schema), value, path, unknown);
    };
    let mut found = Vec::new();
    let metadata = fields.remove("metadata");
    let type_meta: Vec<(String, Value)> = ["apiVersion", "kind"]
        .into_iter()
        .filter_map(|k| fields.remove(k).map(|v| (k.to_owned(), v)))
        .collect();
    prune_fields(Some(schema), fields, path, &mut found);
    fields.extend(type_meta);
    if let Some(mut metadata) = metadata {
        if let Some(meta) = metadata.as_object_mut() {
            prune_metadata(meta, &child(path, "metadata"), &mut found);
        }
        fields.insert("metadata".to_owned(), metadata);
    }
    // In the order of the object's keys, `metadata` included.
    found.sort();
    unknown.extend(found);
}

fn prune_metadata(meta: &mut Map<String, Value>, path: &str, unknown: &mut Vec<String>) {
    meta.retain(|k, _| {
        let known = OBJECT_META_FIELDS.contains(&k.as_str());
        if !known {
            unknown.push(child(path, k));
        }
        known
    });
}

/// Prunes `value` at `path`; `None` is no schema at all (every object key is
/// unknown).
fn prune_value(schema: Option<&Value>, value: &mut Value, path: &str, unknown: &mut Vec<String>) {
    if let Some(schema) = embedded_resource(schema, value) {
        return prune_resource(schema, value, path, unknown);
    }
    match value {
        Value::Object(fields) => prune_fields(schema, fields, path, unknown),
        Value::Array(items) => {
            let Some(items_schema) = items_of(schema) else {
                return;
            };
            for (i, item) in items.iter_mut().enumerate() {
                prune_value(items_schema, item, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

fn prune_fields(
    schema: Option<&Value>,
    fields: &mut Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let rules = FieldRules::of(schema);
    let mut unknown_here = Vec::new();
    for (name, field) in fields.iter_mut() {
        match rules.field(name) {
            Field::Under(schema) => prune_value(Some(schema), field, &child(path, name), unknown),
            Field::Kept => {}
            Field::Unknown => {
                unknown_here.push(name.clone());
                unknown.push(child(path, name));
            }
        }
    }
    for name in unknown_here {
        fields.remove(&name);
    }
}

/// The schema of `value` when it is an embedded resource (an object under
/// `x-kubernetes-embedded-resource`): its `apiVersion`, `kind` and `metadata` are known.
fn embedded_resource<'a>(schema: Option<&'a Value>, value: &Value) -> Option<&'a Value> {
    schema.filter(|s| flag(s, "x-kubernetes-embedded-resource") && value.is_object())
}

/// The schema of an array's items under `schema` (`Some(None)`: no schema, every object
/// key in them unknown); `None` when the array is kept whole: a free-form value
/// (`serde_json::Value`, a map's values) that is an array, nothing in it unknown, as
/// kube-apiserver keeps it.
fn items_of(schema: Option<&Value>) -> Option<Option<&Value>> {
    let items = schema.and_then(|s| s.get("items"));
    let preserve = schema.is_some_and(|s| flag(s, "x-kubernetes-preserve-unknown-fields"));
    (items.is_some() || !preserve).then_some(items)
}

/// How the fields of an object under `schema` are judged (both walks ask this).
struct FieldRules<'a> {
    schema: Option<&'a Value>,
    /// `additionalProperties` when it is a schema.
    additional: Option<&'a Value>,
    /// `x-kubernetes-preserve-unknown-fields` or `additionalProperties: true`.
    keep_all: bool,
}

/// What a field is under [`FieldRules`].
enum Field<'a> {
    /// Known, with this schema (a property's, or `additionalProperties`').
    Under(&'a Value),
    /// Kept whatever it holds.
    Kept,
    /// Unknown: reported, or pruned.
    Unknown,
}

impl<'a> FieldRules<'a> {
    fn of(schema: Option<&'a Value>) -> Self {
        let preserve = schema.is_some_and(|s| flag(s, "x-kubernetes-preserve-unknown-fields"));
        let additional = schema.and_then(|s| s.get("additionalProperties"));
        FieldRules {
            schema,
            keep_all: preserve || additional.and_then(Value::as_bool) == Some(true),
            additional: additional.filter(|a| a.is_object()),
        }
    }

    fn field(&self, name: &str) -> Field<'a> {
        if let Some(property) = self.schema.and_then(|s| property(s, name)) {
            Field::Under(property)
        } else if let Some(additional) = self.additional {
            Field::Under(additional)
        } else if self.keep_all {
            Field::Kept
        } else {
            Field::Unknown
        }
    }
}

/// The schema `properties` gives `name`, looking into `allOf`/`anyOf`/`oneOf`
/// too: kube-derive makes these structural, but a hand-written schema may not
/// repeat its branches' properties, and a field is not unknown for that.
fn property<'a>(schema: &'a Value, name: &str) -> Option<&'a Value> {
    if let Some(p) = schema.get("properties").and_then(|p| p.get(name)) {
        return Some(p);
    }
    ["allOf", "anyOf", "oneOf"]
        .into_iter()
        .flat_map(|k| sub_schemas(schema, k))
        .find_map(|sub| property(sub, name))
}

#[cfg(test)]
#[path = "unknown_tests.rs"]
mod tests;
