//! An API server in the test process over a real store (the embedded one in a temporary
//! directory, or a private throwaway etcd), driven through its router, and `/metrics`.

#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use outpost_apiserver::auth::{TokenFile, User};
use outpost_apiserver::server::ApiServer;
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, EtcdStore, Store};
use outpost_kinds::{ADMINS, VIEWERS};
use outpost_testing::ThrowawayEtcd;
use serde_json::Value;
use tower::ServiceExt as _;

/// The admin's bearer token.
pub const ADMIN: &str = "admin-token";
/// A viewer's.
pub const VIEWER: &str = "viewer-token";
/// A user in no group: authenticated, allowed nothing.
pub const NOBODY: &str = "nobody-token";

/// A store and whatever keeps it alive.
pub struct TestStore {
    pub store: Arc<dyn Store>,
    _keep: Box<dyn std::any::Any + Send + Sync>,
}

impl TestStore {
    /// The embedded store in a fresh temporary directory.
    pub async fn embedded() -> TestStore {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .expect("the embedded store opens");
        TestStore {
            store: Arc::new(store),
            _keep: Box::new(dir),
        }
    }

    /// A private etcd: tests count what the server reads, so they share it with nobody.
    pub async fn etcd() -> TestStore {
        let etcd = ThrowawayEtcd::start()
            .await
            .expect("etcd starts (run `./x deps` to install it)");
        TestStore {
            store: Arc::new(
                EtcdStore::connect(&[etcd.endpoint().to_owned()])
                    .await
                    .expect("etcd answers"),
            ),
            _keep: Box::new(etcd),
        }
    }

    /// Writes `object` (JSON with `kind`, `metadata.name`, `metadata.namespace`) under
    /// its key, as the server would store it.
    pub async fn put(&self, plural: &str, object: &Value) {
        let meta = &object["metadata"];
        let key = format!(
            "/registry/outpost.dev/{plural}/{}/{}",
            meta["namespace"].as_str().expect("a namespace"),
            meta["name"].as_str().expect("a name")
        );
        self.store
            .create(&key, serde_json::to_vec(object).expect("JSON").into())
            .await
            .expect("the store takes the object");
    }

    /// The server over this store, with the [`ADMIN`], [`VIEWER`] and [`NOBODY`] tokens.
    pub async fn server(&self) -> ApiServer {
        server_over(self.store.clone()).await
    }
}

/// The server over `store`, with the [`ADMIN`], [`VIEWER`] and [`NOBODY`] tokens.
pub async fn server_over(store: Arc<dyn Store>) -> ApiServer {
    let mut tokens = TokenFile::default();
    for (token, name, groups) in [
        (ADMIN, "admin", vec![ADMINS.to_owned()]),
        (VIEWER, "viewer", vec![VIEWERS.to_owned()]),
        (NOBODY, "nobody", vec![]),
    ] {
        tokens.insert(
            token,
            User {
                name: name.into(),
                uid: name.into(),
                groups,
            },
        );
    }
    ApiServer::new(store, outpost_kinds::server_config(tokens))
        .await
        .expect("the server loads its caches")
}

/// Sends `request` through the server's routes.
pub async fn send(server: &ApiServer, request: Request<Body>) -> Response<Body> {
    server
        .router()
        .oneshot(request)
        .await
        .expect("the router is infallible")
}

/// `GET path` with a bearer token: status and body.
pub async fn get(server: &ApiServer, token: &str, path: &str) -> (StatusCode, String) {
    let request = Request::get(path)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .expect("a valid request");
    let response = send(server, request).await;
    let status = response.status();
    let body = response.into_body().collect().await.expect("a body");
    (
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    )
}

/// The value of the `/metrics` line `series` (name and labels as printed), 0 if absent.
pub async fn metric(server: &ApiServer, series: &str) -> u64 {
    let (status, text) = get(server, ADMIN, "/metrics").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |n| n.parse().expect("a count"))
}
