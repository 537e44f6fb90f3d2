//! Embedded-only durability: kill -9 in the middle of writes, restarts, the history window.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, ListOptions, Store, StoreError};

const CHILD_DIR: &str = "OUTPOST_KILL9_DIR";

/// The child half of `survives_kill_9_mid_write`: writes until killed, printing one
/// `ACK key revision` line per acknowledged write. Does nothing unless the parent test
/// runs it (with `--ignored` and the directory in the environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "run as a child process by survives_kill_9_mid_write"]
async fn kill9_child_writer() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let round: u32 = std::env::var("OUTPOST_KILL9_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let store = std::sync::Arc::new(
        EmbeddedStore::open(dir.as_ref(), EmbeddedOptions::default())
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0.. {
                let key = format!("/k/{round}/{w}/{i:06}");
                let kv = store
                    .create(&key, Bytes::from(format!("{round}-{w}-{i}")))
                    .await
                    .unwrap();
                let mut out = std::io::stdout().lock();
                writeln!(out, "ACK {key} {}", kv.mod_revision).unwrap();
                out.flush().unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_kill_9_mid_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<String, i64> = BTreeMap::new();
    for round in 0..3u32 {
        let stop_after = 200 + rand::random::<u64>() % 1500;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "durability::kill9_child_writer",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_DIR, dir.path())
            .env("OUTPOST_KILL9_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut this_round = 0;
        while this_round < stop_after {
            let line = lines.next().expect("child writes until killed").unwrap();
            if let Some(ack) = line.strip_prefix("ACK ") {
                let (key, rev) = ack.split_once(' ').unwrap();
                acked.insert(key.to_owned(), rev.parse().unwrap());
                this_round += 1;
            }
        }
        child.kill().unwrap(); // SIGKILL
        // Lines already printed were acknowledged before the kill: they count too.
        for line in lines {
            let Ok(line) = line else { break };
            if let Some(ack) = line.strip_prefix("ACK ") {
                let (key, rev) = ack.split_once(' ').unwrap();
                acked.insert(key.to_owned(), rev.parse().unwrap());
            }
        }
        child.wait().unwrap();

        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .unwrap();
        let max_acked = *acked.values().max().unwrap();
        let current = store.current_revision().await.unwrap();
        assert!(
            current >= max_acked,
            "revision {current} went back behind ack {max_acked}"
        );
        let page = store.list("/k/", ListOptions::default()).await.unwrap();
        let stored: BTreeMap<&str, i64> = page
            .items
            .iter()
            .map(|kv| (kv.key.as_str(), kv.mod_revision))
            .collect();
        for (key, revision) in &acked {
            assert_eq!(
                stored.get(key.as_str()),
                Some(revision),
                "acknowledged write {key} lost"
            );
        }
        let next = store
            .create(&format!("/after/{round}"), Bytes::from("x"))
            .await
            .unwrap();
        assert!(
            next.mod_revision > max_acked,
            "revisions stay monotonic after a crash"
        );
        store.close().await.unwrap();
        eprintln!("round {round}: {} acknowledged writes intact", acked.len());
    }
}

#[tokio::test]
async fn revision_counter_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
        .await
        .unwrap();
    let kv = store.create("/a", Bytes::from("1")).await.unwrap();
    store.close().await.unwrap();
    let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
        .await
        .unwrap();
    assert_eq!(store.current_revision().await.unwrap(), kv.mod_revision);
    let updated = store
        .update("/a", Bytes::from("2"), kv.mod_revision)
        .await
        .unwrap();
    assert_eq!(updated.mod_revision, kv.mod_revision + 1);
    store.close().await.unwrap();
}

#[tokio::test]
async fn history_window_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        dir.path(),
        EmbeddedOptions {
            history: 100,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let first = store
        .create("/h/0", Bytes::from("x"))
        .await
        .unwrap()
        .mod_revision;
    for i in 1..400 {
        store
            .create(&format!("/h/{i}"), Bytes::from("x"))
            .await
            .unwrap();
    }
    let current = store.current_revision().await.unwrap();
    let compacted = store.compacted_revision();
    assert!(compacted > first, "old history was compacted");
    assert!(
        current - compacted <= 125 + 1,
        "at most the window (plus slack) is kept"
    );
    assert!(matches!(
        store.watch("/h/", first).await,
        Err(StoreError::Expired { .. })
    ));
    let recent = store.watch("/h/", current - 50).await;
    assert!(recent.is_ok(), "revisions inside the window stay watchable");
}

#[tokio::test]
async fn history_is_compacted_a_little_with_each_write() {
    // Each batch removes at most two revisions of the oldest history per write it makes,
    // in its own transaction: a write never waits for a long compaction (a quarter of
    // this history, 2,048 revisions, went at once before), and the history stays at its
    // length.
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        dir.path(),
        EmbeddedOptions {
            history: 8_192,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut compacted = store.compacted_revision();
    let (mut steps, mut largest) = (0, 0);
    for i in 0..10_500 {
        store
            .create(&format!("/s/{i}"), Bytes::from("x"))
            .await
            .unwrap();
        let now = store.compacted_revision();
        if now != compacted {
            steps += 1;
            largest = largest.max(now - compacted);
            compacted = now;
        }
        let current = store.current_revision().await.unwrap();
        assert!(
            current - compacted <= 8_192,
            "the history is kept at its length: {current} - {compacted}"
        );
    }
    assert!(steps > 1_000, "compacted in {steps} steps");
    assert!(
        largest <= 2,
        "one write's batch removed {largest} revisions"
    );
}
