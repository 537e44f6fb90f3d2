//! A Kubernetes-style API server: a generic object server (like kcp) over a
//! [`storage::Store`] with etcd semantics. It knows the types it serves and their rules
//! only through what it is built with ([`server::ServerConfig`]), as k8s.io/apiserver
//! does: handlers → the type's [`strategy`] → [`admission`] → storage with the cacher.
//!
//! * [`registry`]: the served resource types (group/version/kind, plural, scope,
//!   schema, printer columns, subresources, strategy, index);
//! * [`strategy`]: a type's own validation and immutability;
//! * [`admission`]: the plugins every write passes, and what they may read;
//! * [`request`]: what a request is about, parsed like kube-apiserver does;
//! * [`auth`]: bearer tokens, authenticator and authorizer plugins, group-based
//!   authorization;
//! * [`limits`]: the largest request body and object, the deepest nesting;
//! * [`status`]: every HTTP error as a Kubernetes `Status`;
//! * [`storage`]: the store trait and its etcd and embedded backends;
//! * [`standin_cluster`]: the common Kubernetes kinds, API-only, for `--standin-cluster`.
//!
//! The design (following one request, watch caches, fencing): `docs/ARCHITECTURE.md`.

pub mod admission;
pub mod apiextensions;
pub mod auth;
pub mod limits;
pub mod object_meta;
pub mod openapi;
pub mod patch;
pub mod registry;
pub mod request;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod standin_cluster;
pub mod status;
pub mod storage;
pub mod strategy;
pub mod table;
#[cfg(test)]
mod testing;
pub mod tls;
pub mod watch_cache;
