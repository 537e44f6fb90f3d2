//! The metadata the server manages: `uid`, `creationTimestamp`, `generation`,
//! `resourceVersion` (always the store revision, never stored), `deletionTimestamp`,
//! and what create, update and the `/status` subresource may change.

use crate::status::FieldError;
use outpost_meta::validation::{is_dns1123_label, is_dns1123_subdomain};
use serde_json::{Map, Value, json};

use crate::registry::ResourceType;
use crate::status::{ApiError, Subject};
use crate::storage::KeyValue;

/// Now, as Kubernetes writes timestamps (RFC 3339, seconds).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The object's `metadata.name`, if any.
pub fn name_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(Value::as_str)
}

/// The stored object with `metadata.resourceVersion` set from the store revision.
pub fn from_store(kv: &KeyValue) -> Result<Value, ApiError> {
    let mut object: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::Internal(format!("stored object {} is not JSON: {e}", kv.key)))?;
    set_resource_version(&mut object, kv.mod_revision);
    Ok(object)
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(object: &mut Value, revision: i64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
    }
}

/// The object as stored: without `resourceVersion`, which the store revision carries.
pub fn to_store(object: &Value) -> bytes::Bytes {
    StoredJson::of(object).bytes
}

/// What [`to_store`] writes, and where in it `resourceVersion` goes: the object with
/// its revision set encodes as these bytes with that member spliced in, so a write
/// answers with the bytes it stored rather than encoding the object a second time.
#[derive(Clone, Debug)]
pub struct StoredJson {
    /// The bytes to store.
    pub bytes: bytes::Bytes,
    /// `None` when the object has no `metadata` object.
    slot: Option<RevisionSlot>,
}

/// Where `"resourceVersion":"N"` goes in stored bytes, and the commas around it.
#[derive(Clone, Copy, Debug)]
struct RevisionSlot {
    at: usize,
    comma_before: bool,
    comma_after: bool,
}

impl StoredJson {
    /// `object` encoded for the store.
    pub fn of(object: &Value) -> StoredJson {
        // Written member by member straight into the buffer, so the place of
        // `resourceVersion` is the buffer's length when the encoder gets there; not from
        // a copy without the two fields: a Plan's copy is thousands of allocations.
        let mut out = Vec::with_capacity(128);
        let Value::Object(top) = object else {
            write_json(&mut out, object);
            return StoredJson {
                bytes: out.into(),
                slot: None,
            };
        };
        let mut slot = None;
        out.push(b'{');
        for (i, (key, value)) in top.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json(&mut out, key);
            out.push(b':');
            match value {
                Value::Object(meta) if key == "metadata" => {
                    slot = Some(write_stored_metadata(&mut out, meta));
                }
                _ => write_json(&mut out, value),
            }
        }
        out.push(b'}');
        StoredJson {
            bytes: out.into(),
            slot,
        }
    }

    /// The JSON of the object at `revision` (its `resourceVersion` set), byte for byte
    /// what encoding it would give; `None` when it has no `metadata` object.
    pub fn at_revision(&self, revision: i64) -> Option<bytes::Bytes> {
        let RevisionSlot {
            at,
            comma_before,
            comma_after,
        } = self.slot?;
        let member = format!("\"resourceVersion\":\"{revision}\"");
        let mut json = Vec::with_capacity(self.bytes.len() + member.len() + 1);
        json.extend_from_slice(&self.bytes[..at]);
        if comma_before {
            json.push(b',');
        }
        json.extend_from_slice(member.as_bytes());
        if comma_after {
            json.push(b',');
        }
        json.extend_from_slice(&self.bytes[at..]);
        Some(json.into())
    }
}

/// `value`'s compact JSON appended to `out`, as `serde_json::to_vec` writes it.
fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("a JSON value serialises");
}

