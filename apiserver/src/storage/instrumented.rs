use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use super::{KeyValue, ListOptions, ListPage, Revision, Store, StoreError, WatchStream};

/// One store operation, as an [`Observer`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    /// `get`, `list`, `create`, `update`, `delete`, `watch`, `current_revision`, `compact`.
    pub operation: &'static str,
    /// The key (or prefix) it was about; empty for whole-store operations.
    pub key: &'a str,
    /// How long it took.
    pub took: Duration,
    /// Whether it succeeded (a refused compare-and-swap did not).
    pub ok: bool,
}

/// Called after each operation.
pub type Observer = Arc<dyn Fn(Observation<'_>) + Send + Sync>;

/// A store that reports each operation (its latency, and writes by key, for `/metrics`).
pub struct InstrumentedStore {
    inner: Arc<dyn Store>,
    observe: Observer,
}

impl InstrumentedStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, observe: Observer) -> Self {
        InstrumentedStore { inner, observe }
    }
}

macro_rules! timed {
    ($self:ident, $op:literal, $key:expr, $call:expr) => {{
        let started = Instant::now();
        let result = $call.await;
        ($self.observe)(Observation {
            operation: $op,
            key: $key,
            took: started.elapsed(),
            ok: result.is_ok(),
        });
        result
    }};
}

#[async_trait]
impl Store for InstrumentedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        timed!(self, "get", key, self.inner.get(key))
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError> {
        timed!(self, "list", prefix, self.inner.list(prefix, options))
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError> {
        timed!(self, "create", key, self.inner.create(key, value))
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError> {
        timed!(self, "update", key, self.inner.update(key, value, expected))
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError> {
        timed!(self, "delete", key, self.inner.delete(key, expected))
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        timed!(self, "watch", prefix, self.inner.watch(prefix, after))
    }

    async fn current_revision(&self) -> Result<Revision, StoreError> {
        timed!(self, "current_revision", "", self.inner.current_revision())
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        timed!(self, "compact", "", self.inner.compact(revision))
    }

    async fn holds_revision(&self, revision: Revision) -> Result<bool, StoreError> {
        timed!(
            self,
            "holds_revision",
            "",
            self.inner.holds_revision(revision)
        )
    }
}
