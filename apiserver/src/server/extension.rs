//! What code served beside the API by the same process (the dashboard, a crate of its
//! own) may use of the server: a small public interface, so that such code never
//! reaches into the server's private state.
//!
//! * **read** ([`ApiHandle::resource_type`], [`ApiHandle::cache`]): the served types
//!   and a read-only view of their watch caches ([`CacheReader`]: one object, a list,
//!   a list with a subscription to every later change);
//! * **authorize** ([`ApiHandle::authenticate`], [`ApiHandle::authorize`]): who a
//!   bearer token is, and what a request of that user may touch, by the very code the
//!   API's request handler runs;
//! * **act** ([`ApiHandle::call`]): a request answered by the API's own handler, so
//!   authentication, authorization, admission, fencing and audit apply as to any
//!   client.
//!
//! It is mounted with [`ApiServer::mount`](super::ApiServer::mount) (routes matched
//! before the API's own handler) and [`ApiServer::add_metrics`](super::ApiServer::add_metrics)
//! (lines appended to `/metrics`). See `docs/ARCHITECTURE.md`.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http::Request;

use super::ServerState;
use super::dispatch::{authenticate_token, authorize, dispatch};
use crate::auth::{Access, User};
use crate::registry::ResourceType;
use crate::request::RequestInfo;
use crate::status::ApiError;
use crate::watch_cache::{CachedObject, LiveEvents, Snapshot, WatchCache};

/// The running API server as code served beside it sees it (cheap to clone).
#[derive(Clone)]
pub struct ApiHandle {
    state: Arc<ServerState>,
}

impl ApiHandle {
    pub(super) fn new(state: Arc<ServerState>) -> Self {
        ApiHandle { state }
    }

    /// The served type `plural` of `group`/`version`, if this server serves it.
    pub fn resource_type(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceType>> {
        self.state.config.registry.get(group, version, plural)
    }

    /// A read-only view of the watch cache of `rt`: what lists and watches are served
    /// from.
    pub fn cache(&self, rt: &ResourceType) -> Result<CacheReader, ApiError> {
        Ok(CacheReader {
            cache: self.state.cache(rt)?.clone(),
        })
    }

    /// The user `token` belongs to, as for a request's `Authorization: Bearer` header;
    /// [`ApiError::Unauthorized`] when it is nobody's.
    pub async fn authenticate(&self, token: &str) -> Result<User, ApiError> {
        authenticate_token(&self.state, token).await
    }

    /// What `request` of `user` may touch, as the API's request handler decides it;
    /// [`ApiError::Forbidden`] with the API's message when nothing.
    pub fn authorize(&self, user: &User, request: &RequestInfo) -> Result<Access, ApiError> {
        authorize(&self.state, user, request)
    }

    /// Answers `request` with the API's own handler, exactly as if a client had sent it
    /// (its `Authorization` header says who acts).
    pub async fn call(&self, request: Request<Body>) -> Response {
        dispatch(self.state.clone(), request).await
    }
}

/// The objects of one served type as the watch cache has them; reads only.
#[derive(Clone)]
pub struct CacheReader {
    cache: Arc<WatchCache>,
}

impl CacheReader {
    /// The object `namespace/name`.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        self.cache.get(namespace, name)
    }

    /// The objects in `namespace` (every namespace when `None`) that `keep` accepts,
    /// looked up by the cache's `index` when given, and the revision they are at.
    pub fn list(
        &self,
        namespace: Option<&str>,
        index: Option<&str>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Snapshot {
        self.cache.list(namespace, index, keep)
    }

    /// A [`list`](Self::list) and a subscription to every later change, taken together
    /// so that no change falls between them.
    pub fn list_and_subscribe(
        &self,
        namespace: Option<&str>,
        index: Option<&str>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> (Snapshot, LiveEvents) {
        self.cache.list_and_subscribe(namespace, index, keep)
    }
}

/// Lines that code served beside the API adds to `/metrics`.
pub trait MetricsSource: Send + Sync + 'static {
    /// Appends its series, in the Prometheus text format, to `out`.
    fn render(&self, out: &mut String);
}
