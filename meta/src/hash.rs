//! Content hashes of JSON documents, used to bind approvals and verdicts to
//! what a Plan will apply.

use serde_json::Value;
use sha2::{Digest, Sha256};

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
    let mut canonical = Vec::with_capacity(256);
    write_canonical(value, &mut canonical);
    let digest = Sha256::digest(&canonical);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

/// Whether `text` has the form produced by [`content_hash`].
pub fn is_content_hash(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The canonical JSON of `value` appended to `out`: strings and numbers as serde_json
/// writes them compactly, object members in key order. serde_json's map iterates in key
/// order already (unless its `preserve_order` feature is on somewhere in the build), so
/// members are sorted only when they are not.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            if map.keys().is_sorted() {
                write_members(map.iter(), out);
            } else {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                write_members(entries.into_iter(), out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        // A string, number, boolean or null as `Value`'s `Display` writes it; writing
        // into a Vec cannot fail.
        scalar => {
            let _ = serde_json::to_writer(out, scalar);
        }
    }
}

fn write_members<'a>(members: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) {
    for (i, (key, item)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, key.as_str());
        out.push(b':');
        write_canonical(item, out);
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

    /// The canonical form as first written (keys sorted by hand, each key and scalar
    /// through `Value`'s `Display`): hashes already stored in approvals and verdicts were
    /// made with it, so the faster writer must give the same bytes.
    fn canonical_as_first_written(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let members: Vec<String> = entries
                    .into_iter()
                    .map(|(key, item)| {
                        format!(
                            "{}:{}",
                            Value::String(key.clone()),
                            canonical_as_first_written(item)
                        )
                    })
                    .collect();
                format!("{{{}}}", members.join(","))
            }
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(canonical_as_first_written).collect();
                format!("[{}]", items.join(","))
            }
            scalar => scalar.to_string(),
        }
    }

    #[test]
    fn the_canonical_form_is_the_one_hashes_were_first_made_with() {
        let documents = [
            json!({}),
            json!([]),
            json!(null),
            json!("plain"),
            json!({"z": 1, "a": {"y": [1, {"q": 2, "p": 3}], "b": null}, "m": [[], {}]}),
            json!({"esc\"aped\nkey\u{1}": "tab\there \u{7f} é 日本 \u{1F600} /slash\\",
                   "numbers": [0, -1, 1.5, -0.25, 1e300, 18446744073709551615u64,
                               -9223372036854775808i64, 2.5e-8],
                   "bools": [true, false], "": "empty key", "B": 1, "a": 2, "_": 3}),
        ];
        for document in documents {
            let mut fast = Vec::new();
            write_canonical(&document, &mut fast);
            let first = canonical_as_first_written(&document);
            assert_eq!(String::from_utf8(fast).unwrap(), first);
            assert_eq!(
                content_hash(&document),
                format!("sha256:{:x}", Sha256::digest(first.as_bytes()))
            );
        }
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
