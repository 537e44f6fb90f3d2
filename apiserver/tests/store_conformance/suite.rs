use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use outpost_apiserver::storage::{
    ListOptions, Revision, Store, StoreError, WatchEvent, WatchStream,
};

use crate::support::Backend;

fn val(s: impl Into<String>) -> Bytes {
    Bytes::from(s.into())
}

/// Takes exactly `n` events from a watch, failing after a deadline.
async fn take(watch: &mut WatchStream, n: usize) -> Vec<WatchEvent> {
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        match tokio::time::timeout(Duration::from_secs(20), watch.next()).await {
            Ok(Some(Ok(event))) => events.push(event),
            Ok(Some(Err(err))) => panic!("watch failed after {} events: {err:?}", events.len()),
            Ok(None) => panic!("watch ended after {} of {n} events", events.len()),
            Err(_) => panic!(
                "watch delivered {} of {n} events before the deadline",
                events.len()
            ),
        }
    }
    events
}

/// Asserts that nothing more arrives for a short while.
async fn assert_quiet(watch: &mut WatchStream) {
    if let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(300), watch.next()).await {
        panic!("unexpected extra watch event: {event:?}");
    }
}

async fn list_all(
    store: &dyn Store,
    prefix: &str,
    limit: usize,
) -> (Vec<(String, Bytes)>, Vec<Revision>) {
    let mut items = Vec::new();
    let mut revisions = Vec::new();
    let mut token = None;
    loop {
        let page = store
            .list(
                prefix,
                ListOptions {
                    limit: Some(limit),
                    continue_token: token.take(),
                    revision: None,
                },
            )
            .await
            .expect("list succeeds");
        assert!(page.items.len() <= limit, "a page never exceeds its limit");
        revisions.push(page.revision);
        items.extend(page.items.into_iter().map(|kv| (kv.key, kv.value)));
        match page.continue_token {
            Some(next) => token = Some(next),
            None => return (items, revisions),
        }
    }
}

pub async fn create_conflicts(b: &Backend) {
    let key = b.key("a");
    let created = b.store.create(&key, val("1")).await.unwrap();
    assert_eq!(created.create_revision, created.mod_revision);
    assert_eq!(created.version, 1);
    let err = b.store.create(&key, val("2")).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
    let got = b
        .store
        .get(&key)
        .await
        .unwrap()
        .expect("created key exists");
    assert_eq!(got, created);
    assert_eq!(got.value, val("1"), "a failed create changes nothing");
    assert!(b.store.get(&b.key("missing")).await.unwrap().is_none());
}

