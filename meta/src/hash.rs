//! Content hashes of JSON documents, used to bind approvals and verdicts to
//! what a Plan will apply.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// `sha256:<hex>` of the canonical JSON of `value`: object keys sorted
/// recursively, no insignificant whitespace. Two documents that differ only in
/// key order have the same hash.
///
/// ```
/// let a = serde_json::json!({"a": 1, "b": [true]});
/// let b = serde_json::json!({"b": [true], "a": 1});
/// assert_eq!(outpost_meta::content_hash(&a), outpost_meta::content_hash(&b));
/// ```
pub fn content_hash(value: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Whether `text` has the form produced by [`content_hash`].
pub fn is_content_hash(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a: Value =
            serde_json::from_str(r#"{"z":1,"a":{"y":[1,{"q":2,"p":3}],"b":null}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a":{"b":null,"y":[1,{"p":3,"q":2}]},"z":1}"#).unwrap();
        assert_eq!(content_hash(&a), content_hash(&b));
    }

    #[test]
    fn value_changes_change_the_hash() {
        let base = json!({"a": {"b": [1, 2]}});
        assert_ne!(
            content_hash(&base),
            content_hash(&json!({"a": {"b": [2, 1]}}))
        );
        assert_ne!(
            content_hash(&base),
            content_hash(&json!({"a": {"b": [1, 2], "c": 0}}))
        );
        assert_ne!(
            content_hash(&json!({"a": "1"})),
            content_hash(&json!({"a": 1}))
        );
    }

    #[test]
    fn hash_has_the_documented_form() {
        let hash = content_hash(&json!({}));
        assert!(is_content_hash(&hash), "{hash}");
        // sha256 of the two bytes "{}".
        assert_eq!(
            hash,
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert!(!is_content_hash("sha256:abc"));
        assert!(!is_content_hash(
            "md5:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        ));
    }
}
