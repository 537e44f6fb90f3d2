use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::*;
use crate::selectors::Selectable as _;
use crate::storage::{EmbeddedOptions, EmbeddedStore, Store};

const WIDGETS: &str = "/registry/example.com/widgets/shop/";

fn widget(name: &str, tenant: &str) -> Bytes {
    serde_json::to_vec(&json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "shop",
                     "labels": {crate::testing::TENANT_LABEL: tenant}},
        "spec": {"tenant": tenant},
    }))
    .unwrap()
    .into()
}

async fn started() -> (tempfile::TempDir, Arc<dyn Store>, CacheSet) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .unwrap(),
    );
    let caches = CacheSet::start(store.clone(), &crate::testing::test_registry(), 1_000)
        .await
        .unwrap();
    (dir, store, caches)
}

fn widgets(caches: &CacheSet) -> Arc<WatchCache> {
    caches
        .cache("example.com", "v1", "widgets")
        .expect("widgets are served")
}

async fn next(live: &mut LiveEvents) -> Arc<CachedEvent> {
    tokio::time::timeout(Duration::from_secs(10), live.recv())
        .await
        .expect("an event in time")
        .expect("the watcher goes on")
}

/// Applies a store change creating widget `name` of `tenant` at `revision`.
fn put(cache: &WatchCache, name: &str, tenant: &str, revision: Revision) {
    cache.apply(WatchEvent::Put {
        kv: KeyValue {
            key: format!("{WIDGETS}{name}"),
            value: widget(name, tenant),
            create_revision: revision,
            mod_revision: revision,
            version: 1,
        },
        prev: None,
    });
}

#[tokio::test]
async fn a_watcher_filed_under_a_tenant_gets_only_that_tenants_changes() {
    let (_dir, store, caches) = started().await;
    let cache = widgets(&caches);
    let from = cache.revision();
    let mut of_a = cache.subscribe(from, Some("a")).unwrap().live;
    let mut every = cache.subscribe(from, None).unwrap().live;
    store
        .create(&format!("{WIDGETS}p1"), widget("p1", "b"))
        .await
        .unwrap();
    let p2 = store
        .create(&format!("{WIDGETS}p2"), widget("p2", "a"))
        .await
        .unwrap();
    let event = next(&mut of_a).await;
    assert_eq!(event.object.field("metadata.name"), "p2");
    assert_eq!(event.event_type(), EventType::Added);
    assert_eq!(next(&mut every).await.object.field("metadata.name"), "p1");
    assert_eq!(next(&mut every).await.object.field("metadata.name"), "p2");
    // Moving p2 to tenant b still reaches a's watcher (it must see it leave).
    store
        .update(&format!("{WIDGETS}p2"), widget("p2", "b"), p2.mod_revision)
        .await
        .unwrap();
    let moved = next(&mut of_a).await;
    assert_eq!(moved.prev.as_ref().unwrap().field("spec.tenant"), "a");
    assert_eq!(moved.object.field("spec.tenant"), "b");
    let stats = cache.stats();
    assert_eq!((stats.indexed_watchers, stats.other_watchers), (1, 1));
    drop(of_a);
    assert_eq!(
        cache.stats().indexed_watchers,
        0,
        "a dropped watcher is filed out"
    );
}

#[tokio::test]
async fn lists_by_tenant_are_consistent_with_the_store() {
    let (_dir, store, caches) = started().await;
    for (name, tenant) in [("p1", "a"), ("p2", "b"), ("p3", "a")] {
        store
            .create(&format!("{WIDGETS}{name}"), widget(name, tenant))
            .await
            .unwrap();
    }
    // A write to another type moves the store on; the caches follow it too.
    let last = store
        .create(
            "/registry/example.com/tenants/a",
            Bytes::from_static(b"{\"metadata\":{\"name\":\"a\"}}"),
        )
        .await
        .unwrap();
    assert!(
        caches
            .progress
            .wait_for(last.mod_revision, Duration::from_secs(10))
            .await
    );
    let cache = widgets(&caches);
    let snapshot = cache.list(Some("shop"), Some("a"), |_| true);
    let names: Vec<_> = snapshot
        .objects
        .iter()
        .map(|o| o.field("metadata.name").into_owned())
        .collect();
    assert_eq!(names, ["p1", "p3"]);
    assert_eq!(snapshot.revision, last.mod_revision);
    assert_eq!(
        cache.list(Some("other"), Some("a"), |_| true).objects.len(),
        0
    );
    assert_eq!(cache.list(None, None, |_| true).objects.len(), 3);
    let p1 = cache.get(Some("shop"), "p1").unwrap();
    assert_eq!(
        p1.value().unwrap()["metadata"]["resourceVersion"],
        p1.revision.to_string()
    );
}

