//! One object as the cache keeps it: its JSON (with `resourceVersion`), encoded once,
//! and what selectors and the index read of it, taken out once. Lists and watch events
//! are written from the JSON as it is; nothing is decoded to serve them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;

use crate::object_meta::{from_store, set_resource_version};
use crate::registry::{IndexBy, ResourceType};
use crate::selectors::{Selectable, labels_of};
use crate::status::ApiError;
use crate::storage::{KeyValue, Revision};

/// An object of the cache.
#[derive(Debug)]
pub struct CachedObject {
    /// Its store key.
    pub key: String,
    /// Its `resourceVersion` (the store revision of its last change, or of its delete).
    pub revision: Revision,
    labels: BTreeMap<String, String>,
    /// `(path, text)` of every field a selector, the index or an authorization scope
    /// may read.
    fields: Vec<(String, String)>,
    json: Bytes,
}

impl CachedObject {
    /// The stored object of type `rt`, with `resourceVersion` set from the store.
    pub fn from_store(rt: &ResourceType, kv: &KeyValue) -> Result<CachedObject, ApiError> {
        let object = from_store(kv)?;
        Ok(CachedObject::new(
            rt,
            kv.key.clone(),
            kv.mod_revision,
            &object,
        ))
    }

    /// `object` (already carrying its `resourceVersion`) at `revision`.
    pub fn new(rt: &ResourceType, key: String, revision: Revision, object: &Value) -> Self {
        let mut fields: Vec<(String, String)> = ["metadata.name", "metadata.namespace"]
            .into_iter()
            .chain(rt.index.iter().map(|i| i.field.as_str()))
            .chain(rt.selectable_fields.iter().map(String::as_str))
            .map(|path| (path.to_owned(), object.field(path).into_owned()))
            .collect();
        fields.sort();
        fields.dedup_by(|a, b| a.0 == b.0);
        CachedObject {
            key,
            revision,
            labels: labels_of(object),
            fields,
            json: Bytes::from(serde_json::to_vec(object).expect("a JSON value serialises")),
        }
    }

    /// The object as its last state, stamped with the revision of its delete (what a
    /// `DELETED` watch event carries).
    pub fn deleted_at(&self, rt: &ResourceType, revision: Revision) -> Result<Self, ApiError> {
        let mut last = self.value()?;
        set_resource_version(&mut last, revision);
        Ok(CachedObject::new(rt, self.key.clone(), revision, &last))
    }

    /// The object's JSON, `resourceVersion` included.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The object, decoded (for the few readers that need all of it: tables, updates).
    pub fn value(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.json)
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
        let label = index
            .and_then(|i| self.labels.get(&i.label))
            .map(String::as_str);
        let field = index
            .map(|i| self.text(&i.field))
            .filter(|f| !f.is_empty() && Some(*f) != label);
        label.into_iter().chain(field)
    }

    fn text(&self, path: &str) -> &str {
        self.fields
            .binary_search_by(|(p, _)| p.as_str().cmp(path))
            .map_or("", |i| self.fields[i].1.as_str())
    }

    /// Bytes held (for the memory figures of the cache).
    pub fn size(&self) -> usize {
        self.json.len()
            + self.key.len()
            + self
                .labels
                .iter()
                .chain(self.fields.iter().map(|(k, v)| (k, v)))
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

impl Selectable for CachedObject {
    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Borrowed(&self.labels)
    }

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
        assert_eq!(object.labels()["tier"], "1");
        assert_eq!(
            object.index_keys(rt.index.as_ref()).collect::<Vec<_>>(),
            ["acme"]
        );
        assert_eq!(object.index_keys(None).count(), 0);
        let deleted = object.deleted_at(&rt, 9).unwrap();
        assert_eq!(deleted.value().unwrap()["metadata"]["resourceVersion"], "9");
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
}
