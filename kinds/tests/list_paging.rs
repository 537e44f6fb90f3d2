//! Lists the server answers from the store (a continue token, or `resourceVersionMatch=
//! Exact`) grow their page size while the selector drops most objects, as
//! kube-apiserver's etcd3 store does: a selective list over many objects takes O(log n)
//! store reads, not one per `limit` objects. Counted on both stores through `/metrics`
//! (`apiserver_store_request_duration_seconds_count{operation="list"}`).

mod server_support;

use futures::{StreamExt as _, TryStreamExt as _};
use http::StatusCode;
use outpost_apiserver::server::ApiServer;
use serde_json::{Value, json};
use server_support::{ADMIN, TestStore, get, metric};

/// Policies in the namespace; the selector picks two of them.
const OBJECTS: usize = 2_000;
const POLICIES: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/policies";
const STORE_LISTS: &str = "apiserver_store_request_duration_seconds_count{operation=\"list\"}";

/// `OBJECTS` policies of which `picked` carry `pick=yes`, written straight to the store
/// (through the API they would take minutes per run).
async fn policies(store: &TestStore, picked: &[usize]) {
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let mut labels = json!({"n": i.to_string()});
            if picked.contains(&i) {
                labels["pick"] = json!("yes");
            }
            let object = json!({
                "apiVersion": "outpost.dev/v1alpha1",
                "kind": "Policy",
                "metadata": {"name": format!("p-{i:05}"), "namespace": "default", "labels": labels},
                "spec": {"inputs": ["terraform"], "module": "package outpost.p\n"},
            });
            async move {
                store.put("policies", &object).await;
                Ok::<_, ()>(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await
        .expect("infallible");
}

async fn get_json(server: &ApiServer, path: &str) -> Value {
    let (status, body) = get(server, ADMIN, path).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

/// Store list operations so far, as `/metrics` reports them.
async fn store_lists(server: &ApiServer) -> u64 {
    metric(server, STORE_LISTS).await
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("a name"))
        .collect()
}

/// The most store reads a list over `objects` keys may take when the page starts at
/// `limit` and doubles: `ceil(log2(objects / limit)) + 1`.
fn logarithmic_bound(objects: usize, limit: usize) -> u64 {
    let mut reads = 1;
    let mut read = limit;
    let mut page = limit;
    while read < objects {
        page *= 2;
        read += page;
        reads += 1;
    }
    reads
}

async fn selective_list_grows_its_pages(store: TestStore, backend: &str) {
    // Two picked policies: one in the middle and the last one.
    let (middle, last) = (OBJECTS / 2, OBJECTS - 1);
    policies(&store, &[middle, last]).await;
    let server = store.server().await;
    let revision = store.store.current_revision().await.unwrap();
    let selective = format!(
        "{POLICIES}?labelSelector=pick%3Dyes&limit=1&resourceVersion={revision}&resourceVersionMatch=Exact"
    );

    // The first page (an exact revision: from the store) finds the middle one after
    // reading half the keys, and gives a continue token.
    let before = store_lists(&server).await;
    let first = get_json(&server, &selective).await;
    let first_reads = store_lists(&server).await - before;
    assert_eq!(names(&first), [format!("p-{middle:05}")]);
    assert_eq!(first["metadata"]["resourceVersion"], revision.to_string());
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("a continue token: one more policy matches");

    // The continue page reads the rest, from the store at the same revision.
    let before = store_lists(&server).await;
    let next = get_json(
        &server,
        &format!("{POLICIES}?labelSelector=pick%3Dyes&limit=1&continue={token}"),
    )
    .await;
    let next_reads = store_lists(&server).await - before;
    assert_eq!(names(&next), [format!("p-{last:05}")]);
    assert!(
        next["metadata"].get("continue").is_none(),
        "nothing follows the last policy: {next}"
    );

    let bound = logarithmic_bound(OBJECTS / 2, 1);
    println!(
        "{backend}: a selective list (limit=1, 2 of {OBJECTS} policies match) took {first_reads} + {next_reads} store reads; one read per object would be {} + {}",
        middle + 1,
        last - middle
    );
    assert!(
        first_reads <= bound && next_reads <= bound,
        "{first_reads} and {next_reads} store reads for {} keys each, more than ceil(log2) + 1 = {bound}",
        OBJECTS / 2
    );

    // Growing pages change nothing of what a list returns: paging through every policy
    // 300 at a time (each page fills at once, one read each) yields each exactly once.
    let mut seen = Vec::new();
    let mut path =
        format!("{POLICIES}?limit=300&resourceVersion={revision}&resourceVersionMatch=Exact");
    let before = store_lists(&server).await;
    loop {
        let page = get_json(&server, &path).await;
        seen.extend(names(&page).into_iter().map(str::to_owned));
        match page["metadata"]["continue"].as_str() {
            Some(token) => path = format!("{POLICIES}?limit=300&continue={token}"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..OBJECTS).map(|i| format!("p-{i:05}")).collect();
    assert_eq!(seen, expected);
    assert_eq!(
        store_lists(&server).await - before,
        OBJECTS.div_ceil(300) as u64,
        "pages that fill at once read the store once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_selective_list_grows_its_pages() {
    selective_list_grows_its_pages(TestStore::embedded().await, "embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_selective_list_grows_its_pages() {
    selective_list_grows_its_pages(TestStore::etcd().await, "etcd").await;
}

/// A list is sent as it is written, in chunks (kube-apiserver's streaming list encoding,
/// KEP-5116), with its length announced before the first (hyper sends it as the
/// `Content-Length`), from the cache and from the store alike; the chunks make the
/// whole list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_is_sent_in_chunks_of_its_announced_length() {
    let store = TestStore::embedded().await;
    policies(&store, &[]).await;
    let server = store.server().await;
    let revision = store.store.current_revision().await.unwrap();
    for path in [
        POLICIES.to_owned(),
        format!("{POLICIES}?resourceVersion=0"),
        format!("{POLICIES}?resourceVersion={revision}&resourceVersionMatch=Exact"),
    ] {
        let request = http::Request::get(&path)
            .header("authorization", format!("Bearer {ADMIN}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let response = server_support::send(&server, request).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let mut body = response.into_body();
        let announced = http_body::Body::size_hint(&body)
            .exact()
            .expect("a list's length is known before it is sent");
        let mut sent = Vec::new();
        let mut chunks = 0;
        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
            sent.extend_from_slice(&frame.unwrap().into_data().unwrap());
            chunks += 1;
        }
        assert_eq!(sent.len() as u64, announced, "{path}");
        assert!(chunks > 1, "{path}: {} bytes in one chunk", sent.len());
        let list: Value = serde_json::from_slice(&sent).expect("JSON");
        let expected: Vec<String> = (0..OBJECTS).map(|i| format!("p-{i:05}")).collect();
        assert_eq!(names(&list), expected, "{path}");
        assert_eq!(list["kind"], "PolicyList", "{path}");
        assert_eq!(list["metadata"]["resourceVersion"], revision.to_string());
    }
}

const POLICY_KEYS: &str = "/registry/outpost.dev/policies/default/";

/// Every page of a paged list through `first`'s continue tokens: the names, and the
/// revision each page was read at.
async fn rest_of(server: &ApiServer, first: &Value) -> (Vec<String>, Vec<String>) {
    let mut names = Vec::new();
    let mut revisions = Vec::new();
    let mut page = first.clone();
    while let Some(token) = page["metadata"]["continue"].as_str() {
        page = get_json(server, &format!("{POLICIES}?limit=300&continue={token}")).await;
        names.extend(owned_names(&page));
        revisions.push(
            page["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    (names, revisions)
}

fn owned_names(list: &Value) -> Vec<String> {
    names(list).into_iter().map(str::to_owned).collect()
}

/// A consistent list's continue pages are read from the objects the cache kept at its
/// first page's revision, not from the store: the list as it was then though the store
/// changed since (a policy deleted, one created, one updated). Once the cache no longer
/// keeps them (more lists than it keeps snapshots of), from the store: the same answer.
async fn continue_pages_come_from_the_caches_snapshot(store: TestStore, backend: &str) {
    use outpost_apiserver::watch_cache::snapshots::KEPT;
    policies(&store, &[]).await;
    let server = store.server().await;
    let first = get_json(&server, &format!("{POLICIES}?limit=300")).await;
    let revision = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(names(&first).len(), 300);

    // After the snapshot: p-01500 deleted, p-99999 created, p-00700 updated.
    store
        .store
        .delete(&format!("{POLICY_KEYS}p-01500"), None)
        .await
        .unwrap();
    let mut created = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "p-99999", "namespace": "default"},
        "spec": {"inputs": ["terraform"], "module": "package outpost.p\n"},
    });
    store.put("policies", &created).await;
    let key = format!("{POLICY_KEYS}p-00700");
    let old = store.store.get(&key).await.unwrap().unwrap();
    created["metadata"]["name"] = json!("p-00700");
    created["metadata"]["labels"] = json!({"n": "changed"});
    store
        .store
        .update(
            &key,
            serde_json::to_vec(&created).unwrap().into(),
            old.mod_revision,
        )
        .await
        .unwrap();

    let expected: Vec<String> = (300..OBJECTS).map(|i| format!("p-{i:05}")).collect();
    let before = store_lists(&server).await;
    let (rest, revisions) = rest_of(&server, &first).await;
    assert_eq!(
        store_lists(&server).await - before,
        0,
        "{backend}: pages from the cache"
    );
    assert_eq!(
        rest, expected,
        "{backend}: the list as it was at {revision}"
    );
    assert!(revisions.iter().all(|r| *r == revision), "{revisions:?}");

    // `KEPT` newer lists (at newer revisions: a write before each) push the first one's
    // snapshot out: its next pages are read from the store, with the same answer.
    for i in 0..KEPT {
        let mut another = created.clone();
        another["metadata"] = json!({"name": format!("q-{i}"), "namespace": "default"});
        store.put("policies", &another).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let newer = get_json(&server, &format!("{POLICIES}?limit=300")).await;
        assert_ne!(newer["metadata"]["resourceVersion"], revision.as_str());
    }
    let before = store_lists(&server).await;
    let (rest, revisions) = rest_of(&server, &first).await;
    assert!(
        store_lists(&server).await - before > 0,
        "{backend}: pages from the store"
    );
    assert_eq!(
        rest, expected,
        "{backend}: the list as it was at {revision}, from the store"
    );
    assert!(revisions.iter().all(|r| *r == revision), "{revisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_continue_pages_come_from_the_caches_snapshot() {
    continue_pages_come_from_the_caches_snapshot(TestStore::embedded().await, "embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_continue_pages_come_from_the_caches_snapshot() {
    continue_pages_come_from_the_caches_snapshot(TestStore::etcd().await, "etcd").await;
}
