//! The embedded backend: a single-node, durable store in one redb file.
//!
//! * `kv` holds each key's current value with its create/mod revision and version;
//! * `log` holds one entry per revision (the change and the value before it), the
//!   watch history and the means to read at an older revision;
//! * `meta` holds the current and the compacted revision.
//!
//! All writes go through one writer thread with group commit (see `writer.rs`), so a
//! write is acknowledged only once it is on disk, and revisions are assigned in commit
//! order and never reused, across restarts too.

mod codec;
mod read;
mod watch;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, ReadableTable, TableDefinition};
use tokio::sync::{broadcast, mpsc, oneshot};

use self::writer::{WriteOp, WriteOutcome, WriteRequest};
use super::{
    KeyValue, ListOptions, ListPage, Revision, Store, StoreError, WatchEvent, WatchStream,
};

const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const LOG: TableDefinition<i64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, i64> = TableDefinition::new("meta");
const META_REVISION: &str = "revision";
const META_COMPACTED: &str = "compacted";

/// Settings of the embedded store.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// How many revisions of history to keep for watches and paged reads; older ones
    /// are compacted automatically.
    pub history: Revision,
    /// Bytes of the file's pages kept in memory. The API server answers reads from its
    /// watch caches, so the store's own cache mostly serves writes; redb's default
    /// (1 GiB) would double the server's memory at fleet scale.
    pub cache_bytes: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            history: 50_000,
            cache_bytes: 64 << 20,
        }
    }
}

/// State shared by the store handle, the writer thread and watch tasks.
struct Shared {
    db: Database,
    revision: AtomicI64,
    compacted: AtomicI64,
}

/// The embedded, durable single-node store (`embedded:DIR`).
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    writer: mpsc::Sender<WriteRequest>,
    events: broadcast::Sender<Arc<Vec<WatchEvent>>>,
    thread: std::thread::JoinHandle<()>,
    path: PathBuf,
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`, recovering from any crash.
    pub async fn open(dir: &Path, options: EmbeddedOptions) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(StoreError::backend)?;
        let path = dir.join("outpost.redb");
        let file = path.clone();
        let cache_bytes = options.cache_bytes;
        let shared = tokio::task::spawn_blocking(move || open_database(&file, cache_bytes))
            .await
            .map_err(StoreError::backend)??;
        let shared = Arc::new(shared);
        let (writer, requests) = mpsc::channel(4096);
        let (events, _) = broadcast::channel(1024);
        let thread = {
            let (shared, events) = (shared.clone(), events.clone());
            std::thread::Builder::new()
                .name("embedded-store-writer".into())
                .spawn(move || writer::run(shared, requests, events, options.history.max(1)))
                .map_err(StoreError::backend)?
        };
        Ok(EmbeddedStore {
            shared,
            writer,
            events,
            thread,
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The oldest revision still readable.
    pub fn compacted_revision(&self) -> Revision {
        self.shared.compacted.load(Ordering::SeqCst)
    }

    /// Waits for queued writes, stops the writer and closes the file, so the store can
    /// be opened again in this process. Open watch streams end.
    pub async fn close(self) -> Result<(), StoreError> {
        let EmbeddedStore {
            shared,
            writer,
            events,
            thread,
            ..
        } = self;
        drop(writer);
        drop(events);
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(StoreError::backend)?
            .map_err(|_| StoreError::backend("the store writer thread panicked"))?;
        // Watch tasks notice the closed broadcast and drop their handles.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut shared = shared;
        loop {
            match Arc::try_unwrap(shared) {
                Ok(inner) => {
                    drop(inner);
                    return Ok(());
                }
                Err(still_shared) if tokio::time::Instant::now() < deadline => {
                    shared = still_shared;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(_) => return Err(StoreError::backend("store still in use by a watch")),
            }
        }
    }

    async fn write(&self, op: WriteOp) -> Result<WriteOutcome, StoreError> {
        let (reply, outcome) = oneshot::channel();
        self.writer
            .send(WriteRequest { op, reply })
            .await
            .map_err(|_| StoreError::backend("the embedded store is closed"))?;
        outcome
            .await
            .map_err(|_| StoreError::backend("the embedded store writer stopped"))?
    }

    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || read(&shared.db))
            .await
            .map_err(StoreError::backend)?
    }
}

fn open_database(path: &Path, cache_bytes: usize) -> Result<Shared, StoreError> {
    let db = Database::builder()
        .set_cache_size(cache_bytes)
        .create(path)
        .map_err(StoreError::backend)?;
    let txn = db.begin_write().map_err(StoreError::backend)?;
    let (revision, compacted) = {
        txn.open_table(KV).map_err(StoreError::backend)?;
        txn.open_table(LOG).map_err(StoreError::backend)?;
        let meta = txn.open_table(META).map_err(StoreError::backend)?;
        let get = |key| -> Result<Option<i64>, StoreError> {
            Ok(meta
                .get(key)
                .map_err(StoreError::backend)?
                .map(|v| v.value()))
        };
        (
            get(META_REVISION)?.unwrap_or(1),
            get(META_COMPACTED)?.unwrap_or(0),
        )
    };
    txn.commit().map_err(StoreError::backend)?;
    Ok(Shared {
        db,
        revision: AtomicI64::new(revision),
        compacted: AtomicI64::new(compacted),
    })
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        // A point read runs on the caller's task: it opens a snapshot (no wait on the
        // writer, whose pages it never reads) and reads a few pages, from redb's cache or
        // the OS's page cache. Handing it to the blocking pool cost four times the read
        // itself (a pool thread woken per GET: 2.8 % of the API server's CPU in a
        // 10,000-install rollout, the read 0.7 %). Lists, which may read a whole
        // namespace, stay on the pool.
        read::get(&self.shared.db, key)
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError> {
        let prefix = prefix.to_owned();
        self.read(move |db| read::list(db, &prefix, &options)).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError> {
        let op = WriteOp::Create {
            key: key.to_owned(),
            value,
        };
        match self.write(op).await? {
            WriteOutcome::Written(kv) => Ok(kv),
            _ => unreachable!("a create is answered with the written value"),
        }
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError> {
        let op = WriteOp::Update {
            key: key.to_owned(),
            value,
            expected,
        };
        match self.write(op).await? {
            WriteOutcome::Written(kv) => Ok(kv),
            _ => unreachable!("an update is answered with the written value"),
        }
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError> {
        let op = WriteOp::Delete {
            key: key.to_owned(),
            expected,
        };
        match self.write(op).await? {
            WriteOutcome::Deleted(prev, revision) => Ok((prev, revision)),
            _ => unreachable!("a delete is answered with the deleted value"),
        }
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        if after < self.compacted_revision() {
            return Err(StoreError::Expired { requested: after });
        }
        let live = self.events.subscribe();
        Ok(watch::spawn(
            self.shared.clone(),
            live,
            prefix.to_owned(),
            after,
        ))
    }

    async fn current_revision(&self) -> Result<Revision, StoreError> {
        Ok(self.shared.revision.load(Ordering::SeqCst))
    }

    async fn holds_revision(&self, revision: Revision) -> Result<bool, StoreError> {
        // As a read at `revision` decides (`read::list`).
        Ok(revision >= self.compacted_revision())
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.write(WriteOp::Compact { revision }).await.map(|_| ())
    }
}
