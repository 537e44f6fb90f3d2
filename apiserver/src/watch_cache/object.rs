//! One object as the cache keeps it: its JSON (with `resourceVersion`), encoded once,
//! and what selectors and the index read of it, taken out once. Lists and watch events
//! are written from the JSON as it is; nothing is decoded to serve them. A large object
//! is held LZ4-compressed, and so is every object its type compresses against the type's
//! dictionary ([`crate::registry::Compressed`]: Installs, their rendered stacks, finished
//! Plans); each is decompressed when served.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::object_meta::{from_store, set_resource_version};
use crate::registry::{Compressed, IndexBy, ResourceType};
use crate::selectors::{Labels, Selectable, labels_of};
use crate::status::ApiError;
use crate::storage::{KeyValue, Revision};

/// An object of the cache.
#[derive(Debug)]
pub struct CachedObject {
    /// Its store key.
    pub key: String,
    /// Its `resourceVersion` (the store revision of its last change, or of its delete).
    pub revision: Revision,
    /// Its labels, and the text of every field a selector, the index or an
    /// authorization scope may read.
    texts: Texts,
    json: Json,
}

/// An object's labels (key, value) and kept fields (path, text), each sorted, in one
/// string: a map and a vector of owned strings held a dozen allocations per object,
/// ≈ 1 KiB beside a finished Plan's ≈ 0.5 KiB of compressed JSON.
#[derive(Debug, PartialEq, Eq)]
struct Texts {
    text: Box<str>,
    /// Where each text ends in `text`: name, value, name, value, …, labels first.
    ends: Box<[u32]>,
    /// How many pairs are labels.
    labels: usize,
}

impl Texts {
    /// `labels` sorted by key, `fields` by path, neither with a name twice.
    fn new<'a>(
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Texts {
        let mut text = String::new();
        let mut ends = Vec::new();
        let mut pairs = 0;
        let mut push = |(name, value): (&str, &str)| {
            for part in [name, value] {
                text.push_str(part);
                ends.push(u32::try_from(text.len()).expect("an object's texts are under 4 GiB"));
            }
        };
        for label in labels {
            push(label);
            pairs += 1;
        }
        fields.into_iter().for_each(push);
        Texts {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            labels: pairs,
        }
    }

    fn part(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        &self.text[start..self.ends[i] as usize]
    }

    fn pair(&self, i: usize) -> (&str, &str) {
        (self.part(2 * i), self.part(2 * i + 1))
    }

    /// The value of the pair named `name` among pairs `from..to`.
    fn find(&self, from: usize, to: usize, name: &str) -> Option<&str> {
        let (mut low, mut high) = (from, to);
        while low < high {
            let mid = (low + high) / 2;
            let (key, value) = self.pair(mid);
            match key.cmp(name) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(value),
            }
        }
        None
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.find(0, self.labels, key)
    }

    fn field(&self, path: &str) -> Option<&str> {
        self.find(self.labels, self.ends.len() / 2, path)
    }
}

/// JSON at least this long is held compressed if that saves a quarter of it, whatever
/// its type. Below it an object its type does not compress is served as it is held,
/// without a copy (a Plan on its way: the object of every dispatch).
const COMPRESS_FROM: usize = 8 * 1024;

/// An object's JSON as the cache holds it.
#[derive(Debug)]
enum Json {
    Plain(Bytes),
    /// An LZ4 block of JSON `len` bytes long, compressed against `dictionary` when it has
    /// one (an object its type compresses: [`CachedObject::compress_with`]).
    Lz4 {
        block: Box<[u8]>,
        len: usize,
        dictionary: Option<Arc<[u8]>>,
    },
}

impl Json {
    fn new(json: Vec<u8>) -> Json {
        if json.len() >= COMPRESS_FROM {
            let block = lz4_flex::block::compress(&json);
            if block.len() <= json.len() / 4 * 3 {
                return Json::Lz4 {
                    block: block.into_boxed_slice(),
                    len: json.len(),
                    dictionary: None,
                };
            }
        }
        Json::Plain(Bytes::from(json))
    }