/// `metadata` as stored, without `resourceVersion` (the store revision carries it) and
/// `selfLink`; returns where `resourceVersion` would have been written: before the first
/// member sorted after it, or last, as the sorted map encodes.
fn write_stored_metadata(out: &mut Vec<u8>, meta: &Map<String, Value>) -> RevisionSlot {
    out.push(b'{');
    let mut written = false;
    let mut slot = None;
    for (key, value) in meta {
        if UNSTORED.contains(&key.as_str()) {
            continue;
        }
        if slot.is_none() && key.as_str() > "resourceVersion" {
            // `,"key":value` comes next (`"key":value` if first).
            slot = Some(RevisionSlot {
                at: out.len(),
                comma_before: written,
                comma_after: !written,
            });
        }
        if written {
            out.push(b',');
        }
        write_json(out, key);
        out.push(b':');
        write_json(out, value);
        written = true;
    }
    let slot = slot.unwrap_or(RevisionSlot {
        at: out.len(),
        comma_before: written,
        comma_after: false,
    });
    out.push(b'}');
    slot
}

/// The metadata fields the store does not keep: `resourceVersion` (the revision carries
/// it) and `selfLink` (long gone from Kubernetes).
const UNSTORED: [&str; 2] = ["resourceVersion", "selfLink"];

/// Removes what [`to_store`] leaves out, so `object` is what it stored.
pub fn strip_unstored(object: &mut Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in UNSTORED {
            meta.remove(field);
        }
    }
}

/// The `resourceVersion` a client sent, if any, as a revision.
pub fn sent_resource_version(object: &Value, subject: &Subject) -> Result<Option<i64>, ApiError> {
    match object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        None | Some("") => Ok(None),
        Some(rv) => crate::request::revision_of(rv)
            .map(Some)
            .ok_or_else(|| ApiError::Invalid {
                subject: subject.clone(),
                causes: vec![FieldError::invalid(
                    "metadata.resourceVersion",
                    rv,
                    "must be a resourceVersion this server returned",
                )],
            }),
    }
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// 400 unless the object's `metadata.name` is `name`, the name on the URL (an update,
/// a patch, an apply that creates), with kube-apiserver's message.
pub fn check_url_name(object: &Value, name: &str) -> Result<(), ApiError> {
    let sent = name_of(object).unwrap_or_default();
    if sent == name {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "the name of the object ({sent}) does not match the name on the URL ({name})"
    )))
}

/// 400 if the object names a namespace other than `namespace`, the one on the URL.
fn check_url_namespace(object: &Value, namespace: &str) -> Result<(), ApiError> {
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(sent) if !sent.is_empty() && sent != namespace => Err(ApiError::BadRequest(format!(
            "the namespace of the object ({sent}) does not match the namespace on the URL ({namespace})"
        ))),
        _ => Ok(()),
    }
}

/// Checks `apiVersion`/`kind` (filling them in when absent), the namespace and the
/// name of an object about to be created, and sets the server-managed fields.
/// Returns the object's name.
pub fn prepare_create(
    rt: &ResourceType,
    object: &mut Value,
    namespace: Option<&str>,
) -> Result<String, ApiError> {
    check_type(rt, object)?;
    let meta = meta_mut(object);
    if meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
        && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
    {
        let name = format!("{prefix}{}", random_suffix());
        meta.insert("name".into(), json!(name));
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let subject = Subject::of(rt, &name);
    if name.is_empty() {
        return Err(ApiError::Invalid {
            subject,
            causes: vec![FieldError::required(
                "metadata.name",
                "name or generateName is required",
            )],
        });
    }
    if !is_dns1123_subdomain(&name) {
        return Err(ApiError::Invalid {
            subject,
            causes: vec![FieldError::invalid(
                "metadata.name",
                &name,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )],
        });
    }
    set_namespace(rt, meta, namespace, &subject)?;
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(now()));
    meta.insert("generation".into(), json!(1));
    for server_only in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(server_only);
    }
    if rt.status_subresource
        && let Some(object) = object.as_object_mut()
    {
        object.remove("status");
    }
    Ok(name)
}

