//! Every error that reaches HTTP is an [`ApiError`]; this is the one place that maps
//! it to a status code and a Kubernetes `Status` body.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
/// A field's error, one cause of a 422 `Invalid`.
pub use outpost_meta::{FieldError, FieldErrorKind};
use serde_json::{Value, json};

use crate::registry::ResourceType;
use crate::storage::StoreError;

/// Names the object an error is about, as Kubernetes messages do.
#[derive(Clone, Debug, Default)]
pub struct Subject {
    /// API group.
    pub group: String,
    /// Plural resource name (used in `details.kind` for most errors, as Kubernetes does).
    pub resource: String,
    /// Kind (used by `Invalid`).
    pub kind: String,
    /// Object name, if any.
    pub name: String,
}

impl Subject {
    /// The subject `name` of type `rt`.
    pub fn of(rt: &ResourceType, name: &str) -> Self {
        Subject {
            group: rt.group.clone(),
            resource: rt.plural.clone(),
            kind: rt.kind.clone(),
            name: name.to_owned(),
        }
    }

    fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// An error answered with a Kubernetes `Status`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404.
    #[error("{} {:?} not found", .0.qualified_resource(), .0.name)]
    NotFound(Subject),
    /// 404 for a path that serves nothing.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// 409 on create.
    #[error("{} {:?} already exists", .0.qualified_resource(), .0.name)]
    AlreadyExists(Subject),
    /// 409 on a stale resourceVersion.
    #[error("Operation cannot be fulfilled on {} {:?}: {reason}", .subject.qualified_resource(), .subject.name)]
    Conflict {
        /// The object.
        subject: Subject,
        /// Why.
        reason: String,
    },
    /// 409 for a write the object's state does not allow (a state machine's); unlike
    /// [`ApiError::Conflict`], retrying the same write does not help.
    #[error("Operation cannot be fulfilled on {} {:?}: {reason}", .subject.qualified_resource(), .subject.name)]
    Refused {
        /// The object.
        subject: Subject,
        /// Why.
        reason: String,
    },
    /// 422 with field causes.
    #[error("{} {:?} is invalid: {}", .subject.qualified_kind(), .subject.name, join_causes(.causes))]
    Invalid {
        /// The object.
        subject: Subject,
        /// What is wrong, field by field.
        causes: Vec<FieldError>,
    },
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 401.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403.
    #[error("{0}")]
    Forbidden(String),
    /// 405.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 410 for a paged list whose revision was compacted; carries a fresh continue token.
    #[error(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    )]
    ContinueExpired {
        /// A token continuing from the same key at the current revision.
        fresh_continue: Option<String>,
    },
    /// 410 for a list or watch at a compacted resourceVersion.
    #[error("too old resource version: {0}")]
    Gone(String),
    /// 413 for a request body over the limit.
    #[error("Request entity too large: limit is {0}")]
    TooLarge(usize),
    /// 413 for an object that would be stored larger than the limit (after a patch or
    /// an apply, whatever the size of the request).
    #[error("{} {:?} is too large: {size} bytes, the limit is {limit} bytes", .subject.qualified_resource(), .subject.name)]
    ObjectTooLarge {
        /// The object.
        subject: Subject,
        /// Its size as it would be stored.
        size: usize,
        /// The largest object stored.
        limit: usize,
    },
    /// 413 for a JSON patch with more operations than kube-apiserver accepts.
    #[error("The allowed maximum operations in a JSON patch is {limit}, got {got}")]
    TooManyPatchOperations {
        /// The most operations accepted.
        limit: usize,
        /// The operations sent.
        got: usize,
    },
    /// 405 for a change to an object of an append-only kind.
    #[error("{} {:?} cannot be changed or deleted: {why}", .subject.qualified_resource(), .subject.name)]
    AppendOnly {
        /// The object (or the collection, with no name).
        subject: Subject,
        /// Why the kind is append-only.
        why: &'static str,
    },
    /// 415.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 504 for a resourceVersion the store has not reached.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// Asked for.
        requested: i64,
        /// The store's.
        current: i64,
    },
    /// 429 with `Retry-After: 1`: a limit on concurrent requests or open watches.
    #[error("{0}")]
    TooManyRequests(String),
    /// 500.
    #[error("Internal error occurred: {0}")]
    Internal(String),
}