#[tokio::test]
async fn a_watcher_that_falls_behind_catches_up_from_the_window_without_a_gap() {
    let rt = crate::testing::test_registry()
        .get("example.com", "v1", "widgets")
        .unwrap();
    let progress = Arc::new(Progress::for_tests());
    let cache = WatchCache::new(rt, QUEUE * 2, progress);
    let mut slow = cache.subscribe(0, Some("a")).unwrap().live;
    let changes = QUEUE + 10;
    for i in 1..=changes {
        put(&cache, &format!("p{i}"), "a", i as Revision);
    }
    let mut last = 0;
    let stopped = loop {
        match slow.recv().await {
            Ok(event) => {
                assert_eq!(event.revision, last + 1, "in order, without a gap");
                last = event.revision;
            }
            Err(stopped) => break stopped,
        }
    };
    assert_eq!(stopped, Stopped::Lagged);
    assert_eq!(
        last, QUEUE as Revision,
        "the queue held exactly QUEUE changes"
    );
    let caught_up = cache.subscribe(last, Some("a")).unwrap();
    let revisions: Vec<Revision> = caught_up.backlog.iter().map(|e| e.revision).collect();
    assert_eq!(
        revisions,
        ((last + 1)..=changes as Revision).collect::<Vec<_>>()
    );
    // Older than the window: the client must relist.
    let small = WatchCache::new(cache.resource_type().clone(), 16, cache.progress().clone());
    for i in 1..=20 {
        put(&small, &format!("q{i}"), "a", i);
    }
    assert_eq!(small.subscribe(1, None).err().unwrap().oldest, 4);
}

#[tokio::test]
async fn a_quiet_watcher_drains_to_the_caches_progress_and_resumes_from_it_after_the_window_moved()
{
    let rt = crate::testing::test_registry()
        .get("example.com", "v1", "widgets")
        .unwrap();
    let cache = WatchCache::new(rt, 16, Arc::new(Progress::for_tests()));
    let mut quiet = cache.subscribe(0, Some("a")).unwrap().live;
    put(&cache, "mine", "a", 1);
    // Tenant b's changes push the window past the quiet watcher's own last change.
    for revision in 2..=40 {
        put(&cache, &format!("other{revision}"), "b", revision);
    }
    assert!(cache.subscribe(1, Some("a")).is_err(), "1 left the window");
    let (queued, progress) = quiet.drain();
    let queued: Vec<Revision> = queued.iter().map(|e| e.revision).collect();
    assert_eq!(queued, [1], "its own change first, nothing of tenant b");
    assert_eq!(progress, Some(40), "then the cache's progress");
    // Resuming from that progress (what its BOOKMARK carried) needs no relist.
    let resumed = cache.subscribe(40, Some("a")).expect("40 is in the window");
    assert!(resumed.backlog.is_empty());
    // Nothing queued: the progress alone.
    put(&cache, "other41", "b", 41);
    let (queued, progress) = quiet.drain();
    assert!(queued.is_empty());
    assert_eq!(progress, Some(41));
}

#[tokio::test]
async fn a_watcher_that_lagged_gets_no_progress_from_drain() {
    let rt = crate::testing::test_registry()
        .get("example.com", "v1", "widgets")
        .unwrap();
    let cache = WatchCache::new(rt, QUEUE * 2, Arc::new(Progress::for_tests()));
    let mut slow = cache.subscribe(0, Some("a")).unwrap().live;
    for revision in 1..=(QUEUE as Revision + 1) {
        put(&cache, &format!("p{revision}"), "a", revision);
    }
    let (queued, progress) = slow.drain();
    assert_eq!(queued.len(), QUEUE, "what it had queued");
    assert_eq!(
        progress, None,
        "it lagged: its bookmark stays at its last change"
    );
}

#[tokio::test]
async fn an_events_line_is_the_cached_json_between_head_and_tail_not_a_copy() {
    let (_dir, _store, caches) = started().await;
    let cache = widgets(&caches);
    let (_, mut live) = cache.list_and_subscribe(Some("shop"), None, |_| true);
    put(&cache, "a", "t1", 2);
    let event = next(&mut live).await;
    let chunks: Vec<Bytes> = event.line(EventType::Added).chunks().collect();
    assert_eq!(chunks.len(), 3);
    // The object's chunk is the cache's own bytes, shared, not copied.
    assert_eq!(chunks[1].as_ptr(), event.object.json().as_ptr());
    let line: Vec<u8> = chunks.concat();
    assert_eq!(line.last(), Some(&b'\n'));
    let decoded: Value = serde_json::from_slice(&line).expect("one JSON object per line");
    assert_eq!(decoded["type"], "ADDED");
    assert_eq!(decoded["object"]["metadata"]["name"], "a");
    assert_eq!(decoded["object"]["metadata"]["resourceVersion"], "2");
    for (event_type, name) in [
        (EventType::Modified, "MODIFIED"),
        (EventType::Deleted, "DELETED"),
    ] {
        let line: Vec<u8> = event.line(event_type).chunks().collect::<Vec<_>>().concat();
        let decoded: Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(decoded["type"], name);
    }
    let whole = encode_line("BOOKMARK", &json!({"metadata": {"resourceVersion": "2"}}));
    let chunks: Vec<Bytes> = whole.chunks().collect();
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].ends_with(b"}\n"));
}
