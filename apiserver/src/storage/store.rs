use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

use super::StoreError;

/// A store revision. Every successful write advances it by one; a key's
/// `mod_revision` is the revision of the write that last changed it. The API
/// server uses it, unchanged, as `resourceVersion`.
pub type Revision = i64;

/// A key with its value and revisions, as etcd reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The stored bytes.
    pub value: Bytes,
    /// The revision that created the key (reset by delete and re-create).
    pub create_revision: Revision,
    /// The revision of the write that last changed the key.
    pub mod_revision: Revision,
    /// How many times the key was written since it was created (1 after create).
    pub version: i64,
}

/// A change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key was created or updated; `prev` is its value before, if any.
    Put {
        /// The key as written.
        kv: KeyValue,
        /// The key before the write, `None` for a create.
        prev: Option<KeyValue>,
    },
    /// The key was deleted.
    Delete {
        /// The key's last value.
        prev: KeyValue,
        /// The revision of the delete.
        revision: Revision,
    },
}

impl WatchEvent {
    /// The revision at which the change happened.
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put { kv, .. } => kv.mod_revision,
            WatchEvent::Delete { revision, .. } => *revision,
        }
    }

    /// The key that changed.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put { kv, .. } => &kv.key,
            WatchEvent::Delete { prev, .. } => &prev.key,
        }
    }
}

/// How to read one page of a prefix.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// At most this many items; `None` or `0` for all.
    pub limit: Option<usize>,
    /// Continue a previous paged read: the token from its [`ListPage`]. The page is
    /// read at the same revision as the first one.
    pub continue_token: Option<String>,
    /// Read at this revision instead of the current one (ignored with a continue token).
    pub revision: Option<Revision>,
}

/// One page of a prefix, read at one revision.
#[derive(Clone, Debug)]
pub struct ListPage {
    /// The keys in key order.
    pub items: Vec<KeyValue>,
    /// The revision the page was read at.
    pub revision: Revision,
    /// Present when more keys follow; pass it back in [`ListOptions::continue_token`].
    pub continue_token: Option<String>,
}

/// A stream of watch events in revision order. It ends with `Err(Expired)` if the
/// watch falls behind compaction, and with `Err(Backend)` if the backend fails.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, StoreError>> + Send>>;

/// A revisioned key-value store with etcd's semantics.
///
/// Both backends pass one conformance suite (`apiserver/tests/store_conformance.rs`).
///
/// ```no_run
/// # async fn demo(store: &dyn outpost_apiserver::storage::Store) -> Result<(), outpost_apiserver::storage::StoreError> {
/// let created = store.create("/registry/a", b"{}".to_vec().into()).await?;
/// // Compare-and-swap: only succeeds if nobody wrote the key since.
/// store.update("/registry/a", b"{\"x\":1}".to_vec().into(), created.mod_revision).await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The key's current value, if it exists.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError>;

    /// One page of the keys under `prefix`, in key order, at one revision.
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError>;

    /// Every key under `prefix`, read page by page (500 keys each), with the revision of
    /// the last page.
    async fn list_all(&self, prefix: &str) -> Result<(Vec<KeyValue>, Revision), StoreError> {
        self.list_all_at(prefix, None).await
    }

    /// Every key under `prefix` at `revision` (the current one when `None`), read page
    /// by page (500 keys each), with the revision read at.
    async fn list_all_at(
        &self,
        prefix: &str,
        revision: Option<Revision>,
    ) -> Result<(Vec<KeyValue>, Revision), StoreError> {
        let mut items = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .list(
                    prefix,
                    ListOptions {
                        limit: Some(500),
                        continue_token: token.take(),
                        revision,
                    },
                )
                .await?;
            items.extend(page.items);
            match page.continue_token {
                Some(next) => token = Some(next),
                None => return Ok((items, page.revision)),
            }
        }
    }

    /// Creates the key if it is absent; `AlreadyExists` otherwise.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError>;

    /// Replaces the key's value if its `mod_revision` is still `expected`
    /// (`Conflict` otherwise, `NotFound` if it is gone).
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError>;

    /// Deletes the key, if `expected` is given only while its `mod_revision` is still
    /// that. Returns the deleted value and the revision of the delete.
    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError>;

    /// Every change under `prefix` made after revision `after`, in revision order, each
    /// exactly once, then live changes until the stream is dropped.
    /// `Expired` if `after` is older than the compacted revision.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError>;

    /// The store's current revision.
    async fn current_revision(&self) -> Result<Revision, StoreError>;

    /// Forgets history older than `revision`: reads and watches before it become `Expired`.
    async fn compact(&self, revision: Revision) -> Result<(), StoreError>;

    /// Whether a read at `revision` is still possible (not compacted away), found
    /// without reading anything at it.
    async fn holds_revision(&self, revision: Revision) -> Result<bool, StoreError>;
}
