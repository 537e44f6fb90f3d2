//! Field validation shared by every kind, reported the way Kubernetes reports
//! it: a list of [`FieldError`]s that map one-to-one onto `StatusCause`s of a
//! `422 Invalid` `Status`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, StatusCause};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// Something that can check its own fields.
pub trait Validate {
    /// Every problem found; empty when the object is valid.
    fn validate(&self) -> Vec<FieldError>;
}

/// Why a field is invalid; each maps to a Kubernetes `CauseType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    /// `FieldValueInvalid`: the value is malformed.
    Invalid,
    /// `FieldValueRequired`: the field must be set.
    Required,
    /// `FieldValueDuplicate`: the value appears more than once.
    Duplicate,
    /// `FieldValueNotSupported`: the value is not one of a known set.
    NotSupported,
    /// `FieldValueTooLong`: the value is longer than allowed.
    TooLong,
    /// `FieldValueForbidden`: the field must not be set here.
    Forbidden,
}

impl FieldErrorKind {
    /// The Kubernetes `StatusCause.reason` for this kind.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::NotSupported => "FieldValueNotSupported",
            Self::TooLong => "FieldValueTooLong",
            Self::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One invalid field: its path (`spec.inputs[1].name`), why, and a message in
/// the form Kubernetes uses (`Duplicate value: "domain"`).
///
/// Displays as `spec.inputs[1].name: Duplicate value: "domain"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// JSON path of the field, `metadata.name`, `spec.steps[0].command`.
    pub field: String,
    /// Why the field is invalid.
    pub kind: FieldErrorKind,
    /// The Kubernetes error body, without the field path.
    pub message: String,
}

impl FieldError {
    /// The value is malformed; `detail` says how.
    pub fn invalid(field: impl Into<String>, value: impl Debug, detail: impl AsRef<str>) -> Self {
        Self::new(
            field,
            FieldErrorKind::Invalid,
            format!("Invalid value: {value:?}: {}", detail.as_ref()),
        )
    }

    /// The field must be set; `detail` may be empty.
    pub fn required(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        let detail = detail.as_ref();
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        Self::new(field, FieldErrorKind::Required, message)
    }

    /// The value appears more than once.
    pub fn duplicate(field: impl Into<String>, value: impl Debug) -> Self {
        Self::new(
            field,
            FieldErrorKind::Duplicate,
            format!("Duplicate value: {value:?}"),
        )
    }

    /// The value is not one of `supported`.
    pub fn not_supported(field: impl Into<String>, value: impl Debug, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Self::new(
            field,
            FieldErrorKind::NotSupported,
            format!(
                "Unsupported value: {value:?}: supported values: {}",
                supported.join(", ")
            ),
        )
    }

    /// The value is longer than `max` characters.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::new(
            field,
            FieldErrorKind::TooLong,
            format!("Too long: may not be more than {max} bytes"),
        )
    }

    /// The field must not be set; `detail` says why.
    pub fn forbidden(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        Self::new(
            field,
            FieldErrorKind::Forbidden,
            format!("Forbidden: {}", detail.as_ref()),
        )
    }

    fn new(field: impl Into<String>, kind: FieldErrorKind, message: String) -> Self {
        Self {
            field: field.into(),
            kind,
            message,
        }
    }

    /// This error as a Kubernetes `StatusCause`.
    pub fn to_status_cause(&self) -> StatusCause {
        StatusCause {
            field: Some(self.field.clone()),
            message: Some(self.message.clone()),
            reason: Some(self.kind.reason().to_owned()),
        }
    }
}

/// Maximum length of a DNS-1123 label.
pub const DNS1123_LABEL_MAX: usize = 63;
/// Maximum length of a DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Maximum length of an identifier (input, secret, group names).
pub const IDENTIFIER_MAX: usize = 63;

/// Whether `s` is a DNS-1123 label: lowercase alphanumerics and `-`, starting
/// and ending with an alphanumeric, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= DNS1123_LABEL_MAX
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Whether `s` is a DNS-1123 subdomain: DNS-1123 labels joined by `.`, at
/// most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-'))
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// Whether `s` is an identifier `[a-z][a-z0-9_]*` of at most 63 characters,
/// as used for input, input group and secret names (`{{ inputs.domain }}`).
pub fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= IDENTIFIER_MAX
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// How an object's `metadata.name` is constrained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain, like most Kubernetes objects.
    Subdomain,
    /// A DNS-1123 label, for kinds whose name is used as a label value or in
    /// other names (Apps, Components, Actions, Installs).
    Label,
}