    fn bytes(&self) -> Bytes {
        match self {
            Json::Plain(bytes) => bytes.clone(),
            Json::Lz4 {
                block,
                len,
                dictionary,
            } => Bytes::from(
                match dictionary {
                    None => lz4_flex::block::decompress(block, *len),
                    Some(dictionary) => {
                        lz4_flex::block::decompress_with_dict(block, *len, dictionary)
                    }
                }
                .expect("the cache decompresses what it compressed"),
            ),
        }
    }

    fn len(&self) -> usize {
        match self {
            Json::Plain(bytes) => bytes.len(),
            Json::Lz4 { len, .. } => *len,
        }
    }

    /// Bytes held; a dictionary is shared by every compressed object of its type, and
    /// counted once, by the cache ([`super::WatchCache::stats`]).
    fn held(&self) -> usize {
        match self {
            Json::Plain(bytes) => bytes.len(),
            Json::Lz4 { block, .. } => block.len(),
        }
    }
}

impl CachedObject {
    /// The stored object of type `rt`, with `resourceVersion` set from the store.
    pub fn from_store(rt: &ResourceType, kv: &KeyValue) -> Result<CachedObject, ApiError> {
        if let Some(object) = CachedObject::from_stored_json(rt, kv) {
            return Ok(object);
        }
        let object = from_store(kv)?;
        Ok(CachedObject::new(
            rt,
            kv.key.clone(),
            kv.mod_revision,
            &object,
        ))
    }

    /// [`CachedObject::from_store`] without decoding the object: the store keeps what
    /// [`to_store`](crate::object_meta::to_store) wrote, compact JSON with sorted keys,
    /// and the cache's JSON is those bytes with `"resourceVersion"` spliced into
    /// `metadata` where sorting puts it, byte for byte what encoding the decoded
    /// object would give. Only the members selectors read are decoded. `None` (decode
    /// it) for anything else: keys with escapes, `metadata` not an object or with a
    /// `resourceVersion`, members out of order.
    fn from_stored_json(rt: &ResourceType, kv: &KeyValue) -> Option<CachedObject> {
        type Members<'a> = BTreeMap<&'a str, &'a RawValue>;
        /// The members of `raw` if it is an object; `Err` if it is one that does not
        /// decode with borrowed keys.
        fn members(raw: &RawValue) -> Result<Option<Members<'_>>, ()> {
            if raw.get().starts_with('{') {
                serde_json::from_str(raw.get()).map(Some).map_err(|_| ())
            } else {
                Ok(None)
            }
        }
        let bytes = &kv.value[..];
        let offset = |raw: &RawValue| {
            let at = (raw.get().as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
            (at < bytes.len()).then_some(at)
        };
        let top: Members = serde_json::from_slice(bytes).ok()?;
        let metadata_raw = *top.get("metadata")?;
        let metadata = members(metadata_raw).ok()??;
        if metadata.contains_key("resourceVersion") {
            return None;
        }
        // The members must be in the text in key order, as `to_store` wrote them.
        let mut at = 0;
        for raw in metadata.values() {
            let next = offset(raw)?;
            if next < at {
                return None;
            }
            at = next;
        }
        let revision = kv.mod_revision.to_string();
        let (splice, member) = match metadata
            .range::<str, _>((Bound::Excluded("resourceVersion"), Bound::Unbounded))
            .next()
        {
            // Before the first member sorted after it: `"key":value`.
            Some((key, raw)) => {
                let at = offset(raw)?.checked_sub(key.len() + 3)?;
                let written = bytes.get(at..at + key.len() + 3)?;
                if written != format!("\"{key}\":").as_bytes() {
                    return None;
                }
                (at, format!("\"resourceVersion\":\"{revision}\","))
            }
            // Last: before `metadata`'s closing brace.
            None => {
                let end = offset(metadata_raw)? + metadata_raw.get().len() - 1;
                if bytes.get(end) != Some(&b'}') {
                    return None;
                }
                let comma = if metadata.is_empty() { "" } else { "," };
                (end, format!("{comma}\"resourceVersion\":\"{revision}\""))
            }
        };
        let mut json = Vec::with_capacity(bytes.len() + member.len());
        json.extend_from_slice(&bytes[..splice]);
        json.extend_from_slice(member.as_bytes());
        json.extend_from_slice(&bytes[splice..]);

        let labels: BTreeMap<&str, String> = match metadata.get("labels") {
            Some(raw) => match members(raw).ok()? {
                Some(labels) => labels
                    .into_iter()
                    .filter(|(_, value)| value.get().starts_with('"'))
                    .map(|(key, value)| Some((key, serde_json::from_str(value.get()).ok()?)))
                    .collect::<Option<_>>()?,
                None => BTreeMap::new(),
            },
            None => BTreeMap::new(),
        };
        // A field's text as `Selectable for Value` reads it: `""` when missing or
        // null, a string's value, any other value's compact JSON.
        let text = |path: &str| -> Option<String> {
            let mut segments = path.split('.');
            let first = segments.next()?;
            // `metadata` is decoded already.
            let found = match first {
                "metadata" => segments
                    .next()
                    .map_or(Some(metadata_raw), |second| metadata.get(second).copied()),
                _ => top.get(first).copied(),
            };
            let Some(mut value) = found else {
                return Some(String::new());
            };
            for segment in segments {
                match members(value)
                    .ok()?
                    .and_then(|map| map.get(segment).copied())
                {
                    Some(raw) => value = raw,
                    None => return Some(String::new()),
                }
            }
            let raw = value.get();
            if raw == "null" {
                Some(String::new())
            } else if raw.starts_with('"') {
                serde_json::from_str(raw).ok()
            } else {
                Some(serde_json::from_str::<Value>(raw).ok()?.to_string())
            }
        };
        let fields: BTreeMap<&str, String> = field_paths(rt)
            .map(|path| Some((path, text(path)?)))
            .collect::<Option<_>>()?;
        Some(CachedObject {
            key: kv.key.clone(),
            revision: kv.mod_revision,
            texts: Texts::new(
                labels.iter().map(|(k, v)| (*k, v.as_str())),
                fields.iter().map(|(k, v)| (*k, v.as_str())),
            ),
            json: Json::new(json),
        })
    }

