//! Field selectors: the grammar and messages of apimachinery's `fields.ParseSelector`.

use std::borrow::Cow;

use serde_json::Value;

use super::Selectable;
use crate::registry::ResourceType;

/// One comma-separated term of a [`FieldSelector`]: `field=value`,
/// `field==value` or `field!=value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    /// Dotted path of the field, e.g. `metadata.name` or `spec.owner`.
    pub field: String,
    /// The value, unescaped.
    pub value: String,
    /// `!=`: the field must differ from the value.
    pub negated: bool,
}

impl FieldTerm {
    /// Whether `object` satisfies this term. A missing field reads as `""`, as in
    /// Kubernetes; numbers and booleans compare in their JSON text.
    pub fn matches(&self, object: &(impl Selectable + ?Sized)) -> bool {
        (object.field(&self.field) == self.value.as_str()) != self.negated
    }
}

/// A parsed `fieldSelector`: every term must hold. The empty selector matches
/// everything.
///
/// ```no_run
/// use outpost_apiserver::selectors::FieldSelector;
/// let selector = FieldSelector::parse("metadata.name=web,spec.tenant!=old").unwrap();
/// let object = serde_json::json!({"metadata": {"name": "web"}, "spec": {"tenant": "new"}});
/// assert!(selector.matches(&object));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses `f=v`, `f==v`, `f!=v`, comma-separated; `\,`, `\=` and `\\` escape
    /// in values. Errors read like kube-apiserver's, e.g.
    /// `invalid selector: 'a'; can't understand 'a'`.
    pub fn parse(selector: &str) -> Result<FieldSelector, String> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let Some((field, operator, value)) = split_term(part) else {
                return Err(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                ));
            };
            terms.push(FieldTerm {
                field: field.to_owned(),
                value: unescape(value)?,
                negated: operator == "!=",
            });
        }
        Ok(FieldSelector { terms })
    }

    /// The terms, sorted.
    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    /// The fields the selector names, to check against what the type allows
    /// (kube-apiserver answers `400 field label not supported: <field>` otherwise).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether `object` satisfies every term.
    pub fn matches(&self, object: &(impl Selectable + ?Sized)) -> bool {
        self.terms.iter().all(|t| t.matches(object))
    }
}

/// The fields a field selector may name for `rt`: `metadata.name`,
/// `metadata.namespace` (for every type, as for custom resources) and the
/// type's selectable fields.
pub fn selectable_fields(rt: &ResourceType) -> Vec<String> {
    ["metadata.name", "metadata.namespace"]
        .into_iter()
        .map(str::to_owned)
        .chain(rt.selectable_fields.iter().cloned())
        .collect()
}

/// The text of a dotted field of `object`; `""` when missing or null.
pub(super) fn field_text<'a>(object: &'a Value, path: &str) -> Cow<'a, str> {
    let value = path.split('.').try_fold(object, |v, key| v.get(key));
    match value {
        None | Some(Value::Null) => Cow::Borrowed(""),
        Some(Value::String(s)) => Cow::Borrowed(s),
        Some(other) => Cow::Owned(other.to_string()),
    }
}

/// Splits on commas that are not escaped by a backslash; escapes stay.
fn split_terms(selector: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in selector.chars() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            current.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    terms.push(current);
    terms
}

/// `field`, operator, `value` at the first operator (`!=` before `==` before `=`).
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    term.char_indices().find_map(|(i, _)| {
        ["!=", "==", "="]
            .into_iter()
            .find(|op| term[i..].starts_with(op))
            .map(|op| (&term[..i], op, &term[i + op.len()..]))
    })
}

fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{e}"
                    ));
                }
                None => return Err("invalid field selector: invalid escape sequence: \\".into()),
            },
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {c:?}"
                ));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{FieldSelector, selectable_fields};
    use crate::registry::ResourceType;

    fn selects(selector: &str, object: &serde_json::Value) -> bool {
        FieldSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"))
            .matches(object)
    }

    #[test]
    fn equality_and_inequality_on_dotted_paths() {
        let object = json!({"metadata": {"name": "web", "namespace": "prod"},
                            "spec": {"tenant": "t-1", "enabled": true, "count": 3}});
        assert!(selects("metadata.name=web", &object));
        assert!(selects(
            "metadata.name==web,metadata.namespace=prod",
            &object
        ));
        assert!(!selects("metadata.name=db", &object));
        assert!(selects("metadata.namespace!=dev", &object));
        assert!(!selects("metadata.namespace!=prod", &object));
        assert!(selects("spec.tenant=t-1", &object));
        assert!(selects("spec.enabled=true,spec.count=3", &object));
        // A missing field is the empty string.
        assert!(selects("spec.missing=", &object));
        assert!(!selects("spec.missing=x", &object));
        assert!(selects("spec.missing!=x", &object));
        assert!(selects("", &object));
    }

    #[test]
    fn escapes_allow_commas_and_equals_in_values() {
        let object = json!({"metadata": {"name": "a,b=c\\d"}});
        let selector = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").expect("valid");
        assert_eq!(selector.terms().len(), 1);
        assert_eq!(selector.terms()[0].value, "a,b=c\\d");
        assert!(selector.matches(&object));
    }

    #[test]
    fn fields_lists_what_the_selector_names() {
        let selector = FieldSelector::parse("spec.tenant=x,metadata.name!=y").expect("valid");
        assert_eq!(
            selector.fields().collect::<Vec<_>>(),
            ["metadata.name", "spec.tenant"]
        );
        let mut rt = ResourceType::schemaless("example.com", "v1", "Widget", "widgets", true);
        rt.selectable_fields = vec!["spec.tenant".into()];
        let allowed = selectable_fields(&rt);
        assert!(selector.fields().all(|f| allowed.iter().any(|a| a == f)));
        assert!(!allowed.contains(&"spec.other".to_owned()));
    }

    #[test]
    fn errors_read_like_kube_apiserver() {
        assert_eq!(
            FieldSelector::parse("metadata.name"),
            Err("invalid selector: 'metadata.name'; can't understand 'metadata.name'".into())
        );
        assert_eq!(
            FieldSelector::parse(r"a=b\x"),
            Err(r"invalid field selector: invalid escape sequence: \x".into())
        );
        assert_eq!(
            FieldSelector::parse("a=b=c"),
            Err("invalid field selector: unescaped character in value: '='".into())
        );
        assert_eq!(
            FieldSelector::parse(r"a=b\"),
            Err(r"invalid field selector: invalid escape sequence: \".into())
        );
    }
}
