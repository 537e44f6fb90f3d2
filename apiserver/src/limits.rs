//! The sizes the server accepts, as kube-apiserver's: a request body, an object as
//! stored (after any patch or apply), the growth a JSON patch may cause by copying, and
//! how deeply an object's values may nest. An object is checked before it is written,
//! so that nothing is stored that the server could not read back.

use serde_json::Value;

use crate::status::{ApiError, Subject};

/// 3 MiB: kube-apiserver's `MaxRequestBodyBytes`.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;
/// 1.5 MiB: etcd's default request limit, and so the largest object kube stores.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024 / 2;
/// Nesting depth (the object itself is 1) that the decoder reading stored objects
/// (`serde_json`, [`DECODER_MAX_DEPTH`]) still reads, with room for the watch event that wraps an
/// object on its way to a client.
pub const DEFAULT_MAX_OBJECT_DEPTH: usize = 100;
/// The deepest nesting `serde_json` decodes (its recursion limit of 128 counts the
/// level that fails): a limit above it would store objects that cannot be read back.
pub const DECODER_MAX_DEPTH: usize = 127;

/// The limits of one server ([`crate::server::ServerConfig::limits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body (413 `RequestEntityTooLarge` above). Also bounds what
    /// the `copy` operations of one JSON patch may add, as kube's
    /// `JSONPatchMaxCopyBytes` does.
    pub max_request_body_bytes: usize,
    /// The largest object stored (413 naming the object above).
    pub max_object_bytes: usize,
    /// The deepest nesting of an object's values (422 above); at most
    /// [`DECODER_MAX_DEPTH`].
    pub max_object_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            max_object_depth: DEFAULT_MAX_OBJECT_DEPTH,
        }
    }
}

impl Limits {
    /// The object as it will be stored, if it is within the limits: 422 `Invalid`
    /// when it nests deeper than `max_object_depth`, 413 when larger than
    /// `max_object_bytes`.
    pub fn check_object(
        &self,
        subject: &Subject,
        stored: &[u8],
        object: &Value,
    ) -> Result<(), ApiError> {
        if let Some(path) = deeper_than(object, self.max_object_depth) {
            return Err(ApiError::Invalid {
                subject: subject.clone(),
                causes: vec![too_deep(&path, self.max_object_depth)],
            });
        }
        if stored.len() > self.max_object_bytes {
            return Err(ApiError::ObjectTooLarge {
                subject: subject.clone(),
                size: stored.len(),
                limit: self.max_object_bytes,
            });
        }
        Ok(())
    }
}

/// The cause of a 422 for a value nested deeper than `limit`, at `field`.
pub fn too_deep(field: &str, limit: usize) -> crate::status::FieldError {
    crate::status::FieldError {
        field: field.to_owned(),
        kind: crate::status::FieldErrorKind::TooLong,
        message: format!("Too long: values may nest at most {limit} levels deep"),
    }
}

/// The nesting depth of `value` (a scalar is 0, `{}` and `[]` are 1), counted without
/// recursion; counting stops past `limit`.
pub fn depth(value: &Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        let level = above + 1;
        deepest = deepest.max(level);
        if deepest > limit {
            return deepest;
        }
        stack.extend(children.map(|child| (child, level)));
    }
    deepest
}

/// The dotted path of the first value of `object` nested deeper than `limit`, if any.
fn deeper_than(object: &Value, limit: usize) -> Option<String> {
    if depth(object, limit) <= limit {
        return None;
    }
    // Walk down a branch deeper than the limit to name it: at step `k` the value is
    // more than `limit - k` deep, so one of its children is at least that deep.
    let mut path = Vec::new();
    let mut value = object;
    for step in 0..limit {
        let needed = limit - step;
        let deep_enough = |v: &&Value| depth(v, needed) >= needed;
        let next = match value {
            Value::Object(map) => map
                .iter()
                .find(|(_, v)| deep_enough(v))
                .map(|(key, v)| (key.clone(), v)),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find(|(_, v)| deep_enough(v))
                .map(|(i, v)| (format!("[{i}]"), v)),
            _ => None,
        };
        let Some((step, child)) = next else { break };
        path.push(step);
        value = child;
    }
    let mut dotted = String::new();
    for step in path {
        if !dotted.is_empty() && !step.starts_with('[') {
            dotted.push('.');
        }
        dotted.push_str(&step);
    }
    Some(dotted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..levels {
            value = json!({ "a": value });
        }
        value
    }

    #[test]
    fn depth_counts_levels_without_recursion() {
        assert_eq!(depth(&json!(1), 10), 0);
        assert_eq!(depth(&json!({}), 10), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}]}), 10), 4);
        assert_eq!(depth(&nested(50), 100), 50);
        // Stops early past the limit.
        assert_eq!(depth(&nested(50), 10), 11);
    }

    #[test]
    fn the_decoder_reads_every_depth_up_to_its_limit_and_no_deeper() {
        let text = |levels: usize| serde_json::to_string(&nested(levels)).unwrap();
        assert!(serde_json::from_str::<Value>(&text(DECODER_MAX_DEPTH)).is_ok());
        assert!(serde_json::from_str::<Value>(&text(DECODER_MAX_DEPTH + 1)).is_err());
        // A watch event wraps the object in one more level: still readable by default.
        let event = format!(
            "{{\"type\":\"ADDED\",\"object\":{}}}",
            text(DEFAULT_MAX_OBJECT_DEPTH)
        );
        assert!(serde_json::from_str::<Value>(&event).is_ok());
    }

    #[test]
    fn objects_over_a_limit_are_refused_naming_the_object() {
        let limits = Limits {
            max_object_bytes: 64,
            max_object_depth: 3,
            ..Limits::default()
        };
        let subject = Subject {
            group: "example.com".into(),
            resource: "widgets".into(),
            kind: "Widget".into(),
            name: "p".into(),
        };
        let small = json!({"spec": {"a": 1}});
        assert!(limits.check_object(&subject, b"{}", &small).is_ok());
        let big = vec![b' '; 65];
        let err = limits.check_object(&subject, &big, &small).unwrap_err();
        assert_eq!(err.code(), 413);
        assert_eq!(
            err.to_string(),
            "widgets.example.com \"p\" is too large: 65 bytes, the limit is 64 bytes"
        );
        let deep = json!({"spec": {"a": {"b": {"c": 1}}}});
        let err = limits.check_object(&subject, b"{}", &deep).unwrap_err();
        assert_eq!(err.code(), 422);
        let status = err.status();
        assert_eq!(status["details"]["causes"][0]["field"], "spec.a.b");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueTooLong"
        );
    }
}