/// Checks `metadata.name` against `rule`. An object with only
/// `metadata.generateName` passes: the server names it before storing it.
pub fn validate_object_name(meta: &ObjectMeta, rule: NameRule) -> Vec<FieldError> {
    let field = "metadata.name";
    let Some(name) = meta.name.as_deref() else {
        return if meta.generate_name.is_some() {
            Vec::new()
        } else {
            vec![FieldError::required(
                field,
                "name or generateName is required",
            )]
        };
    };
    validate_name(field, name, rule).into_iter().collect()
}

/// Checks that `value` is a name following `rule`, reporting it at `field`.
pub fn validate_name(field: &str, value: &str, rule: NameRule) -> Option<FieldError> {
    match rule {
        NameRule::Label if !is_dns1123_label(value) => Some(FieldError::invalid(
            field,
            value,
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character (at most 63 characters)",
        )),
        NameRule::Subdomain if !is_dns1123_subdomain(value) => Some(FieldError::invalid(
            field,
            value,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character",
        )),
        _ => None,
    }
}

/// Checks that `value` is an [identifier](is_identifier).
pub fn validate_identifier(field: &str, value: &str) -> Option<FieldError> {
    if value.is_empty() {
        Some(FieldError::required(field, ""))
    } else if value.len() > IDENTIFIER_MAX {
        Some(FieldError::too_long(field, IDENTIFIER_MAX))
    } else if !is_identifier(value) {
        Some(FieldError::invalid(
            field,
            value,
            "must start with a lowercase letter and contain only lowercase letters, digits and \
             '_' (regex [a-z][a-z0-9_]*)",
        ))
    } else {
        None
    }
}

/// Checks that a required string field is not empty.
pub fn validate_required(field: &str, value: &str) -> Option<FieldError> {
    value
        .trim()
        .is_empty()
        .then(|| FieldError::required(field, ""))
}

/// Reports every repeated key after its first occurrence. `field` builds the
/// path of the item at an index.
pub fn duplicates<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    field: impl Fn(usize) -> String,
) -> Vec<FieldError> {
    let mut seen = BTreeMap::new();
    let mut errors = Vec::new();
    for (index, key) in keys.into_iter().enumerate() {
        if seen.insert(key, index).is_some() {
            errors.push(FieldError::duplicate(field(index), key));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_kubernetes() {
        let err = FieldError::duplicate("spec.inputs[1].name", "domain");
        assert_eq!(
            err.to_string(),
            r#"spec.inputs[1].name: Duplicate value: "domain""#
        );
        let err = FieldError::not_supported("spec.type", "x", &["a", "b"]);
        assert_eq!(
            err.to_string(),
            r#"spec.type: Unsupported value: "x": supported values: "a", "b""#
        );
        assert_eq!(
            FieldError::required("spec.app", "").to_string(),
            "spec.app: Required value"
        );
        let cause = err.to_status_cause();
        assert_eq!(cause.reason.as_deref(), Some("FieldValueNotSupported"));
        assert_eq!(cause.field.as_deref(), Some("spec.type"));
    }

    #[test]
    fn dns_names() {
        for ok in ["a", "shopfront", "a-1", "0abc"] {
            assert!(is_dns1123_label(ok), "{ok}");
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
        assert!(is_dns1123_subdomain("a.b-c.d"));
        for bad in ["a..b", ".a", "a.", "a_b", "UP", &"a".repeat(254)] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("db_password"));
        assert!(is_identifier("a1"));
        for bad in ["", "1a", "_a", "a-b", "Aa", &"a".repeat(64)] {
            assert!(!is_identifier(bad), "{bad}");
        }
        assert_eq!(
            validate_identifier("f", &"a".repeat(64)).map(|e| e.kind),
            Some(FieldErrorKind::TooLong)
        );
    }

    #[test]
    fn object_names() {
        let named = |n: &str| ObjectMeta {
            name: Some(n.into()),
            ..Default::default()
        };
        assert!(validate_object_name(&named("a.b"), NameRule::Subdomain).is_empty());
        assert_eq!(
            validate_object_name(&named("a.b"), NameRule::Label).len(),
            1
        );
        assert_eq!(
            validate_object_name(&ObjectMeta::default(), NameRule::Label).len(),
            1
        );
        let generated = ObjectMeta {
            generate_name: Some("p-".into()),
            ..Default::default()
        };
        assert!(validate_object_name(&generated, NameRule::Label).is_empty());
    }

    #[test]
    fn duplicates_reports_later_occurrences() {
        let errors = duplicates(["a", "b", "a", "a"], |i| format!("x[{i}]"));
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["x[2]", "x[3]"]);
    }
}
