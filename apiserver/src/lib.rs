//! Outpost's Kubernetes-style API server.
//!
//! For now this crate holds the [`storage`] layer: one [`storage::Store`] trait with
//! etcd semantics and two backends (etcd and an embedded, durable store), plus the
//! store benchmark. The HTTP server arrives with the API server issue.

pub mod storage;
