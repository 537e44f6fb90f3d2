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

/// A finished job's JSON as a fleet writes them: the same keys, managers and labels, with
/// names, uids, timestamps and hashes of its own.
fn job(i: usize, phase: &str) -> Bytes {
    let hash = |salt: &str| {
        (0..8)
            .map(|k| {
                format!(
                    "{:08x}",
                    (i * 2_654_435_761 + k * 40_503) ^ (salt.len() * 97)
                )
            })
            .collect::<String>()
    };
    serde_json::to_vec(&json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {
            "name": format!("install-{i}-deploy-component-{}", i % 10),
            "namespace": "shop",
            "uid": format!("{:08x}-4f2c-{:04x}-9d1e-{:012x}", i * 7919, i % 65_536, i * 104_729),
            "labels": {crate::testing::TENANT_LABEL: format!("install-{i}"),
                       "example.com/component": format!("component-{}", i % 10)},
            "managedFields": [
                {"manager": "controllers", "operation": "Update", "apiVersion": "example.com/v1",
                 "time": format!("2026-11-29T02:{:02}:{:02}Z", i % 60, (i * 7) % 60),
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:example.com/component": {}}},
                              "f:spec": {"f:install": {}, "f:desiredState": {}, "f:hash": {}}}},
                {"manager": "runner", "operation": "Update", "apiVersion": "example.com/v1",
                 "time": format!("2026-11-29T02:{:02}:{:02}Z", (i + 1) % 60, (i * 11) % 60),
                 "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:phase": {}, "f:diff": {}, "f:finishedAt": {}}}},
            ],
        },
        "spec": {"tenant": format!("install-{i}"), "hash": hash("spec"),
                 "desiredState": {"kind": "ConfigMap", "metadata": {"name": format!("c{}", i % 10)},
                                  "data": {"version": "3", "install": format!("install-{i}")}}},
        "status": {"phase": phase, "finishedAt": format!("2026-11-29T02:{:02}:{:02}Z", i % 60, i % 59),
                   "diff": {"hash": hash("diff"), "summary": "1 to add, 0 to change, 0 to destroy"}},
    }))
    .unwrap()
    .into()
}

#[tokio::test]
async fn settled_objects_are_held_compressed_against_the_first_ones_and_served_as_written() {
    let mut rt = (*crate::testing::test_registry()
        .get("example.com", "v1", "widgets")
        .unwrap())
    .clone();
    rt.compressed = Some(crate::registry::Compressed::Settled {
        field: "status.phase".into(),
        values: vec!["Succeeded".into(), "Failed".into()],
    });
    let rt = Arc::new(rt);
    let cache = WatchCache::new(rt.clone(), 100_000, Arc::new(Progress::for_tests()));
    let mut every = cache.subscribe(0, None).unwrap().live;
    let kv = |i: usize, phase: &str, revision: Revision| KeyValue {
        key: format!("{WIDGETS}j{i}"),
        value: job(i, phase),
        create_revision: revision,
        mod_revision: revision,
        version: 1,
    };
    // What each object is served as: its stored JSON with its resourceVersion.
    let written = |kv: &KeyValue| CachedObject::from_store(&rt, kv).unwrap().json();
    let mut revision = 0;
    let mut expected = BTreeMap::new();
    for i in 0..200 {
        let phase = ["Running", "Succeeded", "Failed"][i % 3];
        revision += 1;
        let kv = kv(i, phase, revision);
        cache.apply(WatchEvent::Put {
            kv: kv.clone(),
            prev: None,
        });
        let event = next(&mut every).await;
        assert_eq!(event.object.json(), written(&kv), "the event of {i}");
        expected.insert(kv.key.clone(), (phase, written(&kv)));
    }
    let held = |cache: &WatchCache, expected: &BTreeMap<String, (&str, Bytes)>| {
        let listed = cache.list(None, None, |_| true).objects;
        assert_eq!(listed.len(), expected.len());
        let mut settled = (0, 0);
        for object in listed {
            let (phase, json) = &expected[&object.key];
            assert_eq!(object.json(), json, "{} served as written", object.key);
            assert_eq!(object.json_len(), json.len());
            assert_eq!(
                object.value().unwrap(),
                serde_json::from_slice::<Value>(json).unwrap()
            );
            let size = object.size();
            if *phase == "Running" {
                assert!(
                    size > json.len(),
                    "{} is not settled: held as it is",
                    object.key
                );
            } else {
                settled.0 += size;
                settled.1 += json.len();
            }
        }
        settled
    };
    let (settled_held, settled_json) = held(&cache, &expected);
    // The first 8 KiB of settled objects (a handful) are the dictionary, held as they
    // are; the rest, with their keys and texts, in under half their JSON (each has
    // ≈ 170 bytes of hashes and ids of its own: JSON ≈ 1.2 KiB, held ≈ 0.5 KiB).
    assert!(
        settled_held * 2 < settled_json,
        "settled objects held in {settled_held} bytes for {settled_json} of JSON"
    );
    let stats = cache.stats();
    let running: usize = cache
        .list(None, None, |o| o.field("status.phase") == "Running")
        .objects
        .iter()
        .map(|o| o.size())
        .sum();
    assert_eq!(
        stats.bytes,
        running + settled_held + DICTIONARY_BYTES,
        "the dictionary is counted once"
    );
    // A settled object that changes again (a label, a log) is held compressed again.
    revision += 1;
    let again = kv(1, "Succeeded", revision);
    let mut changed: Value = serde_json::from_slice(&again.value).unwrap();
    changed["metadata"]["labels"]["example.com/seen"] = json!("yes");
    let again = KeyValue {
        value: serde_json::to_vec(&changed).unwrap().into(),
        ..again
    };
    cache.apply(WatchEvent::Put {
        kv: again.clone(),
        prev: None,
    });
    assert_eq!(next(&mut every).await.object.json(), written(&again));
    let object = cache.get(Some("shop"), "j1").unwrap();
    assert_eq!(object.json(), written(&again));
    assert!(object.size() * 2 < object.json_len());
    expected.insert(again.key.clone(), ("Succeeded", written(&again)));
    // A reload (after a compaction) holds them the same way, with the same dictionary.
    let items: Vec<KeyValue> = (0..200)
        .map(|i| {
            if i == 1 {
                again.clone()
            } else {
                kv(
                    i,
                    ["Running", "Succeeded", "Failed"][i % 3],
                    i as Revision + 1,
                )
            }
        })
        .collect();
    cache.load(&items, revision);
    let (reloaded, _) = held(&cache, &expected);
    assert!(reloaded * 2 < settled_json, "{reloaded}");
}

