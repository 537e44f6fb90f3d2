//! PATCH as kube-apiserver serves it for custom resources: JSON merge patch
//! (RFC 7386), JSON patch (RFC 6902) and server-side apply with
//! `metadata.managedFields`. Strategic merge patch is refused with 415, as for CRDs,
//! except for the stand-in cluster's built-in kinds ([`apply_strategic_merge`]).

mod apply;
mod fields;
mod managed;
mod strategic;

pub use apply::{ApplyConflict, FieldConflict, record_update, server_side_apply};
pub use fields::{FieldPath, FieldSet, ListShape, PathElement, field_set_cost};
pub use managed::{
    APPLY, ManagedEntry, Manager, UPDATE, decode_managed_fields, encode_managed_fields,
};
pub use strategic::apply_strategic_merge;

use crate::status::{FieldError, FieldErrorKind};
use json_patch::{Patch, PatchErrorKind, PatchOperation};
use serde_json::Value;

use crate::limits::{Limits, depth, too_deep};
use crate::status::{ApiError, Subject};

/// The most operations a JSON patch may hold, as in kube-apiserver.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The body kube answers for a PATCH content type it does not serve for CRDs.
const UNSUPPORTED: &str = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

/// The most memory tracking one object's fields may take ([`field_set_cost`]): 64 MiB.
/// Kube-apiserver needs no such limit, its field sets being trees; ours hold each leaf's
/// whole path, which a small body can make enormous.
pub const MAX_FIELD_SET_BYTES: usize = 64 * 1024 * 1024;

/// 422 `Invalid` for an object whose fields would take more than
/// [`MAX_FIELD_SET_BYTES`] to track (the field sets of server-side apply and
/// `managedFields`), before anything computes them.
pub fn check_trackable(object: &Value) -> Result<(), ApiError> {
    let cost = field_set_cost(object, MAX_FIELD_SET_BYTES);
    if cost <= MAX_FIELD_SET_BYTES {
        return Ok(());
    }
    Err(invalid_patch(
        object,
        FieldError {
            field: "metadata.managedFields".into(),
            kind: FieldErrorKind::TooLong,
            message: format!(
                "Too long: tracking the object's fields would take more than {MAX_FIELD_SET_BYTES} bytes (every leaf's path, with its keys): use fewer, shallower or shorter fields"
            ),
        },
    ))
}

/// A PATCH request's kind, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`: RFC 7386.
    Merge,
    /// `application/json-patch+json`: RFC 6902.
    Json,
    /// `application/apply-patch+yaml`: server-side apply.
    Apply,
    /// `application/strategic-merge-patch+json`: recognised, but not served for
    /// custom resources.
    StrategicMerge,
}

impl PatchType {
    /// The patch type of a `Content-Type` header (parameters such as `charset` are
    /// ignored); anything else is a 415.
    pub fn from_content_type(content_type: &str) -> Result<PatchType, ApiError> {
        let media_type = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match media_type.as_str() {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
            "application/strategic-merge-patch+json" => Ok(PatchType::StrategicMerge),
            _ => Err(ApiError::UnsupportedMediaType(UNSUPPORTED.into())),
        }
    }
}

