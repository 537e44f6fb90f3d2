//! Subresources served by plugins (beyond `status`, which the core serves for every
//! type whose definition asks for it): a type declares the subresource by name
//! ([`crate::registry::PluginSubresource`]), the plugin of that name answers its
//! requests with what a [`Call`] offers (the object, the store, the caches, the user
//! and what the authorizer allowed).

use axum::body::Body;
use axum::response::Response;

use super::dispatch::Call;
use crate::status::ApiError;

/// One subresource, e.g. `widgets/NAME/scale`.
#[async_trait::async_trait]
pub trait Subresource: Send + Sync + 'static {
    /// Its name in paths.
    fn name(&self) -> &'static str;

    /// Whether its writes are checked against a fencing token first, like any write
    /// (see `fence.rs`); one that is not is answered before admission too (a
    /// subresource that mints credentials).
    fn fenced(&self) -> bool {
        true
    }

    /// Answers a request to it (any verb: answer 405 to those it does not take).
    async fn answer(&self, call: &Call, body: Body) -> Result<Response, ApiError>;
}