fn set_namespace(
    rt: &ResourceType,
    meta: &mut Map<String, Value>,
    namespace: Option<&str>,
    subject: &Subject,
) -> Result<(), ApiError> {
    if !rt.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let Some(namespace) = namespace else {
        return Err(ApiError::BadRequest(
            "the namespace of the object is required on this path".into(),
        ));
    };
    if !is_dns1123_label(namespace) {
        return Err(ApiError::Invalid {
            subject: subject.clone(),
            causes: vec![FieldError::invalid(
                "metadata.namespace",
                namespace,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            )],
        });
    }
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() && ns != namespace => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
        _ => {
            meta.insert("namespace".into(), json!(namespace));
            Ok(())
        }
    }
}

fn check_type(rt: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    let Some(fields) = object.as_object_mut() else {
        return Err(ApiError::BadRequest(
            "the object must be a JSON object".into(),
        ));
    };
    let api_version = rt.api_version();
    match fields.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != api_version => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        _ => {
            fields.insert("apiVersion".into(), json!(api_version));
        }
    }
    match fields.get("kind").and_then(Value::as_str) {
        Some(k) if k != rt.kind => Err(ApiError::BadRequest(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            rt.kind
        ))),
        _ => {
            fields.insert("kind".into(), json!(rt.kind));
            Ok(())
        }
    }
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteScope {
    /// The main resource: everything but `status` when the type has a status subresource.
    Main,
    /// The `/status` subresource: only `status`.
    Status,
}

/// Carries the server-managed and out-of-scope fields of `old` over into `new`, and
/// bumps `generation` when anything but `metadata` and `status` changed.
pub fn prepare_update(
    rt: &ResourceType,
    old: &Value,
    new: &mut Value,
    scope: WriteScope,
) -> Result<(), ApiError> {
    check_type(rt, new)?;
    let name = name_of(old).unwrap_or_default().to_owned();
    if name_of(new).is_some() {
        check_url_name(new, &name)?;
    }
    if let Some(namespace) = old.pointer("/metadata/namespace").and_then(Value::as_str) {
        check_url_namespace(new, namespace)?;
    }
    if scope == WriteScope::Status {
        // Only status changes; metadata and spec stay as they were. (The old status is
        // not copied only to be replaced: a status write's object is mostly spec.)
        let status = new.as_object_mut().and_then(|o| o.remove("status"));
        let mut merged: Map<String, Value> = old
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, _)| *key != "status")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        if let Some(status) = status {
            merged.insert("status".into(), status);
        }
        *new = Value::Object(merged);
        return Ok(());
    }
    if rt.status_subresource {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let meta = meta_mut(new);
    meta.insert("name".into(), json!(name));
    for kept in [
        "uid",
        "creationTimestamp",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(kept) {
            Some(v) => meta.insert(kept.into(), v.clone()),
            None => meta.remove(kept),
        };
    }
    if spec_changed(old, new) {
        let generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        meta_mut(new).insert("generation".into(), json!(generation + 1));
    }
    Ok(())
}

/// Whether anything but `metadata` and `status` differs.
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
        m
    };
    strip(old) != strip(new)
}

