//! etcd only: a write whose answer is lost after etcd committed it (the connection breaks,
//! or etcd answers `UNAVAILABLE` "request timed out" for a proposal that then commits) is
//! tried again by the store, whose compare-and-swap then fails against the write's own
//! result. The store must answer such a write as done, with its revisions, and must
//! still refuse a write that another writer beat. A [`LostAnswerProxy`] between the
//! store and etcd cuts the connection at the write's answer.

use bytes::Bytes;
use outpost_apiserver::storage::{EtcdStore, Store, StoreError};
use outpost_testing::{LostAnswerProxy, ThrowawayEtcd};

/// A store whose answers can be lost, one straight to the same etcd to check what it
/// holds, and what keeps them alive.
struct Lossy {
    store: EtcdStore,
    direct: EtcdStore,
    proxy: LostAnswerProxy,
    _etcd: ThrowawayEtcd,
}

impl Lossy {
    async fn start() -> Lossy {
        let etcd = ThrowawayEtcd::start()
            .await
            .expect("etcd starts (run `./x deps` to install it)");
        let proxy = LostAnswerProxy::start(etcd.endpoint()).await;
        let store = EtcdStore::connect(std::slice::from_ref(&proxy.endpoint))
            .await
            .expect("etcd answers through the proxy");
        let direct = EtcdStore::connect(&[etcd.endpoint().to_owned()])
            .await
            .expect("etcd answers");
        // The client's connection is up before an answer is lost on it.
        store.current_revision().await.expect("a first read");
        Lossy {
            store,
            direct,
            proxy,
            _etcd: etcd,
        }
    }

    /// The next answer is lost; `write` runs; the answer was indeed lost.
    async fn losing<T>(&self, write: impl std::future::Future<Output = T>) -> T {
        let lost = self.proxy.lost();
        self.proxy.lose_next_answer();
        let answer = write.await;
        assert_eq!(self.proxy.lost(), lost + 1, "the write's answer was lost");
        answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_committed_before_its_answer_was_lost_is_answered_as_done() {
    let lossy = Lossy::start().await;
    let (store, direct) = (&lossy.store, &lossy.direct);
    let key = "/lost/a";

    let created = lossy
        .losing(store.create(key, Bytes::from_static(b"v1")))
        .await
        .expect("the create committed: it is answered as done, not as already-exists");
    let held = direct.get(key).await.unwrap().expect("the key exists");
    assert_eq!(held.value, "v1");
    assert_eq!(held.version, 1, "written once");
    assert_eq!(
        (
            created.create_revision,
            created.mod_revision,
            created.version
        ),
        (held.create_revision, held.mod_revision, 1),
        "the create's own revisions"
    );

    let updated = lossy
        .losing(store.update(key, Bytes::from_static(b"v2"), created.mod_revision))
        .await
        .expect("the update committed: it is answered as done, not as a conflict");
    let held = direct.get(key).await.unwrap().expect("the key exists");
    assert_eq!(held.value, "v2");
    assert_eq!(held.version, 2, "updated once");
    assert_eq!(
        (
            updated.value.as_ref(),
            updated.mod_revision,
            updated.version
        ),
        (&b"v2"[..], held.mod_revision, 2)
    );

    let (prev, deleted_at) = lossy
        .losing(store.delete(key, Some(updated.mod_revision)))
        .await
        .expect("the delete committed: it is answered as done, not as not-found");
    assert_eq!(prev.value, "v2");
    assert_eq!(prev.mod_revision, updated.mod_revision);
    assert!(deleted_at > updated.mod_revision);
    assert_eq!(direct.get(key).await.unwrap(), None);
    assert_eq!(
        direct.current_revision().await.unwrap(),
        deleted_at,
        "three writes, none made twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_another_writer_beat_still_fails_when_its_answer_was_lost() {
    let lossy = Lossy::start().await;
    let (store, direct) = (&lossy.store, &lossy.direct);
    let key = "/lost/b";
    let theirs = direct
        .create(key, Bytes::from_static(b"theirs"))
        .await
        .unwrap();

    let err = lossy
        .losing(store.create(key, Bytes::from_static(b"ours")))
        .await
        .expect_err("another writer's object is not taken for ours");
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");

    let newer = direct
        .update(key, Bytes::from_static(b"theirs-2"), theirs.mod_revision)
        .await
        .unwrap();
    let err = lossy
        .losing(store.update(key, Bytes::from_static(b"ours"), theirs.mod_revision))
        .await
        .expect_err("an update from before another writer's is refused");
    assert!(
        matches!(err, StoreError::Conflict { actual, .. } if actual == newer.mod_revision),
        "{err:?}"
    );
    let err = lossy
        .losing(store.delete(key, Some(theirs.mod_revision)))
        .await
        .expect_err("a delete from before another writer's update is refused");
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");

    let held = direct.get(key).await.unwrap().expect("the key exists");
    assert_eq!(held.value, "theirs-2");
    assert_eq!(held.version, 2, "nothing of ours was written");
    assert_eq!(direct.current_revision().await.unwrap(), newer.mod_revision);
}