/// Applies a merge or JSON patch `body` to `existing`.
///
/// Errors: a malformed body is a 400; a JSON patch that does not apply (a failed
/// `test`, a missing path) is a 422 `Invalid` like kube's; strategic merge is a 415.
/// A JSON patch `test` of `null` passes against a missing field, as kube-apiserver's
/// patch library does (kube-rs relies on it to add the first finalizer).
/// Server-side apply needs a field manager: use [`parse_apply_body`] and
/// [`server_side_apply`].
///
/// The work is bounded by `limits`, as kube-apiserver bounds it: at most
/// [`MAX_JSON_PATCH_OPERATIONS`] operations (413), `copy` operations adding at most
/// `max_request_body_bytes` in all and no operation nesting a value deeper than
/// `max_object_depth` (422, at the operation that would).
pub fn apply_patch(
    kind: PatchType,
    existing: &Value,
    body: &[u8],
    limits: &Limits,
) -> Result<Value, ApiError> {
    let patched = match kind {
        PatchType::Merge => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
            if !patch.is_object() {
                return Err(ApiError::BadRequest(
                    "Invalid JSON Patch: a merge patch must be a JSON object".into(),
                ));
            }
            let mut doc = existing.clone();
            json_patch::merge(&mut doc, &patch);
            doc
        }
        PatchType::Json => apply_json_patch(existing, body, limits)?,
        PatchType::Apply => {
            return Err(ApiError::Internal(
                "server-side apply is served by server_side_apply, not apply_patch".into(),
            ));
        }
        PatchType::StrategicMerge => {
            return Err(ApiError::UnsupportedMediaType(UNSUPPORTED.into()));
        }
    };
    if !patched.is_object() {
        return Err(ApiError::BadRequest(
            "the patched object must be a JSON object".into(),
        ));
    }
    check_trackable(&patched)?;
    Ok(patched)
}

fn apply_json_patch(existing: &Value, body: &[u8], limits: &Limits) -> Result<Value, ApiError> {
    let patch: Patch = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    if patch.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::TooManyPatchOperations {
            limit: MAX_JSON_PATCH_OPERATIONS,
            got: patch.len(),
        });
    }
    let mut doc = existing.clone();
    let mut grown = Growth::default();
    for op in patch.iter() {
        check_growth(existing, &doc, op, limits, &mut grown)?;
        let null_test = match op {
            PatchOperation::Test(test) if test.value.is_null() => Some(test.path.as_str()),
            _ => None,
        };
        if let Some(path) = null_test {
            if null_or_missing(&doc, path) {
                continue;
            }
            return Err(patch_failed(existing, path, "test failed"));
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op)).map_err(|e| {
            let detail = match e.kind {
                PatchErrorKind::TestFailed => "test failed".to_owned(),
                _ => e.to_string(),
            };
            patch_failed(existing, op.path().as_str(), &detail)
        })?;
    }
    Ok(doc)
}

/// The bytes a JSON patch's `copy` operations added, and those of the values its `move`
/// operations took deeper (each must be walked to check its depth).
#[derive(Default)]
struct Growth {
    copied: usize,
    moved_deeper: usize,
}

/// Refuses `op` before it runs if it would nest a value deeper than the object depth
/// limit, if it is a `copy` taking the bytes copied by the patch over the request body
/// limit (kube's `JSONPatchMaxCopyBytes`, with its message), or a `move` taking the
/// bytes moved deeper over that limit. A `move` to the same depth or shallower cannot
/// nest anything deeper and is not walked, so reordering a list costs nothing; without
/// the bound, ten thousand moves of a large value down and back up walked it each time.
fn check_growth(
    existing: &Value,
    doc: &Value,
    op: &PatchOperation,
    limits: &Limits,
    grown: &mut Growth,
) -> Result<(), ApiError> {
    let added = match op {
        PatchOperation::Add(add) => Some(&add.value),
        PatchOperation::Replace(replace) => Some(&replace.value),
        PatchOperation::Copy(copy) => doc.pointer(copy.from.as_str()),
        PatchOperation::Move(moved) if op.path().count() > moved.from.count() => {
            doc.pointer(moved.from.as_str())
        }
        PatchOperation::Move(_) | PatchOperation::Remove(_) | PatchOperation::Test(_) => None,
    };
    let Some(added) = added else {
        return Ok(()); // nothing added, or a missing `from` the patch itself reports
    };
    let path = op.path();
    let max_depth = limits.max_object_depth;
    let at = path.count();
    if at + depth(added, max_depth) > max_depth {
        return Err(invalid_patch(
            existing,
            too_deep(&dotted(path.as_str()), max_depth),
        ));
    }
    let (total, what) = match op {
        PatchOperation::Copy(_) => (&mut grown.copied, "copy"),
        PatchOperation::Move(_) => (&mut grown.moved_deeper, "move"),
        _ => return Ok(()),
    };
    *total = total.saturating_add(encoded_len(added));
    if *total > limits.max_request_body_bytes {
        return Err(patch_failed(
            existing,
            path.as_str(),
            &format!(
                "Unable to complete the {what}, the accumulated size increase of {what} is {total}, exceeding the limit {}",
                limits.max_request_body_bytes
            ),
        ));
    }
    Ok(())
}