/// An install's rendered stack as a fleet's are: one template, ≈ 20 KiB, with the
/// install's own names, ids and hashes in it.
fn stack(i: usize) -> Bytes {
    let install = format!("install-{i:05}");
    let resources: serde_json::Map<String, Value> = (0..45)
        .map(|r| {
            // What differs from one resource to the next (its policy's actions and
            // resources), the same in every install's stack.
            let text = |salt: u64| {
                (0..4)
                    .map(|k| {
                        format!(
                            "{:016x}",
                            (r as u64 * 31 + k + salt).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        )
                    })
                    .collect::<String>()
            };
            let properties = json!({
                "RoleName": format!("outpost-{install}-{r}"),
                "Policies": [{"PolicyName": text(1), "PolicyDocument": {"Statement": [
                    {"Effect": "Allow", "Action": [text(2)], "Resource": [text(3)]}]}}],
                "Tags": [{"Key": "outpost.dev/install", "Value": install}],
            });
            (
                format!("Role{r}"),
                json!({"Type": "AWS::IAM::Role", "Properties": properties}),
            )
        })
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": install, "namespace": "shop",
                     "uid": format!("{:08x}-4f2c-{:04x}-9d1e-{:012x}", i * 7919, i % 65_536, i * 104_729),
                     "labels": {crate::testing::TENANT_LABEL: install}},
        "spec": {"tenant": install, "digest": format!("{:064x}", i * 2_654_435_761),
                 "template": {"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources}},
    }))
    .unwrap()
    .into()
}