    /// `object` (already carrying its `resourceVersion`) at `revision`.
    pub fn new(rt: &ResourceType, key: String, revision: Revision, object: &Value) -> Self {
        let fields: BTreeMap<&str, Cow<'_, str>> = field_paths(rt)
            .map(|path| (path, object.field(path)))
            .collect();
        let labels = labels_of(object);
        CachedObject {
            key,
            revision,
            texts: Texts::new(
                labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                fields.iter().map(|(k, v)| (*k, v.as_ref())),
            ),
            json: Json::new(serde_json::to_vec(object).expect("a JSON value serialises")),
        }
    }

    /// The object as its last state, stamped with the revision of its delete (what a
    /// `DELETED` watch event carries).
    pub fn deleted_at(&self, rt: &ResourceType, revision: Revision) -> Result<Self, ApiError> {
        let mut last = self.value()?;
        set_resource_version(&mut last, revision);
        Ok(CachedObject::new(rt, self.key.clone(), revision, &last))
    }

    /// The object's JSON, `resourceVersion` included: the bytes the cache holds (not a
    /// copy), or for a large object the bytes decompressed.
    pub fn json(&self) -> Bytes {
        self.json.bytes()
    }

    /// How long [`CachedObject::json`] is.
    pub fn json_len(&self) -> usize {
        self.json.len()
    }

    /// Whether `rt` holds it compressed against the type's dictionary
    /// ([`crate::registry::Compressed`]): every object, or a settled one (it no longer
    /// moves; its rare later changes are held compressed again).
    pub fn compressed(&self, rt: &ResourceType) -> bool {
        match &rt.compressed {
            None => false,
            Some(Compressed::All) => true,
            Some(Compressed::Settled { field, values }) => {
                values.iter().any(|v| *v == self.text(field))
            }
        }
    }