/// `/spec/a/0` as `spec.a.0`.
fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// The length of `value` encoded as JSON, without allocating it.
fn encoded_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("a JSON value serialises");
    count.0
}

/// Whether `pointer` names a missing member of an existing object, or a `null`.
/// Kube's patch library (evanphx/json-patch v4) treats both as `null`; a missing
/// parent still fails.
fn null_or_missing(doc: &Value, pointer: &str) -> bool {
    if let Some(value) = doc.pointer(pointer) {
        return value.is_null();
    }
    pointer
        .rsplit_once('/')
        .is_some_and(|(parent, _)| doc.pointer(parent).is_some_and(Value::is_object))
}

fn patch_failed(existing: &Value, path: &str, detail: &str) -> ApiError {
    invalid_patch(
        existing,
        FieldError {
            field: path.to_owned(),
            kind: FieldErrorKind::Invalid,
            message: if detail == "test failed" {
                format!("testing value {path} failed: test failed")
            } else {
                detail.to_owned()
            },
        },
    )
}

/// A 422 about the patched object, with `cause`.
fn invalid_patch(existing: &Value, cause: FieldError) -> ApiError {
    let text = |pointer: &str| {
        existing
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let api_version = text("/apiVersion");
    ApiError::Invalid {
        subject: Subject {
            group: api_version
                .rsplit_once('/')
                .map(|(g, _)| g.to_owned())
                .unwrap_or_default(),
            resource: String::new(),
            kind: text("/kind").to_owned(),
            name: text("/metadata/name").to_owned(),
        },
        causes: vec![cause],
    }
}

/// Parses a server-side apply body (YAML, or JSON which is YAML) into an object.
/// Like kube, the configuration must be an object with `apiVersion` and `kind`,
/// and must not set `metadata.managedFields`.
pub fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    // JSON is YAML, and what clients (kubectl, kube-rs) send: read it as JSON first, a
    // tenth of the cost of the YAML parser.
    let applied: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(_) => serde_saphyr::from_str(text)
            .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?,
    };
    if !applied.is_object() {
        return Err(ApiError::BadRequest(
            "error decoding YAML: the apply configuration must be an object".into(),
        ));
    }
    for field in ["apiVersion", "kind"] {
        if applied
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
        {
            return Err(ApiError::BadRequest(format!(
                "error decoding YAML: Object '{}' is missing in the apply configuration",
                if field == "kind" {
                    "Kind"
                } else {
                    "apiVersion"
                }
            )));
        }
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    check_trackable(&applied)?;
    Ok(applied)
}

/// Checks PATCH options as kube's `ValidatePatchOptions` does: apply needs a
/// `fieldManager`, and `force` is only for apply.
pub fn validate_patch_options(
    kind: PatchType,
    field_manager: Option<&str>,
    force: Option<bool>,
) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if kind == PatchType::Apply {
        if field_manager.unwrap_or_default().is_empty() {
            causes.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
    } else if force.is_some() {
        causes.push(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        subject: Subject {
            group: "meta.k8s.io".into(),
            resource: "patchoptions".into(),
            kind: "PatchOptions".into(),
            name: String::new(),
        },
        causes,
    })
}

#[cfg(test)]
mod tests;