/// The object's finalizers.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object is being deleted (has a `deletionTimestamp`).
pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Marks the object as being deleted.
pub fn mark_deleting(object: &mut Value) {
    let meta = meta_mut(object);
    meta.entry("deletionTimestamp")
        .or_insert_with(|| json!(now()));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> ResourceType {
        let mut rt = ResourceType::schemaless("example.com", "v1", "Widget", "widgets", true);
        rt.status_subresource = true;
        rt
    }

    #[test]
    fn create_sets_server_fields_and_drops_status() {
        let mut obj = json!({"metadata": {"generateName": "a-", "resourceVersion": "9"}, "spec": {}, "status": {"x": 1}});
        let name = prepare_create(&rt(), &mut obj, Some("ns")).unwrap();
        assert!(name.starts_with("a-") && name.len() == 7);
        assert_eq!(obj["apiVersion"], "example.com/v1");
        assert_eq!(obj["metadata"]["namespace"], "ns");
        assert_eq!(obj["metadata"]["generation"], 1);
        assert!(obj["metadata"]["uid"].is_string());
        assert!(obj["metadata"].get("resourceVersion").is_none());
        assert!(obj.get("status").is_none());
    }

    #[test]
    fn create_rejects_bad_names_and_wrong_namespace_or_kind() {
        let mut bad = json!({"metadata": {"name": "Bad_Name"}});
        assert!(matches!(
            prepare_create(&rt(), &mut bad, Some("ns")),
            Err(ApiError::Invalid { .. })
        ));
        let mut other_ns = json!({"metadata": {"name": "a", "namespace": "x"}});
        assert!(matches!(
            prepare_create(&rt(), &mut other_ns, Some("ns")),
            Err(ApiError::BadRequest(_))
        ));
        let mut bad_namespace = json!({"metadata": {"name": "a"}});
        let err = prepare_create(&rt(), &mut bad_namespace, Some("Bad_NS")).unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(
            err.status()["details"]["causes"][0]["field"],
            "metadata.namespace"
        );
        let mut other_kind = json!({"kind": "Tenant", "metadata": {"name": "a"}});
        assert!(matches!(
            prepare_create(&rt(), &mut other_kind, Some("ns")),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn generation_bumps_on_spec_change_only_and_status_is_kept() {
        let mut old =
            json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"phase": "Active"}});
        prepare_create(&rt(), &mut old, Some("ns")).unwrap();
        old["status"] = json!({"phase": "Active"});
        let mut relabel = old.clone();
        relabel["metadata"]["labels"] = json!({"a": "b"});
        relabel["status"] = json!({"phase": "Hacked"});
        prepare_update(&rt(), &old, &mut relabel, WriteScope::Main).unwrap();
        assert_eq!(relabel["metadata"]["generation"], 1);
        assert_eq!(
            relabel["status"]["phase"], "Active",
            "status changes only through /status"
        );
        let mut respec = old.clone();
        respec["spec"]["x"] = json!(2);
        prepare_update(&rt(), &old, &mut respec, WriteScope::Main).unwrap();
        assert_eq!(respec["metadata"]["generation"], 2);
        let mut status = old.clone();
        status["spec"]["x"] = json!(3);
        status["status"] = json!({"phase": "Failed"});
        prepare_update(&rt(), &old, &mut status, WriteScope::Status).unwrap();
        assert_eq!(
            (
                status["spec"]["x"].clone(),
                status["status"]["phase"].clone()
            ),
            (json!(1), json!("Failed"))
        );
    }

    /// Fuzzing finding (`versions`): a signed `metadata.resourceVersion` (`-1`) read as
    /// a revision; it is now refused like any other that this server never returned.
    #[test]
    fn sent_resource_versions_are_unsigned_decimal_numbers() {
        let subject = Subject::of(&rt(), "web");
        let with = |rv: &str| json!({"metadata": {"name": "web", "resourceVersion": rv}});
        assert_eq!(
            sent_resource_version(&with("7"), &subject).unwrap(),
            Some(7)
        );
        assert_eq!(sent_resource_version(&with(""), &subject).unwrap(), None);
        for bad in ["-1", "+7", "7 "] {
            let err = sent_resource_version(&with(bad), &subject).unwrap_err();
            assert_eq!(err.code(), 422, "{bad:?}");
        }
    }

    /// Fuzzing finding (`patch_strategic`): a number with more digits than an f64 holds
    /// (`33…3`, 53 digits) was parsed approximately, so the stored object read back as
    /// another one and changed again on every read-modify-write. serde_json's
    /// `float_roundtrip` parses every number to the nearest f64, which prints back as
    /// the same number: stored once, an object reads back unchanged.
    #[test]
    fn numbers_beyond_an_f64s_digits_read_back_as_stored() {
        let body = br#"{"apiVersion": 33333333333333333333333333333333333333333333333333333,
            "metadata": {"name": "web"},
            "spec": {"tiny": 1.00000000000000000000000000000000000000001e-300,
                     "big": 9.87654321987654321987654321e300, "exact": 18446744073709551616}}"#;
        let object: Value = serde_json::from_slice(body).unwrap();
        let stored = to_store(&object);
        let kv = KeyValue {
            key: "/registry/example.com/widgets/acme/web".into(),
            value: stored.clone(),
            create_revision: 1,
            mod_revision: 2,
            version: 1,
        };
        let mut read = from_store(&kv).unwrap();
        read["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(read, object);
        assert_eq!(
            to_store(&read),
            stored,
            "a second write stores the same bytes"
        );
    }

    /// `to_store` leaves out `resourceVersion` and `selfLink`:
    /// the bytes a copy without them would give, and the written object (stripped, its
    /// revision set) is what reading the bytes back gives.
    #[test]
    fn the_stored_bytes_leave_out_the_revision_and_self_link_only() {
        let object = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "web", "namespace": "acme", "resourceVersion": "7",
                         "selfLink": "/x", "labels": {"a": "b"}, "uid": "u"},
            "spec": {"resourceVersion": "kept: not metadata", "list": [1, 2.5, null]},
        });
        let mut copy = object.clone();
        for field in ["resourceVersion", "selfLink"] {
            copy["metadata"].as_object_mut().unwrap().remove(field);
        }
        let stored = to_store(&object);
        assert_eq!(stored, serde_json::to_vec(&copy).unwrap());
        let kv = KeyValue {
            key: "/registry/example.com/widgets/acme/web".into(),
            value: stored,
            create_revision: 1,
            mod_revision: 9,
            version: 1,
        };
        let mut written = object.clone();
        strip_unstored(&mut written);
        set_resource_version(&mut written, kv.mod_revision);
        assert_eq!(written, from_store(&kv).unwrap());
        // Not an object, or metadata not a map: stored as it is.
        assert_eq!(to_store(&json!([1])), &b"[1]"[..]);
        assert_eq!(to_store(&json!({"metadata": 3})), &br#"{"metadata":3}"#[..]);
    }

    /// A write answers with the stored bytes and its revision spliced in: byte for byte
    /// what encoding the written object (stripped, its revision set) gives, wherever
    /// `resourceVersion` sorts among the members, and with any values.
    #[test]
    fn the_answer_at_a_revision_is_the_written_object_encoded() {
        let members = [
            ("annotations", json!({"a": "\"quoted\" \u{e9}"})),
            ("creationTimestamp", json!("2026-11-27T00:00:00Z")),
            ("labels", json!({"x": "y"})),
            (
                "managedFields",
                json!([{"manager": "m", "fieldsV1": {"f:spec": {}}}]),
            ),
            ("name", json!("web")),
            ("namespace", json!("acme")),
            ("resourceVersion", json!("3")),
            ("selfLink", json!("/x")),
            ("uid", json!("u")),
            ("zz", json!(null)),
        ];
        // Every subset of the members (2^10 metadata maps), and objects without one.
        for mask in 0..(1u32 << members.len()) {
            let meta: Map<String, Value> = members
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, (k, v))| ((*k).to_owned(), v.clone()))
                .collect();
            let object = json!({"apiVersion": "v1", "kind": "K", "metadata": meta,
                                "spec": {"resourceVersion": 1}, "status": {}});
            let stored = StoredJson::of(&object);
            assert_eq!(stored.bytes, to_store(&object));
            let mut written = object.clone();
            strip_unstored(&mut written);
            set_resource_version(&mut written, 1234);
            assert_eq!(
                stored.at_revision(1234).unwrap(),
                serde_json::to_vec(&written).unwrap(),
                "{object}"
            );
        }
        for object in [json!({"kind": "K"}), json!({"metadata": 3}), json!([1])] {
            assert!(StoredJson::of(&object).at_revision(1).is_none(), "{object}");
        }
    }
}