    /// Holds its JSON as an LZ4 block compressed against `dictionary` (JSON of objects
    /// like it), when that saves a quarter of it and beats compressing it alone. Objects
    /// of a fleet share most of their text with each other: a finished Plan (≈ 2.6 KiB)
    /// its keys, its managers' field sets and its labels' names; an install's rendered
    /// stack (≈ 20 KiB) its whole template but for the install's own values. An object
    /// compressed alone (one of 8 KiB or more) is compressed again, against the
    /// dictionary; one already compressed against it stays as it is.
    pub fn compress_with(&mut self, dictionary: &Arc<[u8]>) {
        let json = match &self.json {
            Json::Plain(json) => json.clone(),
            Json::Lz4 {
                dictionary: None, ..
            } => self.json.bytes(),
            Json::Lz4 {
                dictionary: Some(_),
                ..
            } => return,
        };
        let block = lz4_flex::block::compress_with_dict(&json, dictionary);
        if block.len() <= json.len() / 4 * 3 && block.len() < self.json.held() {
            self.json = Json::Lz4 {
                block: block.into_boxed_slice(),
                len: json.len(),
                dictionary: Some(dictionary.clone()),
            };
        }
    }

    /// The object, decoded (for the few readers that need all of it: tables, updates).
    pub fn value(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.json())
            .map_err(|e| ApiError::Internal(format!("cached object {} is not JSON: {e}", self.key)))
    }

    /// Its namespace (`""` when cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.text("metadata.namespace")
    }

    /// The values `index` files it under: its label's and its field's (one value when
    /// they agree, none when it has neither).
    pub fn index_keys<'a>(
        &'a self,
        index: Option<&IndexBy>,
    ) -> impl Iterator<Item = &'a str> + use<'a> {
        let label = index.and_then(|i| self.texts.label(&i.label));
        let field = index
            .map(|i| self.text(&i.field))
            .filter(|f| !f.is_empty() && Some(*f) != label);
        label.into_iter().chain(field)
    }

    fn text(&self, path: &str) -> &str {
        self.texts.field(path).unwrap_or("")
    }

    /// Bytes held (for the memory figures of the cache).
    pub fn size(&self) -> usize {
        self.json.held() + self.key.len() + self.texts.text.len() + 4 * self.texts.ends.len()
    }
}

/// The fields of an object of type `rt` the cache keeps the text of.
fn field_paths(rt: &ResourceType) -> impl Iterator<Item = &str> {
    ["metadata.name", "metadata.namespace"]
        .into_iter()
        .chain(rt.index.iter().map(|i| i.field.as_str()))
        .chain(rt.selectable_fields.iter().map(String::as_str))
        .chain(rt.compressed.iter().filter_map(Compressed::field))
}

impl Labels for CachedObject {
    fn label(&self, key: &str) -> Option<&str> {
        self.texts.label(key)
    }
}

impl Selectable for CachedObject {
    /// Fields the cache did not keep read as missing: the server refuses selectors on
    /// any other field before they get here.
    fn field(&self, path: &str) -> Cow<'_, str> {
        Cow::Borrowed(self.text(path))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object_meta::to_store;

    fn widgets() -> ResourceType {
        let mut rt = ResourceType::schemaless("example.com", "v1", "Widget", "widgets", true);
        rt.index = Some(IndexBy {
            label: "example.com/owner".into(),
            field: "spec.owner".into(),
        });
        rt
    }

