//! A resource type's own rules, as k8s.io/apiserver's `RESTCreateStrategy` and
//! `RESTUpdateStrategy`: the validation the schema cannot say, and whether the spec is
//! fixed once created. The server asks the strategy of a type on every write, after the
//! schema check, so a request gets every cause in one 422; types without one use
//! [`NoRules`].

use serde_json::Value;

use crate::status::FieldError;

/// The rules of one resource type.
pub trait Strategy: Send + Sync + std::fmt::Debug + 'static {
    /// Every problem of `object` (already valid against the schema); empty if none.
    fn validate(&self, object: &Value) -> Vec<FieldError> {
        let _ = object;
        Vec::new()
    }

    /// Whether `spec` may not change after creation (422 `field is immutable`).
    fn immutable_spec(&self) -> bool {
        false
    }

    /// Whether a create may carry `status` on a type with a status subresource (the
    /// server otherwise drops it, as kube-apiserver does); the admission chain then
    /// decides what of it may be written, as a Pod may be created with `spec.nodeName`
    /// by whoever may bind it, without a scheduler's second write.
    fn status_on_create(&self) -> bool {
        false
    }
}

/// The strategy of a type with no rules of its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRules;

impl Strategy for NoRules {}
