//! Kubernetes label and field selectors (`?labelSelector=`, `?fieldSelector=`),
//! parsed and matched the way kube-apiserver does, with its error messages.
//!
//! * [`LabelSelector`]: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`,
//!   `!a`, `a>1`, `a<1`, comma-separated (all must hold);
//! * [`FieldSelector`]: `f=v`, `f==v`, `f!=v`, comma-separated, with `\,`, `\=`
//!   and `\\` escapes in values;
//! * [`labels_of`]: an object's labels, what a [`LabelSelector`] matches against.

mod field;
mod label;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

pub use field::{FieldSelector, FieldTerm, selectable_fields};
pub use label::{LabelSelector, Operator, Requirement};

/// Labels by key: what a [`LabelSelector`] reads. Implemented by a map of labels, by a
/// JSON object (its `metadata.labels`) and by the watch cache's objects.
pub trait Labels {
    /// The value of label `key`, if it is set to a string.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// An object's `metadata.labels`.
impl Labels for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self.get("metadata")?.get("labels")?.get(key)?.as_str()
    }
}

/// What selectors (and authorization scopes) read of an object: its labels and the text
/// of its fields. Implemented by JSON objects and by the watch cache's objects, which
/// keep these apart so that a selector never has to decode an object.
pub trait Selectable: Labels {
    /// The text of a dotted field (`spec.owner`); `""` when missing or null, numbers
    /// and booleans in their JSON text.
    fn field(&self, path: &str) -> Cow<'_, str>;
}

impl Selectable for Value {
    fn field(&self, path: &str) -> Cow<'_, str> {
        field::field_text(self, path)
    }
}

/// The labels of an object (`metadata.labels`); values that are not strings are
/// ignored, a missing or malformed map is empty.
///
/// ```no_run
/// let pod = serde_json::json!({"metadata": {"labels": {"app": "web"}}});
/// assert_eq!(outpost_apiserver::selectors::labels_of(&pod)["app"], "web");
/// ```
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Labels, labels_of};

    #[test]
    fn labels_of_reads_string_labels_only() {
        let object = json!({"metadata": {"labels": {"app": "web", "n": 1, "tier": "db"}}});
        assert_eq!(
            ["app", "n", "tier", "none"].map(|key| object.label(key)),
            [Some("web"), None, Some("db"), None]
        );
        let labels = labels_of(&object);
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["tier"], "db");
        assert!(labels_of(&json!({"metadata": {"labels": "x"}})).is_empty());
        assert!(labels_of(&json!({})).is_empty());
    }
}