fn join_causes(causes: &[FieldError]) -> String {
    let parts: Vec<String> = causes.iter().map(ToString::to_string).collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    /// Maps a store error about `subject`.
    pub fn from_store(err: StoreError, subject: Subject) -> Self {
        match err {
            StoreError::NotFound { .. } => ApiError::NotFound(subject),
            StoreError::AlreadyExists { .. } => ApiError::AlreadyExists(subject),
            StoreError::Conflict { .. } => ApiError::Conflict {
                subject,
                reason: "the object has been modified; please apply your changes to the latest version and try again".into(),
            },
            StoreError::Expired { requested } => ApiError::Gone(requested.to_string()),
            StoreError::FutureRevision { requested, current } => {
                ApiError::TooLargeResourceVersion { requested, current }
            }
            StoreError::InvalidContinue { reason } => {
                ApiError::BadRequest(format!("invalid continue token: {reason}"))
            }
            StoreError::Backend(err) => ApiError::Internal(format!("storage: {err}")),
        }
    }

    /// The HTTP status code.
    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) | ApiError::NoRoute => StatusCode::NOT_FOUND,
            ApiError::AlreadyExists(_) | ApiError::Conflict { .. } | ApiError::Refused { .. } => {
                StatusCode::CONFLICT
            }
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::MethodNotAllowed | ApiError::AppendOnly { .. } => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            ApiError::ContinueExpired { .. } | ApiError::Gone(_) => StatusCode::GONE,
            ApiError::TooLarge(_)
            | ApiError::ObjectTooLarge { .. }
            | ApiError::TooManyPatchOperations { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooLargeResourceVersion { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The Kubernetes `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) | ApiError::NoRoute => "NotFound",
            ApiError::AlreadyExists(_) => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::Refused { .. } => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::MethodNotAllowed | ApiError::AppendOnly { .. } => "MethodNotAllowed",
            ApiError::ContinueExpired { .. } | ApiError::Gone(_) => "Expired",
            ApiError::TooLarge(_)
            | ApiError::ObjectTooLarge { .. }
            | ApiError::TooManyPatchOperations { .. } => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::TooLargeResourceVersion { .. } => "Timeout",
            ApiError::TooManyRequests(_) => "TooManyRequests",
            ApiError::Internal(_) => "InternalError",
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code().as_u16(),
        });
        let details = match self {
            ApiError::NotFound(s)
            | ApiError::AlreadyExists(s)
            | ApiError::Conflict { subject: s, .. }
            | ApiError::Refused { subject: s, .. }
            | ApiError::ObjectTooLarge { subject: s, .. }
            | ApiError::AppendOnly { subject: s, .. } => {
                Some(json!({"name": s.name, "group": s.group, "kind": s.resource}))
            }
            ApiError::Invalid { subject, causes } => Some(json!({
                "name": subject.name,
                "group": subject.group,
                "kind": subject.kind,
                "causes": causes.iter().map(|c| json!({
                    "reason": c.kind.reason(),
                    "message": c.message,
                    "field": c.field,
                })).collect::<Vec<_>>(),
            })),
            ApiError::TooLargeResourceVersion { .. } | ApiError::TooManyRequests(_) => {
                Some(json!({"retryAfterSeconds": 1}))
            }
            _ => None,
        };
        if let Some(details) = details {
            status["details"] = details;
        }
        if let ApiError::ContinueExpired {
            fresh_continue: Some(token),
        } = self
        {
            status["metadata"]["continue"] = json!(token);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.code(), Json(self.status())).into_response();
        if let ApiError::TooManyRequests(_) = self {
            // As kube-apiserver's max-in-flight filter: clients (client-go, kube-rs)
            // wait this long and retry.
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}
