//! A `PATCH` (and a Plan's approval) starts from the watch cache's copy of the object, as
//! kube-apiserver's `GuaranteedUpdate` starts from the cacher's: no store read when the
//! cache is current. A copy that is behind is never trusted for more than a
//! compare-and-swap write that lands: a lost race, a no-op or a refusal computed from it is
//! tried again from the store. Counted on both stores through `/metrics`; a cache held
//! behind the store by [`HeldFeed`], a store that forwards everything and delays its watch
//! events while a test holds them. A patch after the server's own write of the object reads
//! the store while the cache is behind that write, rather than lose a compare-and-swap.

mod server_support;

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt as _;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use outpost_api::{PlanDiff, PlanPhase, PlanStatus};
use outpost_apiserver::server::ApiServer;
use outpost_apiserver::storage::{
    KeyValue, ListOptions, ListPage, Revision, Store, StoreError, WatchStream,
};
use serde_json::{Value, json};
use server_support::{ADMIN, TestStore, get, metric, send};

const STORE_GETS: &str = "apiserver_store_request_duration_seconds_count{operation=\"get\"}";
const REFUSED_POLICY_UPDATES: &str =
    "apiserver_store_writes_total{operation=\"update\",resource=\"policies\",result=\"refused\"}";
const POLICY_UPDATES: &str =
    "apiserver_store_writes_total{operation=\"update\",resource=\"policies\",result=\"ok\"}";
const POLICIES: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/policies";
const POLICY_KEY: &str = "/registry/outpost.dev/policies/default/p";
const PLANS: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/plans";
const PLAN_KEY: &str = "/registry/outpost.dev/plans/default/plan-1";

/// A store whose watch events wait while the test holds them, so the server's watch cache
/// stays behind the store for as long as the test needs.
struct HeldFeed {
    inner: Arc<dyn Store>,
    held: tokio::sync::watch::Sender<bool>,
}

impl HeldFeed {
    fn over(inner: Arc<dyn Store>) -> Arc<HeldFeed> {
        Arc::new(HeldFeed {
            inner,
            held: tokio::sync::watch::channel(false).0,
        })
    }

    fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }
}

#[async_trait]
impl Store for HeldFeed {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError> {
        self.inner.list(prefix, options).await
    }
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError> {
        self.inner.create(key, value).await
    }
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError> {
        self.inner.update(key, value, expected).await
    }
    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError> {
        self.inner.delete(key, expected).await
    }
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        let events = self.inner.watch(prefix, after).await?;
        let held = self.held.subscribe();
        Ok(Box::pin(events.then(move |event| {
            let mut held = held.clone();
            async move {
                let _ = held.wait_for(|held| !*held).await;
                event
            }
        })))
    }
    async fn current_revision(&self) -> Result<Revision, StoreError> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.inner.compact(revision).await
    }
    async fn holds_revision(&self, revision: Revision) -> Result<bool, StoreError> {
        self.inner.holds_revision(revision).await
    }
}

