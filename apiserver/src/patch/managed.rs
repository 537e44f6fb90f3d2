//! `metadata.managedFields`: who owns which fields, read from and written back to
//! an object.

use std::fmt;

use serde_json::{Map, Value, json};

use super::fields::{FieldPath, FieldSet};

/// `operation` of an entry written by server-side apply.
pub const APPLY: &str = "Apply";
/// `operation` of an entry written by create, update and the non-apply patches.
pub const UPDATE: &str = "Update";

/// Who manages fields: kube's manager identifier. Appliers are identified without
/// their apiVersion, updaters with it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Manager {
    /// The field manager, e.g. `kubectl-client-side-apply`.
    pub name: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The API version the fields were written with.
    pub api_version: String,
    /// The subresource written, e.g. `status`; empty for the main resource.
    pub subresource: String,
}

impl Manager {
    /// Whether `self` and `other` are the same manager as kube identifies them.
    pub fn same_as(&self, other: &Manager) -> bool {
        self.name == other.name
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == APPLY || self.api_version == other.api_version)
    }
}

/// As kube names a manager in conflict messages: `"kubectl-edit" using v1`.
impl fmt::Display for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.name)?;
        if !self.subresource.is_empty() {
            write!(f, " with subresource {:?}", self.subresource)?;
        }
        if self.operation == UPDATE {
            write!(f, " using {}", self.api_version)?;
        }
        Ok(())
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedEntry {
    /// Who.
    pub manager: Manager,
    /// When the manager last changed the object.
    pub time: Option<String>,
    /// What it owns.
    pub fields: FieldSet,
}

/// The entries of `object`'s `metadata.managedFields`. Entries that are not
/// `FieldsV1` or do not decode are dropped, as kube drops invalid managed fields.
pub fn decode_managed_fields(object: &Value) -> Vec<ManagedEntry> {
    encoded_managed_fields(object)
        .into_iter()
        .filter_map(EncodedEntry::decode)
        .collect()
}

/// One `managedFields` entry with its fields as written (`FieldsV1`), decoded only if a
/// change reaches them: most writes change fields their manager already owns.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedEntry {
    /// Who.
    pub manager: Manager,
    /// When the manager last changed the object.
    pub time: Option<String>,
    /// What it owns, as `FieldsV1`.
    pub fields_v1: Value,
}

impl EncodedEntry {
    /// The entry with its fields decoded; `None` if they do not decode.
    pub fn decode(self) -> Option<ManagedEntry> {
        Some(ManagedEntry {
            fields: FieldSet::from_fields_v1(&self.fields_v1).ok()?,
            manager: self.manager,
            time: self.time,
        })
    }
}

/// The entries of `object`'s `metadata.managedFields`, fields still encoded. Entries
/// that are not `FieldsV1` objects are dropped.
pub fn encoded_managed_fields(object: &Value) -> Vec<EncodedEntry> {
    let Some(entries) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let fields_v1 = entry.get("fieldsV1").filter(|f| f.is_object())?.clone();
            EncodedEntry::of(entry, fields_v1)
        })
        .collect()
}

/// [`encoded_managed_fields`], moved out of `object` (which is left without
/// `metadata.managedFields`) rather than copied.
pub fn take_encoded_managed_fields(object: &mut Value) -> Vec<EncodedEntry> {
    let Some(Value::Array(entries)) = object
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .and_then(|metadata| metadata.remove("managedFields"))
    else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter_map(|mut entry| {
            let fields_v1 = entry
                .as_object_mut()?
                .remove("fieldsV1")
                .filter(Value::is_object)?;
            EncodedEntry::of(&entry, fields_v1)
        })
        .collect()
}

impl EncodedEntry {
    /// The entry `entry` of `managedFields` with its `fields_v1`; `None` unless it is
    /// `FieldsV1` with a manager.
    fn of(entry: &Value, fields_v1: Value) -> Option<EncodedEntry> {
        let text = |key: &str| {
            entry
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        (text("fieldsType") == "FieldsV1" && !text("manager").is_empty()).then(|| EncodedEntry {
            manager: Manager {
                name: text("manager"),
                operation: text("operation"),
                api_version: text("apiVersion"),
                subresource: text("subresource"),
            },
            time: entry.get("time").and_then(Value::as_str).map(str::to_owned),
            fields_v1,
        })
    }
}

/// Writes `entries` into `object`'s `metadata.managedFields` in kube's order
/// (operation, time, manager, apiVersion, subresource); removes it when empty.
pub fn encode_managed_fields(object: &mut Value, entries: Vec<ManagedEntry>) {
    let entries = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| EncodedEntry {
            fields_v1: e.fields.to_fields_v1(),
            manager: e.manager,
            time: e.time,
        })
        .collect();
    write_managed_fields(object, entries);
}

/// Writes encoded `entries` (see [`encode_managed_fields`]); entries that own nothing
/// are left out.
pub fn write_managed_fields(object: &mut Value, mut entries: Vec<EncodedEntry>) {
    entries.retain(|e| e.fields_v1.as_object().is_some_and(|m| !m.is_empty()));
    entries.sort_by(|a, b| {
        (
            &a.manager.operation,
            &a.time,
            &a.manager.name,
            &a.manager.api_version,
            &a.manager.subresource,
        )
            .cmp(&(
                &b.manager.operation,
                &b.time,
                &b.manager.name,
                &b.manager.api_version,
                &b.manager.subresource,
            ))
    });
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        metadata.remove("managedFields");
        return;
    }
    let encoded = entries
        .into_iter()
        .map(|e| {
            let mut entry = json!({
                "manager": e.manager.name,
                "operation": e.manager.operation,
                "apiVersion": e.manager.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.fields_v1,
            });
            if let Some(time) = &e.time {
                entry["time"] = json!(time);
            }
            if !e.manager.subresource.is_empty() {
                entry["subresource"] = json!(e.manager.subresource);
            }
            entry
        })
        .collect();
    metadata.insert("managedFields".into(), Value::Array(encoded));
}

/// Fields the server sets and no manager owns (kube's `stripMeta` set).
pub fn strip_server_fields(set: &FieldSet) -> FieldSet {
    let mut set = set.clone();
    strip_server_fields_mut(&mut set);
    set
}

/// [`strip_server_fields`] in place.
pub fn strip_server_fields_mut(set: &mut FieldSet) {
    let managed = FieldPath::fields(&["metadata", "managedFields"]);
    set.0.retain(|p| !managed.is_prefix_of(p));
    for path in [
        &["apiVersion"][..],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "resourceVersion"],
    ] {
        set.0.remove(&FieldPath::fields(path));
    }
}