    #[test]
    fn keeps_the_json_with_its_revision_and_what_selectors_read() {
        let rt = widgets();
        let kv = KeyValue {
            key: "/registry/example.com/widgets/shop/w1".into(),
            value: serde_json::to_vec(&json!({
                "metadata": {"name": "w1", "namespace": "shop",
                             "labels": {"example.com/owner": "acme", "tier": "1"}},
                "spec": {"owner": "acme", "size": "large"},
            }))
            .unwrap()
            .into(),
            create_revision: 3,
            mod_revision: 7,
            version: 2,
        };
        let object = CachedObject::from_store(&rt, &kv).unwrap();
        assert_eq!(object.revision, 7);
        let value = object.value().unwrap();
        assert_eq!(value["metadata"]["resourceVersion"], "7");
        assert_eq!(object.field("metadata.name"), "w1");
        assert_eq!(object.namespace(), "shop");
        assert_eq!(object.field("spec.owner"), "acme");
        assert_eq!(
            object.field("spec.size"),
            "",
            "not kept: neither selectable nor indexed"
        );
        assert_eq!(object.label("tier"), Some("1"));
        assert_eq!(
            object.index_keys(rt.index.as_ref()).collect::<Vec<_>>(),
            ["acme"]
        );
        assert_eq!(object.index_keys(None).count(), 0);
        let deleted = object.deleted_at(&rt, 9).unwrap();
        assert_eq!(deleted.value().unwrap()["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn texts_find_each_label_and_field_and_nothing_else() {
        let labels = [
            ("a", "1"),
            ("a.b", "2"),
            ("b", ""),
            ("example.com/owner", "acme"),
        ];
        let fields = [("a", "field a"), ("metadata.name", "w"), ("spec.x", "")];
        let texts = Texts::new(labels, fields);
        for (key, value) in labels {
            assert_eq!(texts.label(key), Some(value), "label {key}");
        }
        for (path, value) in fields {
            assert_eq!(texts.field(path), Some(value), "field {path}");
        }
        for missing in ["", "0", "a.", "c", "example.com", "metadata.name"] {
            assert_eq!(texts.label(missing), None, "label {missing:?}");
        }
        for missing in ["", "a.b", "b", "metadata", "spec.y"] {
            assert_eq!(texts.field(missing), None, "field {missing:?}");
        }
        let empty = Texts::new([], []);
        assert_eq!((empty.label("a"), empty.field("a")), (None, None));
        let only_fields = Texts::new([], [("metadata.name", "w")]);
        assert_eq!(only_fields.label("metadata.name"), None);
        assert_eq!(only_fields.field("metadata.name"), Some("w"));
    }

    #[test]
    fn an_object_naming_two_owners_is_filed_under_both() {
        let rt = widgets();
        let object = CachedObject::new(
            &rt,
            "k".into(),
            1,
            &json!({"metadata": {"name": "w", "labels": {"example.com/owner": "a"}},
                    "spec": {"owner": "b"}}),
        );
        assert_eq!(
            object.index_keys(rt.index.as_ref()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let none = CachedObject::new(&rt, "k".into(), 1, &json!({"metadata": {"name": "w"}}));
        assert_eq!(none.index_keys(rt.index.as_ref()).count(), 0);
    }

    /// The object decoded and encoded again: what the cache kept before it spliced.
    fn decoded(rt: &ResourceType, kv: &KeyValue) -> CachedObject {
        CachedObject::new(
            rt,
            kv.key.clone(),
            kv.mod_revision,
            &from_store(kv).unwrap(),
        )
    }

    fn stored(value: Vec<u8>) -> KeyValue {
        KeyValue {
            key: "/registry/example.com/widgets/shop/w1".into(),
            value: value.into(),
            create_revision: 3,
            mod_revision: 1234,
            version: 2,
        }
    }

    #[test]
    fn stored_json_is_served_with_its_revision_spliced_in_byte_for_byte() {
        let mut rt = widgets();
        rt.selectable_fields = vec!["status.phase".into(), "spec.size".into()];
        let objects = [
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {
                    "name": "w1", "namespace": "shop", "uid": "u-1", "generation": 2,
                    "creationTimestamp": "2026-11-27T10:00:00Z",
                    "labels": {"example.com/owner": "acme", "n": 1, "quote": "a\"b"},
                    "managedFields": [{"manager": "m", "operation": "Update",
                                       "fieldsType": "FieldsV1",
                                       "fieldsV1": {"f:spec": {"f:owner": {}}}}],
                },
                "spec": {"owner": "acme", "size": 3, "tags": ["é", "\n"]},
                "status": {"phase": {"nested": [1, 2.5, null]}},
            }),
            // Every member sorts before `resourceVersion`: it goes last.
            json!({"metadata": {"name": "w2", "namespace": "shop"}, "spec": {"owner": null}}),
            json!({"metadata": {}, "spec": {"owner": "x"}}),
            json!({"metadata": {"uid": "u"}, "status": "not an object"}),
        ];
        for object in objects {
            let kv = stored(to_store(&object).to_vec());
            let spliced = CachedObject::from_stored_json(&rt, &kv)
                .unwrap_or_else(|| panic!("not spliced: {object}"));
            let decoded = decoded(&rt, &kv);
            assert_eq!(spliced.json(), decoded.json(), "{object}");
            assert_eq!(spliced.texts, decoded.texts, "{object}");
            assert_eq!(spliced.key, decoded.key);
            assert_eq!(spliced.revision, 1234);
            assert_eq!(
                spliced.value().unwrap()["metadata"]["resourceVersion"],
                "1234"
            );
        }
    }

    /// A stack-sized object: `resources` entries of repetitive JSON (what a rendered
    /// template is), and with `random`, 12 KiB of random text besides (nothing LZ4 finds
    /// to repeat).
    fn large(resources: usize, random: bool) -> Value {
        let resources: serde_json::Map<String, Value> = (0..resources)
            .map(|i| {
                (
                    format!("Role{i}"),
                    json!({"Type": "AWS::IAM::Role", "Properties": {
                        "RoleName": format!("outpost-{i}"),
                        "ManagedPolicyArns": [format!("arn:aws:iam::aws:policy/ReadOnly-{}", i % 7)]}}),
                )
            })
            .collect();
        let blob: String = (0..if random { 12 * 1024 } else { 0 })
            .map(|_| {
                char::from(
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                        [rand::random::<u8>() as usize % 64],
                )
            })
            .collect();
        json!({"metadata": {"name": "w1", "namespace": "shop", "labels": {"example.com/owner": "acme"}},
               "spec": {"owner": "acme", "blob": blob, "template": {"Resources": resources}}})
    }

    #[test]
    fn large_objects_are_held_compressed_and_served_as_they_were_written() {
        let rt = widgets();
        for (resources, random, compressed) in [
            (10, false, false), // below the threshold: held as it is
            (200, false, true),
            (2, true, false), // not a quarter to gain
        ] {
            let object = large(resources, random);
            let kv = stored(to_store(&object).to_vec());
            let cached = CachedObject::from_store(&rt, &kv).unwrap();
            let decoded = decoded(&rt, &kv);
            let mut expected = object.clone();
            expected["metadata"]["resourceVersion"] = json!("1234");
            let what = format!("{resources} resources, random {random}");
            // Byte for byte what the decoded object encodes to, on both paths.
            assert_eq!(
                cached.json(),
                serde_json::to_vec(&expected).unwrap(),
                "{what}"
            );
            assert_eq!(cached.json(), decoded.json(), "{what}");
            assert_eq!(cached.json_len(), cached.json().len(), "{what}");
            assert_eq!(cached.value().unwrap(), expected, "{what}");
            assert_eq!(cached.texts, decoded.texts, "{what}");
            assert_eq!(cached.text("spec.owner"), "acme", "{what}");
            let held = cached.json.held();
            if compressed {
                assert!(cached.json_len() >= COMPRESS_FROM, "{what}");
                assert!(
                    held * 4 < cached.json_len(),
                    "{what}: {held} bytes held for {}",
                    cached.json_len()
                );
            } else {
                assert_eq!(held, cached.json_len(), "{what}");
                // Served without a copy.
                assert_eq!(cached.json().as_ptr(), cached.json().as_ptr(), "{what}");
            }
            assert!(
                cached.size() >= held && cached.size() < held + 200,
                "{what}"
            );
        }
    }

    #[test]
    fn stored_json_the_splice_cannot_read_is_decoded() {
        let rt = widgets();
        let cases = [
            // A key with an escape, in metadata.
            br#"{"metadata":{"labels":{"a\"b":"c"},"name":"w"}}"#.to_vec(),
            // Members out of order.
            br#"{"metadata":{"uid":"u","name":"w"}}"#.to_vec(),
            // A resourceVersion stored.
            br#"{"metadata":{"name":"w","resourceVersion":"5"}}"#.to_vec(),
            // Not compact.
            br#"{"metadata": {"name": "w", "uid" : "u"}}"#.to_vec(),
            // No metadata, or not an object.
            br#"{"spec":{}}"#.to_vec(),
            br#"{"metadata":[]}"#.to_vec(),
        ];
        for value in cases {
            let kv = stored(value);
            let text = String::from_utf8_lossy(&kv.value).into_owned();
            assert!(CachedObject::from_stored_json(&rt, &kv).is_none(), "{text}");
            let cached = CachedObject::from_store(&rt, &kv).unwrap();
            assert_eq!(cached.json(), decoded(&rt, &kv).json(), "{text}");
        }
    }
}
