use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use super::{KeyValue, ListOptions, ListPage, Revision, Store, StoreError, WatchStream};

/// Called with the operation's name and how long it took.
pub type Observer = Arc<dyn Fn(&'static str, Duration) + Send + Sync>;

/// A store that reports each operation's latency (for `/metrics`).
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
    ($self:ident, $op:literal, $call:expr) => {{
        let started = Instant::now();
        let result = $call.await;
        ($self.observe)($op, started.elapsed());
        result
    }};
}

#[async_trait]
impl Store for InstrumentedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        timed!(self, "get", self.inner.get(key))
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError> {
        timed!(self, "list", self.inner.list(prefix, options))
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError> {
        timed!(self, "create", self.inner.create(key, value))
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError> {
        timed!(self, "update", self.inner.update(key, value, expected))
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError> {
        timed!(self, "delete", self.inner.delete(key, expected))
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        timed!(self, "watch", self.inner.watch(prefix, after))
    }

    async fn current_revision(&self) -> Result<Revision, StoreError> {
        timed!(self, "current_revision", self.inner.current_revision())
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        timed!(self, "compact", self.inner.compact(revision))
    }
}