/// What a cache of `rt` holds of 60 objects made by `make`, after the first eight (the
/// dictionary's, held as they are): bytes held, bytes of JSON, and bytes of each JSON
/// compressed alone; every read checked to serve what was written, before and after a
/// reload.
async fn held_in(rt: &Arc<ResourceType>, make: fn(usize) -> Bytes) -> (usize, usize, usize) {
    let cache = WatchCache::new(rt.clone(), 100_000, Arc::new(Progress::for_tests()));
    let mut every = cache.subscribe(0, None).unwrap().live;
    let written = |kv: &KeyValue| CachedObject::from_store(rt, kv).unwrap().json();
    let items: Vec<KeyValue> = (0..60)
        .map(|i| KeyValue {
            key: format!("{WIDGETS}w{i:05}"),
            value: make(i),
            create_revision: i as Revision + 1,
            mod_revision: i as Revision + 1,
            version: 1,
        })
        .collect();
    for item in &items {
        cache.apply(WatchEvent::Put {
            kv: item.clone(),
            prev: None,
        });
        assert_eq!(
            next(&mut every).await.object.json(),
            written(item),
            "the event"
        );
    }
    let check = |cache: &WatchCache| -> (usize, usize, usize) {
        let listed = cache.list(None, None, |_| true).objects;
        assert_eq!(listed.len(), items.len());
        let (mut held, mut json, mut alone) = (0, 0, 0);
        for (object, item) in listed.iter().zip(&items) {
            let expected = written(item);
            assert_eq!(object.json(), expected, "{} served as written", object.key);
            assert_eq!(object.json_len(), expected.len());
            assert_eq!(
                object.value().unwrap(),
                serde_json::from_slice::<Value>(&expected).unwrap()
            );
            let name = object.key.rsplit('/').next().unwrap();
            let got = cache.get(Some("shop"), name).unwrap();
            assert_eq!(got.json(), expected);
            if item.mod_revision > 8 {
                held += object.size();
                json += expected.len();
                alone += lz4_flex::block::compress(&expected)
                    .len()
                    .min(expected.len());
            }
        }
        (held, json, alone)
    };
    let before = check(&cache);
    // A reload (after a compaction) serves them the same, and holds them compressed
    // against the same dictionary (its own objects now too).
    cache.load(&items, items.len() as Revision);
    let (held, json, alone) = check(&cache);
    assert_eq!((json, alone), (before.1, before.2), "reloaded");
    assert!(
        held <= before.0,
        "reloaded: {held} bytes held, {} before",
        before.0
    );
    before
}

#[tokio::test]
async fn a_type_compressing_all_holds_every_object_against_the_first_ones_and_serves_it_as_written()
{
    let plain = crate::testing::test_registry()
        .get("example.com", "v1", "widgets")
        .unwrap();
    let mut rt = (*plain).clone();
    rt.compressed = Some(crate::registry::Compressed::All);
    let rt = Arc::new(rt);
    // Rendered stacks (≈ 20 KiB, which a cache compresses alone when its type does not
    // compress) and small objects (≈ 1.2 KiB, the jobs above, not settled), each in a
    // cache of its own. Held: the JSON, the key and the texts (≈ 150 bytes).
    let running: fn(usize) -> Bytes = |i| job(i, "Running");
    for (what, make, fraction, against_alone) in [
        ("stacks", stack as fn(usize) -> Bytes, 5, 2),
        ("small", running, 2, 1),
    ] {
        let (held, json, alone) = held_in(&rt, make).await;
        // Against each other, a fraction of their JSON (stacks: ≈ 1.4 of 20 KiB) and
        // less than each compressed alone (stacks: ≈ 7 KiB).
        assert!(
            held * fraction < json,
            "{what}: {held} bytes held for {json} of JSON"
        );
        assert!(
            held * against_alone < alone,
            "{what}: {held} bytes held, {alone} compressed alone"
        );
        // A type that does not compress holds them as they are (stacks compressed alone).
        let (held, _, _) = held_in(&plain, make).await;
        assert!(
            held > alone,
            "{what}: {held} bytes held by a type that does not compress"
        );
    }
}

#[test]
fn an_object_this_server_wrote_past_the_caches_revision_is_left_to_the_store_until_the_cache_has_it()
 {
    let rt = crate::testing::test_registry()
        .get("example.com", "v1", "widgets")
        .expect("widgets are served");
    let cache = WatchCache::new(rt, 1_000, Arc::new(Progress::for_tests()));
    put(&cache, "w1", "a", 1);
    put(&cache, "w2", "a", 2);
    let current = |name: &str| cache.get_current(Some("shop"), name).map(|o| o.revision);
    assert_eq!((current("w1"), current("w2")), (Some(1), Some(2)));
    // The server wrote w1 at 3; the cache is still at 2, with w1 as of 1.
    cache.wrote(Some("shop"), "w1", 3);
    assert_eq!(
        current("w1"),
        None,
        "the copy before the server's own write"
    );
    assert_eq!(cache.get(Some("shop"), "w1").map(|o| o.revision), Some(1));
    assert_eq!(
        current("w2"),
        Some(2),
        "another object is served from the cache"
    );
    // A write the cache has reached leaves nothing behind.
    cache.wrote(Some("shop"), "w2", 2);
    assert_eq!(current("w2"), Some(2));
    put(&cache, "w1", "a", 3);
    assert_eq!(current("w1"), Some(3));
}