/// The server over `feed`, once its watch cache has every object written so far (a
/// consistent list waits for that).
async fn server(feed: &Arc<HeldFeed>) -> ApiServer {
    let server = server_support::server_over(feed.clone()).await;
    for path in [POLICIES, PLANS] {
        let (status, body) = get(&server, ADMIN, path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    server
}

async fn request(
    server: &ApiServer,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let request = Request::patch(path)
        .header("authorization", format!("Bearer {ADMIN}"))
        .header("content-type", content_type)
        .body(Body::from(body.to_string()))
        .expect("a valid request");
    let response = send(server, request).await;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn label(server: &ApiServer, name: &str, value: &str) -> (StatusCode, Value) {
    let patch = json!({"metadata": {"labels": {name: value}}});
    request(
        server,
        &format!("{POLICIES}/p"),
        "application/merge-patch+json",
        &patch,
    )
    .await
}

/// Writes `change` into the stored object at `key` behind the server's back.
async fn change_in_store(store: &dyn Store, key: &str, change: impl FnOnce(&mut Value)) {
    let kv = store.get(key).await.expect("store").expect("stored");
    let mut object: Value = serde_json::from_slice(&kv.value).expect("JSON");
    change(&mut object);
    store
        .update(key, object.to_string().into(), kv.mod_revision)
        .await
        .expect("the store takes the change");
}

async fn stored(store: &dyn Store, key: &str) -> Value {
    let kv = store.get(key).await.expect("store").expect("stored");
    serde_json::from_slice(&kv.value).expect("JSON")
}

async fn put_policy(store: &TestStore) {
    store
        .put(
            "policies",
            &json!({
                "apiVersion": "outpost.dev/v1alpha1",
                "kind": "Policy",
                "metadata": {"name": "p", "namespace": "default", "labels": {"a": "0"}},
                "spec": {"inputs": ["terraform"], "module": "package outpost.p\n"},
            }),
        )
        .await;
}

async fn a_patch_of_a_current_copy_reads_nothing(store: TestStore) {
    put_policy(&store).await;
    let feed = HeldFeed::over(store.store.clone());
    let server = server(&feed).await;
    let gets = metric(&server, STORE_GETS).await;
    let (status, body) = label(&server, "a", "1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(metric(&server, STORE_GETS).await, gets, "no store read");
    assert_eq!(
        stored(store.store.as_ref(), POLICY_KEY).await["metadata"]["labels"]["a"],
        "1"
    );
}

async fn a_patch_of_a_copy_behind_the_store_is_made_again_from_the_store(store: TestStore) {
    put_policy(&store).await;
    let feed = HeldFeed::over(store.store.clone());
    let server = server(&feed).await;
    feed.hold(true);
    change_in_store(store.store.as_ref(), POLICY_KEY, |p| {
        p["metadata"]["labels"]["b"] = json!("2");
    })
    .await;
    // The cache's copy has no `b`: the write computed from it loses its compare-and-swap,
    // and the patch is made again on what the store holds.
    let (status, body) = label(&server, "a", "1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    let labels = &stored(store.store.as_ref(), POLICY_KEY).await["metadata"]["labels"];
    assert_eq!(*labels, json!({"a": "1", "b": "2"}));
    feed.hold(false);
}

async fn a_no_op_on_a_copy_behind_the_store_is_checked_against_the_store(store: TestStore) {
    put_policy(&store).await;
    let feed = HeldFeed::over(store.store.clone());
    let server = server(&feed).await;
    feed.hold(true);
    change_in_store(store.store.as_ref(), POLICY_KEY, |p| {
        p["metadata"]["labels"]["a"] = json!("2");
    })
    .await;
    // `a: "0"` changes nothing in the cache's copy, but the store has `a: "2"`.
    let (status, body) = label(&server, "a", "0").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["labels"]["a"], "0");
    let stored = stored(store.store.as_ref(), POLICY_KEY).await;
    assert_eq!(stored["metadata"]["labels"]["a"], "0", "{stored}");
    feed.hold(false);
}

async fn a_patch_after_the_servers_own_write_reads_the_store_not_the_copy_before_it(
    store: TestStore,
) {
    put_policy(&store).await;
    let feed = HeldFeed::over(store.store.clone());
    let server = server(&feed).await;
    feed.hold(true);
    // Two writes in a row, as a controller writes a finalizer and then a status: the
    // cache has neither (its feed is held), and the second must not start from its copy.
    let (status, body) = label(&server, "a", "1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let gets = metric(&server, STORE_GETS).await;
    let (refused, written) = (
        metric(&server, REFUSED_POLICY_UPDATES).await,
        metric(&server, POLICY_UPDATES).await,
    );
    let (status, body) = label(&server, "b", "2").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        metric(&server, REFUSED_POLICY_UPDATES).await,
        refused,
        "no write computed from the copy before the server's own write"
    );
    assert_eq!(metric(&server, POLICY_UPDATES).await, written + 1);
    assert_eq!(
        metric(&server, STORE_GETS).await,
        gets + 1,
        "one store read"
    );
    let labels = &stored(store.store.as_ref(), POLICY_KEY).await["metadata"]["labels"];
    assert_eq!(*labels, json!({"a": "1", "b": "2"}));
    // Once the cache has the writes, a patch starts from its copy again.
    feed.hold(false);
    let (status, body) = get(&server, ADMIN, POLICIES).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let gets = metric(&server, STORE_GETS).await;
    let (status, body) = label(&server, "c", "3").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(metric(&server, STORE_GETS).await, gets, "no store read");
    assert_eq!(metric(&server, REFUSED_POLICY_UPDATES).await, refused);
}

fn plan(phase: PlanPhase, diff: Option<PlanDiff>) -> Value {
    let status = PlanStatus {
        phase: Some(phase),
        diff,
        ..PlanStatus::default()
    };
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {"name": "plan-1", "namespace": "default"},
        "spec": {"install": "shop", "operation": "deploy", "contentHash": "sha256:c"},
        "status": status,
    })
}

async fn approve(server: &ApiServer, hash: &str) -> (StatusCode, Value) {
    request(
        server,
        &format!("{PLANS}/plan-1/approval"),
        "application/merge-patch+json",
        &json!({"decision": "approve", "diffHash": hash}),
    )
    .await
}

async fn an_approval_of_a_current_copy_reads_nothing(store: TestStore) {
    let diff = PlanDiff::new("sha256:d".into(), 1, 0, 0);
    store
        .put("plans", &plan(PlanPhase::AwaitingApproval, Some(diff)))
        .await;
    let feed = HeldFeed::over(store.store.clone());
    let server = server(&feed).await;
    let gets = metric(&server, STORE_GETS).await;
    let (status, body) = approve(&server, "sha256:d").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(metric(&server, STORE_GETS).await, gets, "no store read");
    let stored = stored(store.store.as_ref(), PLAN_KEY).await;
    assert_eq!(stored["status"]["phase"], "Approved", "{stored}");
    assert_eq!(stored["status"]["approval"]["by"], "admin");
}

async fn an_approval_refused_on_a_copy_behind_the_store_is_decided_on_the_store(store: TestStore) {
    store.put("plans", &plan(PlanPhase::Planning, None)).await;
    let feed = HeldFeed::over(store.store.clone());
    let server = server(&feed).await;
    feed.hold(true);
    let diff = PlanDiff::new("sha256:d".into(), 1, 0, 0);
    change_in_store(store.store.as_ref(), PLAN_KEY, |p| {
        p["status"] = plan(PlanPhase::AwaitingApproval, Some(diff))["status"].clone();
    })
    .await;
    // The cache still says Planning, where there is nothing to decide; the store says
    // AwaitingApproval.
    let (status, body) = approve(&server, "sha256:d").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stored = stored(store.store.as_ref(), PLAN_KEY).await;
    assert_eq!(stored["status"]["phase"], "Approved", "{stored}");
    feed.hold(false);
    // And a real refusal stays one: the Plan is decided now.
    let (status, body) = approve(&server, "sha256:d").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

macro_rules! on_both_stores {
    ($($test:ident),* $(,)?) => {
        mod embedded {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::TestStore::embedded().await).await;
            })*
        }
        mod etcd {
            $(#[tokio::test]
            async fn $test() {
                super::$test(super::TestStore::etcd().await).await;
            })*
        }
    };
}

on_both_stores!(
    a_patch_of_a_current_copy_reads_nothing,
    a_patch_of_a_copy_behind_the_store_is_made_again_from_the_store,
    a_no_op_on_a_copy_behind_the_store_is_checked_against_the_store,
    a_patch_after_the_servers_own_write_reads_the_store_not_the_copy_before_it,
    an_approval_of_a_current_copy_reads_nothing,
    an_approval_refused_on_a_copy_behind_the_store_is_decided_on_the_store,
);
