//! The served types and their caches. They start as the server's registry and change
//! while it runs when CustomResourceDefinitions are written ([`crate::apiextensions`]):
//! the feed calls [`Served::sync`] after each CRD change, before it reports progress,
//! so a request that waits for the caches to reach a CRD's write sees its types served.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::{Progress, WatchCache};
use crate::apiextensions;
use crate::registry::Registry;
use crate::storage::{Store, StoreError};

/// A type's key: (group, version, plural).
pub type TypeKey = (String, String, String);

/// One consistent view of what is served.
pub struct ServedTypes {
    /// Every served type.
    pub registry: Arc<Registry>,
    /// The cache of each.
    pub caches: HashMap<TypeKey, Arc<WatchCache>>,
}

/// What is served now, and how to follow the CRDs.
pub struct Served {
    base: Registry,
    capacity: usize,
    progress: Arc<Progress>,
    current: RwLock<Arc<ServedTypes>>,
}

impl Served {
    /// Serves `base`, each type with an empty cache keeping `capacity` changes.
    pub(super) fn new(base: Registry, capacity: usize, progress: Arc<Progress>) -> Served {
        let caches = base
            .all()
            .map(|rt| {
                (
                    key_of(rt),
                    WatchCache::new(rt.clone(), capacity, progress.clone()),
                )
            })
            .collect();
        Served {
            current: RwLock::new(Arc::new(ServedTypes {
                registry: Arc::new(base.clone()),
                caches,
            })),
            base,
            capacity,
            progress,
        }
    }

    /// What is served now.
    pub fn current(&self) -> Arc<ServedTypes> {
        self.current.read().expect("served types lock").clone()
    }

    /// The types served whatever the CRDs say.
    pub fn base(&self) -> &Registry {
        &self.base
    }

    /// The cache of one type, if served.
    pub fn cache(&self, group: &str, version: &str, plural: &str) -> Option<Arc<WatchCache>> {
        self.current()
            .caches
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// Whether a change of the store key `key` changes what is served (a CRD's).
    pub(super) fn defines_types(&self, key: &str) -> bool {
        self.base
            .get(apiextensions::GROUP, "v1", apiextensions::PLURAL)
            .is_some_and(|rt| key.starts_with(&rt.key_prefix(None)))
    }

    /// Serves what the CRDs in the CRD cache define: new types get a cache loaded from
    /// the store, changed types a new one (their watches end; clients relist), types no
    /// longer defined are no longer served and, when their CRD is gone, their objects
    /// are deleted from the store (as kube-apiserver deletes the custom resources of a
    /// deleted CRD; finalizers of those objects are not waited for).
    pub(super) async fn sync(&self, store: &dyn Store) -> Result<(), StoreError> {
        let Some(crd_cache) = self.cache(apiextensions::GROUP, "v1", apiextensions::PLURAL) else {
            return Ok(()); // CRDs are not served here
        };
        let crds: Vec<Value> = crd_cache
            .list(None, None, |_| true)
            .objects
            .iter()
            .filter_map(|o| o.value().ok())
            .collect();
        let registry = apiextensions::served_registry(&self.base, &crds);
        let old = self.current();
        let mut caches = HashMap::new();
        for rt in registry.all() {
            let key = key_of(rt);
            match old.caches.get(&key) {
                Some(cache) if same_type(cache, rt) => {
                    caches.insert(key, cache.clone());
                }
                _ => {
                    let cache = WatchCache::new(rt.clone(), self.capacity, self.progress.clone());
                    let (items, revision) = store.list_all(&rt.key_prefix(None)).await?;
                    cache.load(&items, revision);
                    caches.insert(key, cache);
                }
            }
        }
        let mut gone = Vec::new();
        for (key, cache) in &old.caches {
            if caches.contains_key(key) {
                continue;
            }
            let rt = cache.resource_type();
            // Ends its watches: their clients see the type go.
            cache.load(&[], self.progress.synced());
            let prefix = rt.key_prefix(None);
            if !apiextensions::defined_by(&crds, &rt.group, &rt.plural)
                && !registry.all().any(|t| t.key_prefix(None) == prefix)
                && !gone.contains(&prefix)
            {
                gone.push(prefix);
            }
        }
        *self.current.write().expect("served types lock") = Arc::new(ServedTypes {
            registry: Arc::new(registry),
            caches,
        });
        for prefix in gone {
            let (items, _) = store.list_all(&prefix).await?;
            tracing::info!(%prefix, objects = items.len(), "a CustomResourceDefinition is gone: deleting its objects");
            for kv in items {
                match store.delete(&kv.key, None).await {
                    Ok(_) | Err(StoreError::NotFound { .. }) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        Ok(())
    }

    /// The caches of each store prefix (`/registry/<group>/<plural>/`; the versions of
    /// one type share it).
    pub(super) fn routes(&self) -> HashMap<String, Vec<Arc<WatchCache>>> {
        let mut routes: HashMap<String, Vec<Arc<WatchCache>>> = HashMap::new();
        for cache in self.current().caches.values() {
            routes
                .entry(cache.resource_type().key_prefix(None))
                .or_default()
                .push(cache.clone());
        }
        routes
    }
}

fn key_of(rt: &crate::registry::ResourceType) -> TypeKey {
    (rt.group.clone(), rt.version.clone(), rt.plural.clone())
}

/// Whether `cache` serves exactly `rt` (a CRD update may change a version's schema,
/// columns or scope; its cache then starts again with the new type).
fn same_type(cache: &WatchCache, rt: &crate::registry::ResourceType) -> bool {
    let served = cache.resource_type();
    std::ptr::eq(served.as_ref(), rt) || format!("{served:?}") == format!("{rt:?}")
}