pub async fn cas_update_and_delete_preconditions(b: &Backend) {
    let key = b.key("cas");
    let v1 = b.store.create(&key, val("1")).await.unwrap();
    let v2 = b
        .store
        .update(&key, val("2"), v1.mod_revision)
        .await
        .unwrap();
    assert!(v2.mod_revision > v1.mod_revision);
    assert_eq!(v2.create_revision, v1.create_revision);
    assert_eq!(v2.version, 2);

    // A stale expected revision is a conflict naming the current one, and writes nothing.
    match b.store.update(&key, val("stale"), v1.mod_revision).await {
        Err(StoreError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, v1.mod_revision);
            assert_eq!(actual, v2.mod_revision);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(b.store.get(&key).await.unwrap().unwrap().value, val("2"));

    let err = b
        .store
        .update(&b.key("nope"), val("x"), 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    let err = b
        .store
        .delete(&key, Some(v1.mod_revision))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    assert!(
        b.store.get(&key).await.unwrap().is_some(),
        "a failed delete keeps the key"
    );

    let (prev, deleted_at) = b.store.delete(&key, Some(v2.mod_revision)).await.unwrap();
    assert_eq!(prev.value, val("2"));
    assert!(deleted_at > v2.mod_revision);
    assert!(b.store.get(&key).await.unwrap().is_none());
    let err = b.store.delete(&key, None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    // Re-creating starts a new life: new create revision, version 1.
    let again = b.store.create(&key, val("3")).await.unwrap();
    assert!(again.create_revision > deleted_at);
    assert_eq!(again.version, 1);
    let (prev, _) = b.store.delete(&key, None).await.unwrap();
    assert_eq!(prev.value, val("3"));
}

pub async fn revisions_increase_with_every_write(b: &Backend) {
    let before = b.store.current_revision().await.unwrap();
    let mut last = before;
    for i in 0..20 {
        let kv = b
            .store
            .create(&b.key(&format!("r{i}")), val("x"))
            .await
            .unwrap();
        assert!(kv.mod_revision > last, "revisions strictly increase");
        last = kv.mod_revision;
        let current = b.store.current_revision().await.unwrap();
        assert!(
            current >= kv.mod_revision,
            "the current revision covers every ack"
        );
    }
}

pub async fn paging_reads_a_consistent_snapshot_while_writes_happen(b: &Backend) {
    let mut expected = BTreeMap::new();
    let mut revisions = BTreeMap::new();
    for i in 0..50 {
        let key = b.key(&format!("item-{i:03}"));
        let kv = b.store.create(&key, val(format!("v{i}"))).await.unwrap();
        revisions.insert(key.clone(), kv.mod_revision);
        expected.insert(key, val(format!("v{i}")));
    }
    let first = b
        .store
        .list(
            &b.prefix,
            ListOptions {
                limit: Some(10),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(first.items.len(), 10);
    let mut seen: Vec<(String, Bytes)> = first
        .items
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();

    // Change the rest of the range behind the reader's back.
    let later = b.key("item-040");
    b.store
        .update(&later, val("changed"), revisions[&later])
        .await
        .unwrap();
    let gone = b.key("item-045");
    b.store.delete(&gone, None).await.unwrap();
    b.store
        .create(&b.key("item-025a"), val("new"))
        .await
        .unwrap();
    b.store.create(&b.key("zzz-new"), val("new")).await.unwrap();

    let mut token = first.continue_token.clone();
    while let Some(next) = token.take() {
        let page = b
            .store
            .list(
                &b.prefix,
                ListOptions {
                    limit: Some(10),
                    continue_token: Some(next),
                    revision: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            page.revision, first.revision,
            "every page is read at the first page's revision"
        );
        seen.extend(page.items.into_iter().map(|kv| (kv.key, kv.value)));
        token = page.continue_token;
    }
    let expected: Vec<(String, Bytes)> = expected.into_iter().collect();
    assert_eq!(seen, expected, "the paged read is exactly the snapshot");

    // A fresh read sees the new state.
    let (now, _) = list_all(&*b.store, &b.prefix, 7).await;
    assert_eq!(now.len(), 51);
    assert!(now.iter().any(|(k, v)| *k == later && *v == val("changed")));
    assert!(!now.iter().any(|(k, _)| *k == gone));
}

pub async fn list_at_an_older_revision(b: &Backend) {
    let a = b.store.create(&b.key("a"), val("1")).await.unwrap();
    let at = a.mod_revision;
    b.store.update(&b.key("a"), val("2"), at).await.unwrap();
    b.store.create(&b.key("b"), val("1")).await.unwrap();
    let old = b
        .store
        .list(
            &b.prefix,
            ListOptions {
                revision: Some(at),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(old.revision, at);
    let old: Vec<_> = old
        .items
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.clone()))
        .collect();
    assert_eq!(old, vec![(b.key("a").as_str(), val("1"))]);
    let future = b.store.current_revision().await.unwrap() + 1000;
    let err = b
        .store
        .list(
            &b.prefix,
            ListOptions {
                revision: Some(future),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::FutureRevision { .. }), "{err:?}");
}

pub async fn watch_delivers_every_event_once_in_revision_order(b: &Backend) {
    let start = b.store.current_revision().await.unwrap();
    let mut watch = b.store.watch(&b.prefix, start).await.unwrap();
    let writers = 4;
    let per_writer = 25;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, key) = (b.store.clone(), b.key(&format!("w{w}")));
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            // create, then updates, then a delete: per_writer writes per key
            let mut kv = store.create(&key, val("0")).await.unwrap();
            revisions.push(kv.mod_revision);
            for i in 1..per_writer - 1 {
                kv = store
                    .update(&key, val(i.to_string()), kv.mod_revision)
                    .await
                    .unwrap();
                revisions.push(kv.mod_revision);
            }
            let (_, deleted) = store.delete(&key, Some(kv.mod_revision)).await.unwrap();
            revisions.push(deleted);
            revisions
        }));
    }
    let mut written = Vec::new();
    for task in tasks {
        written.extend(task.await.unwrap());
    }
    written.sort();
    let events = take(&mut watch, writers * per_writer).await;
    let seen: Vec<Revision> = events.iter().map(WatchEvent::revision).collect();
    assert_eq!(seen, written, "every write is seen once, in revision order");
    for event in &events {
        match event {
            WatchEvent::Put { kv, prev } => {
                if kv.version == 1 {
                    assert!(prev.is_none(), "a create has no previous value");
                } else {
                    let prev = prev.as_ref().expect("an update carries the previous value");
                    assert_eq!(prev.version + 1, kv.version);
                }
            }
            WatchEvent::Delete { prev, .. } => assert_eq!(prev.version, (per_writer - 1) as i64),
        }
    }
    assert_quiet(&mut watch).await;

    // A watch from the old revision replays the same history.
    let mut replay = b.store.watch(&b.prefix, start).await.unwrap();
    let replayed = take(&mut replay, writers * per_writer).await;
    assert_eq!(replayed, events);
}

pub async fn watch_resumes_after_reconnect_without_gap(b: &Backend) {
    let start = b.store.current_revision().await.unwrap();
    let mut watch = b.store.watch(&b.prefix, start).await.unwrap();
    for i in 0..10 {
        b.store
            .create(&b.key(&format!("k{i:02}")), val("x"))
            .await
            .unwrap();
    }
    let first = take(&mut watch, 5).await;
    let last_seen = first.last().unwrap().revision();
    drop(watch); // the client goes away mid-stream
    for i in 10..20 {
        b.store
            .create(&b.key(&format!("k{i:02}")), val("x"))
            .await
            .unwrap();
    }
    let mut resumed = b.store.watch(&b.prefix, last_seen).await.unwrap();
    let rest = take(&mut resumed, 15).await;
    let keys: Vec<String> = first
        .iter()
        .chain(&rest)
        .map(|e| e.key().to_owned())
        .collect();
    let expected: Vec<String> = (0..20).map(|i| b.key(&format!("k{i:02}"))).collect();
    assert_eq!(
        keys, expected,
        "no gap and no duplicate across the reconnect"
    );
    assert_quiet(&mut resumed).await;
}

pub async fn watch_ignores_other_prefixes(b: &Backend) {
    let start = b.store.current_revision().await.unwrap();
    let mut watch = b.store.watch(&b.key("mine/"), start).await.unwrap();
    b.store.create(&b.key("other/a"), val("x")).await.unwrap();
    b.store.create(&b.key("mine/a"), val("x")).await.unwrap();
    b.store
        .create(&b.key("mine"), val("not under mine/"))
        .await
        .unwrap();
    let events = take(&mut watch, 1).await;
    assert_eq!(events[0].key(), b.key("mine/a"));
    assert_quiet(&mut watch).await;
}

/// The empty prefix watches every key (what the API server's watch cache follows).
pub async fn a_watch_of_the_empty_prefix_sees_every_key(b: &Backend) {
    let start = b.store.current_revision().await.unwrap();
    let mut watch = b.store.watch("", start).await.unwrap();
    let first = b.store.create(&b.key("x/a"), val("1")).await.unwrap();
    let second = b.store.create(&b.key("y/b"), val("2")).await.unwrap();
    b.store.delete(&b.key("x/a"), None).await.unwrap();
    // Other tests may write to the same store meanwhile: keep only this test's keys.
    let mut ours = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while ours.len() < 3 {
        let event = tokio::time::timeout_at(deadline, watch.next())
            .await
            .expect("the watch delivers our three changes in time")
            .expect("the watch goes on")
            .expect("no watch error");
        if event.key().starts_with(&b.key("")) {
            ours.push(event);
        }
    }
    assert_eq!(ours[0].key(), b.key("x/a"));
    assert_eq!(ours[0].revision(), first.mod_revision);
    assert_eq!(ours[1].key(), b.key("y/b"));
    assert_eq!(ours[1].revision(), second.mod_revision);
    assert!(matches!(&ours[2], WatchEvent::Delete { prev, .. } if prev.key == b.key("x/a")));
}

pub async fn concurrent_cas_increments_are_never_lost(b: &Backend) {
    let key = b.key("counter");
    b.store.create(&key, val("0")).await.unwrap();
    let writers = 16;
    let increments = 500;
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (store, key) = (b.store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0u64;
            for _ in 0..increments {
                loop {
                    let current = store.get(&key).await.unwrap().unwrap();
                    let n: u64 = std::str::from_utf8(&current.value)
                        .unwrap()
                        .parse()
                        .unwrap();
                    match store
                        .update(&key, val((n + 1).to_string()), current.mod_revision)
                        .await
                    {
                        Ok(_) => break,
                        Err(StoreError::Conflict { .. }) => conflicts += 1,
                        Err(other) => panic!("unexpected error: {other:?}"),
                    }
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for task in tasks {
        conflicts += task.await.unwrap();
    }
    let final_value = b.store.get(&key).await.unwrap().unwrap();
    assert_eq!(final_value.value, val((writers * increments).to_string()));
    assert_eq!(final_value.version, (writers * increments + 1) as i64);
    eprintln!(
        "{} increments with {conflicts} conflicts retried",
        writers * increments
    );
}

pub async fn invalid_continue_tokens_are_rejected(b: &Backend) {
    for token in [
        "not-base64!",
        "e30",
        "eyJydiI6MSwic3RhcnQiOiIvZWxzZXdoZXJlIn0",
    ] {
        let err = b
            .store
            .list(
                &b.prefix,
                ListOptions {
                    continue_token: Some(token.into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidContinue { .. }),
            "{token}: {err:?}"
        );
    }
}

pub async fn compacted_revisions_are_expired(b: &Backend) {
    for i in 0..5 {
        b.store
            .create(&b.key(&format!("a{i}")), val("x"))
            .await
            .unwrap();
    }
    let old = b.store.current_revision().await.unwrap();
    let page = b
        .store
        .list(
            &b.prefix,
            ListOptions {
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let token = page.continue_token.expect("more pages follow");
    for i in 0..5 {
        b.store
            .create(&b.key(&format!("b{i}")), val("x"))
            .await
            .unwrap();
    }
    let compact_to = b.store.current_revision().await.unwrap() - 1;
    assert!(
        b.store.holds_revision(old).await.unwrap(),
        "not compacted yet"
    );
    b.store.compact(compact_to).await.unwrap();
    b.store
        .compact(compact_to)
        .await
        .expect("compacting again is harmless");
    // As reads at those revisions answer below.
    assert!(!b.store.holds_revision(old).await.unwrap(), "compacted");
    assert!(!b.store.holds_revision(compact_to - 1).await.unwrap());
    assert!(b.store.holds_revision(compact_to).await.unwrap());
    let now = b.store.current_revision().await.unwrap();
    assert!(b.store.holds_revision(now).await.unwrap());

    let err = b
        .store
        .list(
            &b.prefix,
            ListOptions {
                continue_token: Some(token),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Expired { .. }),
        "continue: {err:?}"
    );
    let err = b
        .store
        .list(
            &b.prefix,
            ListOptions {
                revision: Some(old),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Expired { .. }),
        "list at old revision: {err:?}"
    );
    match b.store.watch(&b.prefix, old).await {
        Err(StoreError::Expired { .. }) => {}
        Ok(mut watch) => match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
            Ok(Some(Err(StoreError::Expired { .. }))) => {}
            other => panic!("watch from a compacted revision: {other:?}"),
        },
        Err(other) => panic!("watch from a compacted revision: {other:?}"),
    }

    // The present is still readable and watchable.
    let (items, _) = list_all(&*b.store, &b.prefix, 3).await;
    assert_eq!(items.len(), 10);
    let now = b.store.current_revision().await.unwrap();
    let mut watch = b.store.watch(&b.prefix, now).await.unwrap();
    b.store.create(&b.key("c"), val("x")).await.unwrap();
    assert_eq!(take(&mut watch, 1).await[0].key(), b.key("c"));
}

/// `spawn_compactor` compacts, one interval late, to the revision it saw: what was
/// written before it started is expired after two intervals, and the present stays
/// readable and watchable.
pub async fn the_compactor_keeps_one_interval_of_history(b: &Backend) {
    let first = b.store.create(&b.key("a"), val("1")).await.unwrap();
    b.store
        .update(&b.key("a"), val("2"), first.mod_revision)
        .await
        .unwrap();
    let before = first.mod_revision - 1;
    assert!(
        b.store.watch(&b.prefix, before).await.is_ok(),
        "nothing is compacted yet"
    );
    let interval = Duration::from_millis(300);
    let compactor = outpost_apiserver::storage::spawn_compactor(b.store.clone(), interval);
    // Not before one interval has passed since it saw the revision.
    tokio::time::sleep(interval / 2).await;
    assert!(
        b.store.watch(&b.prefix, before).await.is_ok(),
        "history younger than an interval is kept"
    );
    let expired = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let listed = b
                .store
                .list(
                    &b.prefix,
                    ListOptions {
                        revision: Some(first.mod_revision),
                        ..Default::default()
                    },
                )
                .await;
            match listed {
                Err(StoreError::Expired { .. }) => return,
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(other) => panic!("list at an old revision: {other:?}"),
            }
        }
    })
    .await;
    compactor.abort();
    assert!(expired.is_ok(), "the compactor forgot the old revision");
    let (items, _) = list_all(&*b.store, &b.prefix, 3).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].1, val("2"));
    let now = b.store.current_revision().await.unwrap();
    assert!(
        b.store.watch(&b.prefix, now).await.is_ok(),
        "the present is never compacted"
    );
}
