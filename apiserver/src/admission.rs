//! Admission: the plugins a server is built with, run in order on every write after the
//! schema and the type's [`Strategy`](crate::strategy::Strategy) validated it, like
//! kube-apiserver's mutating and validating admission webhooks, but in process.
//!
//! A plugin sees what is written ([`Attributes`]), may change the object (the server
//! stores what the last plugin left), and reads other objects through [`Reads`] (the
//! watch caches and the store) to check references. It answers with an [`ApiError`]
//! (422 `Invalid`, 403, 409...) to refuse the write. Before a request reads anything,
//! [`Admission::admit_request`] may refuse it outright (a kind whose objects never
//! change answers 405).

use std::sync::Arc;

use serde_json::Value;

use crate::auth::User;
use crate::registry::ResourceType;
use crate::request::ResourceRequest;
use crate::status::ApiError;
use crate::storage::Store;
use crate::watch_cache::{CachedObject, WatchCache};

/// What a write is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new object (`POST`, or an apply that creates).
    Create,
    /// A change of a stored object (`PUT`, `PATCH`, of the object or its `status`).
    Update,
}

/// The write a plugin is asked about.
pub struct Attributes<'a> {
    /// The object's type.
    pub rt: &'a ResourceType,
    /// The request (verb, namespace, name, subresource).
    pub request: &'a ResourceRequest,
    /// Who writes.
    pub user: &'a User,
    /// The object's name.
    pub name: &'a str,
    /// Create or update.
    pub operation: Operation,
    /// The stored object an update replaces (`None` on create).
    pub old: Option<&'a Value>,
}

impl Attributes<'_> {
    /// The request's namespace.
    pub fn namespace(&self) -> Option<&str> {
        self.request.namespace.as_deref()
    }

    /// Whether the write is to the `status` subresource.
    pub fn is_status(&self) -> bool {
        self.request.subresource.as_deref() == Some("status")
    }
}

/// One admission plugin.
#[async_trait::async_trait]
pub trait Admission: Send + Sync + 'static {
    /// Refuses a request on `rt` before anything is read; every request (reads
    /// included) passes here once it is authorized.
    fn admit_request(&self, rt: &ResourceType, request: &ResourceRequest) -> Result<(), ApiError> {
        let _ = (rt, request);
        Ok(())
    }

    /// Admits (and may change) `object`, about to be written as `attributes` say.
    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        reads: &Reads<'_>,
    ) -> Result<(), ApiError>;
}

/// The admission plugins of a server, in the order they run.
#[derive(Clone, Default)]
pub struct AdmissionChain {
    plugins: Vec<Arc<dyn Admission>>,
}

impl AdmissionChain {
    /// Adds a plugin at the end of the chain.
    pub fn push(&mut self, plugin: Arc<dyn Admission>) {
        self.plugins.push(plugin);
    }

    /// Every plugin's [`Admission::admit_request`], in order.
    pub fn admit_request(
        &self,
        rt: &ResourceType,
        request: &ResourceRequest,
    ) -> Result<(), ApiError> {
        self.plugins
            .iter()
            .try_for_each(|p| p.admit_request(rt, request))
    }

    /// Every plugin's [`Admission::admit`], in order; the first refusal answers.
    pub async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        reads: &Reads<'_>,
    ) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            plugin.admit(attributes, object, reads).await?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for AdmissionChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionChain")
            .field("plugins", &self.plugins.len())
            .finish()
    }
}

/// What plugins (and authenticators, subresources) may read: the served types, the
/// watch caches (no store round trip) and the store itself.
#[derive(Clone, Copy)]
pub struct Reads<'a> {
    pub(crate) state: &'a crate::server::ServerState,
}

impl<'a> Reads<'a> {
    /// The type served at `group/version/plural`, if this server serves it.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.state.config.registry.get(group, version, plural)
    }

    /// The watch cache of `rt`.
    pub fn cache(&self, rt: &ResourceType) -> Result<Arc<WatchCache>, ApiError> {
        self.state.cache(rt)
    }

    /// One object from the watch cache of `rt` (which may be a moment behind the store).
    pub fn cached(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<CachedObject>> {
        self.state.cache(rt).ok()?.get(namespace, name)
    }

    /// Whether the server's authorizers let `user` make `request` too: a plugin asking
    /// about a second permission a write needs (a Plan created with its gate's decision
    /// needs `update plans/status` besides `create plans`).
    pub fn may(&self, user: &User, request: &ResourceRequest) -> bool {
        self.state
            .authorize(
                user,
                &crate::request::RequestInfo::Resource(request.clone()),
            )
            .is_ok()
    }

    /// The store.
    pub fn store(&self) -> &'a dyn Store {
        self.state.store.as_ref()
    }
}
