//! The feed: one store watch of the whole keyspace, routing each change to the cache of
//! its type, and the progress it made. Because the watch covers every key, it sees every
//! revision, so "the caches have applied everything up to revision R" is known exactly
//! and a consistent read can be served from memory once the progress reaches the
//! store's current revision (what kube-apiserver does with etcd progress notifications).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::watch;

use super::WatchCache;
use super::served::Served;
use crate::registry::Registry;
use crate::storage::{Revision, Store, StoreError};

/// How far the feed has applied the store's changes.
pub struct Progress {
    synced: watch::Sender<Revision>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            synced: watch::Sender::new(0),
        }
    }

    /// A progress at revision 0 that nothing advances (for tests of one cache).
    #[cfg(test)]
    pub(crate) fn for_tests() -> Progress {
        Progress::new()
    }

    /// Every change up to this revision is in the caches.
    pub fn synced(&self) -> Revision {
        *self.synced.borrow()
    }

    fn advance(&self, revision: Revision) {
        self.synced.send_if_modified(|synced| {
            let moved = revision > *synced;
            if moved {
                *synced = revision;
            }
            moved
        });
    }

    /// Waits until the caches have applied every change up to `revision`; `false` if
    /// that took longer than `timeout`.
    pub async fn wait_for(&self, revision: Revision, timeout: Duration) -> bool {
        let mut synced = self.synced.subscribe();
        tokio::time::timeout(timeout, synced.wait_for(|r| *r >= revision))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Every type's cache, and the feed's progress.
pub struct CacheSet {
    /// The served types and their caches (CRDs change them).
    pub served: Arc<Served>,
    /// How far they are.
    pub progress: Arc<Progress>,
}

/// Caches by store prefix (`/registry/<group>/<plural>/`; several versions of one type
/// share a prefix).
type Routes = HashMap<String, Vec<Arc<WatchCache>>>;

impl CacheSet {
    /// Loads every served type's objects from `store` at one revision, then the types
    /// of the stored CRDs (when `registry` serves CRDs), and starts the feed from there.
    /// Each cache keeps `capacity` recent changes for watches.
    pub async fn start(
        store: Arc<dyn Store>,
        registry: &Registry,
        capacity: usize,
    ) -> Result<CacheSet, StoreError> {
        let progress = Arc::new(Progress::new());
        let served = Arc::new(Served::new(registry.clone(), capacity, progress.clone()));
        let revision = store.current_revision().await?;
        load(store.as_ref(), &served.routes(), revision).await?;
        served.sync(store.as_ref()).await?;
        progress.advance(revision);
        tokio::spawn(follow(store, served.clone(), progress.clone(), revision));
        Ok(CacheSet { served, progress })
    }

    /// The cache of one type, if served.
    pub fn cache(&self, group: &str, version: &str, plural: &str) -> Option<Arc<WatchCache>> {
        self.served.cache(group, version, plural)
    }
}

/// Loads every cache at `revision`.
async fn load(store: &dyn Store, routes: &Routes, revision: Revision) -> Result<(), StoreError> {
    for (prefix, caches) in routes {
        let (items, _) = store.list_all_at(prefix, Some(revision)).await?;
        for cache in caches {
            cache.load(&items, revision);
        }
    }
    Ok(())
}

/// The type prefix of a store key: `/registry/<group>/<plural>/`.
fn prefix_of(key: &str) -> Option<&str> {
    let end = key.match_indices('/').nth(3)?.0;
    Some(&key[..=end])
}

/// Follows the store from `after` forever. A watch that fails is resumed where it
/// stopped; if the store compacted that history, every cache is loaded afresh (and its
/// watchers end, so their clients relist).
async fn follow(
    store: Arc<dyn Store>,
    served: Arc<Served>,
    progress: Arc<Progress>,
    mut after: Revision,
) {
    let mut routes = served.routes();
    let mut retry = Duration::from_millis(100);
    loop {
        let failure = match store.watch("", after).await {
            Ok(mut changes) => loop {
                match changes.next().await {
                    Some(Ok(change)) => {
                        retry = Duration::from_millis(100);
                        let revision = change.revision();
                        let defines_types = served.defines_types(change.key());
                        if let Some(caches) = prefix_of(change.key()).and_then(|p| routes.get(p)) {
                            if let [cache] = caches.as_slice() {
                                cache.apply(change);
                            } else {
                                for cache in caches {
                                    cache.apply(change.clone());
                                }
                            }
                        }
                        if defines_types {
                            sync(store.as_ref(), &served).await;
                            routes = served.routes();
                        }
                        after = after.max(revision);
                        progress.advance(after);
                    }
                    Some(Err(err)) => break err,
                    None => break StoreError::backend("the store watch ended"),
                }
            },
            Err(err) => err,
        };
        if let StoreError::Expired { .. } = failure {
            tracing::warn!(
                after,
                "the store compacted past the caches: loading them again"
            );
            match reload(store.as_ref(), &routes).await {
                Ok(revision) => {
                    sync(store.as_ref(), &served).await;
                    routes = served.routes();
                    after = revision;
                    progress.advance(revision);
                    continue;
                }
                Err(err) => tracing::warn!(error = %err, "cannot load the caches; retrying"),
            }
        } else {
            tracing::warn!(error = %failure, retry = ?retry, "store watch failed; resuming");
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}

/// [`Served::sync`] until it succeeds (the store failing meanwhile holds the feed up,
/// as it would anyway).
async fn sync(store: &dyn Store, served: &Served) {
    let mut retry = Duration::from_millis(100);
    while let Err(err) = served.sync(store).await {
        tracing::warn!(error = %err, retry = ?retry, "cannot serve the CustomResourceDefinitions' types; retrying");
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}

async fn reload(store: &dyn Store, routes: &Routes) -> Result<Revision, StoreError> {
    let revision = store.current_revision().await?;
    load(store, routes, revision).await?;
    Ok(revision)
}

#[cfg(test)]
mod tests {
    use super::prefix_of;

    #[test]
    fn a_key_routes_by_group_and_plural() {
        assert_eq!(
            prefix_of("/registry/example.com/widgets/shop/w1"),
            Some("/registry/example.com/widgets/")
        );
        assert_eq!(
            prefix_of("/registry/core/namespaces/shop"),
            Some("/registry/core/namespaces/")
        );
        assert_eq!(prefix_of("/other"), None);
    }
}
