//! What the fuzz targets share: splitting an input into the live object and a request
//! body, and the checks the server makes before it stores an object.

use outpost_apiserver::limits::Limits;
use outpost_apiserver::object_meta::{from_store, to_store};
use outpost_apiserver::patch::record_update;
use outpost_apiserver::status::{ApiError, Subject};
use outpost_apiserver::storage::KeyValue;
use serde_json::{Value, json};

/// Separates the live object from the request body in a two-part input. `0xFF` never
/// occurs in UTF-8, so it cannot be part of JSON or YAML text.
pub const SEPARATOR: u8 = 0xFF;

/// A Plan as the server stores it: the live object when the input names none.
pub fn default_live() -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {
            "name": "web-1", "namespace": "acme", "uid": "0b7e5a8e-1c1b-4c4e-9a53-5f0f6d1c2a11",
            "resourceVersion": "42", "generation": 1,
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"outpost.dev/install": "web"},
            "finalizers": ["outpost.dev/runner"],
            "managedFields": [{
                "manager": "outpost", "operation": "Update", "apiVersion": "outpost.dev/v1alpha1",
                "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:install": {}, "f:actions": {}}}
            }]
        },
        "spec": {"install": "web", "actions": [{"name": "deploy", "steps": [{"name": "a"}]}]},
        "status": {"phase": "Pending"}
    })
}

/// The live object and the body of a two-part input: `LIVE 0xFF BODY`, where LIVE is a
/// JSON object (the default Plan when it is not one or there is no separator).
pub fn split(data: &[u8]) -> (Value, &[u8]) {
    match data.iter().position(|b| *b == SEPARATOR) {
        Some(at) => {
            let live = serde_json::from_slice::<Value>(&data[..at])
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(default_live);
            (live, &data[at + 1..])
        }
        None => (default_live(), data),
    }
}

/// What the server does with an object it is about to write: encode it as stored,
/// check it against the default limits and, when it passes, read it back as every later
/// GET, watch and DELETE will. Panics (a finding) if an object that passes the limits
/// cannot be read back, or reads back as another object.
pub fn store_and_read_back(object: &Value) {
    let stored = to_store(object);
    let subject = Subject {
        group: "outpost.dev".into(),
        resource: "plans".into(),
        kind: "Plan".into(),
        name: "web-1".into(),
    };
    if Limits::default()
        .check_object(&subject, &stored, object)
        .is_err()
    {
        return; // refused before the write: nothing stored
    }
    let kv = KeyValue {
        key: "/registry/outpost.dev/plans/acme/web-1".into(),
        value: stored,
        create_revision: 1,
        mod_revision: 43,
        version: 2,
    };
    let read = from_store(&kv).expect("an object within the limits reads back");
    // `from_store` sets the resourceVersion (the store revision) on any object metadata.
    let mut expected = object.clone();
    if let Some(meta) = expected.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("selfLink");
        meta.insert("resourceVersion".into(), json!("43"));
    }
    assert_eq!(read, expected, "the stored object reads back as another");
}

/// A patch as the server runs it: `patch` (the production patch function) applies the
/// body of the two-part input `data` ([`split`]) to its live object; a result is an
/// object, gets its `managedFields` entry and is stored and read back.
pub fn patch_then_store(data: &[u8], patch: impl Fn(&Value, &[u8]) -> Result<Value, ApiError>) {
    let (live, body) = split(data);
    if let Ok(mut patched) = patch(&live, body) {
        assert!(patched.is_object(), "a patch made a non-object: {patched}");
        record_update(
            Some(&live),
            &mut patched,
            "fuzz",
            "Update",
            "2026-01-02T03:04:05Z",
        );
        store_and_read_back(&patched);
    }
}
