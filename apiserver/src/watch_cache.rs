//! One store watch per resource type, fanned out to every client through a window of
//! recent events. Clients never open store watches of their own.
//!
//! A client watch from revision `rv` gets the window's events after `rv`, then live
//! events, with no gap: it subscribes under the same lock the cache takes to append.
//! A revision older than the window is `Gone` (410); the client relists.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::object_meta::{from_store, set_resource_version};
use crate::registry::ResourceType;
use crate::storage::{Revision, Store, StoreError, WatchEvent};

/// The kind of a watch event, as Kubernetes names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// The object appeared.
    Added,
    /// The object changed.
    Modified,
    /// The object is gone.
    Deleted,
}

impl EventType {
    /// `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A change to one object, decoded once and shared by every watcher.
#[derive(Debug)]
pub struct CachedEvent {
    /// The store revision of the change.
    pub revision: Revision,
    /// The object after the change (for a delete: its last state, at the delete's revision).
    pub object: Arc<Value>,
    /// The object before the change, if it existed.
    pub prev: Option<Arc<Value>>,
    /// Whether the change deleted the object.
    pub deleted: bool,
    encoded: [OnceLock<Bytes>; 3],
}

impl CachedEvent {
    /// The event type for a watcher that sees every object.
    pub fn event_type(&self) -> EventType {
        match (self.deleted, &self.prev) {
            (true, _) => EventType::Deleted,
            (false, None) => EventType::Added,
            (false, Some(_)) => EventType::Modified,
        }
    }

    /// The event as one line of a watch response, encoded once per type.
    pub fn encoded(&self, event_type: EventType) -> Bytes {
        self.encoded[event_type.index()]
            .get_or_init(|| encode_line(event_type.as_str(), &self.object))
            .clone()
    }

    fn from_store(event: WatchEvent) -> Result<CachedEvent, crate::status::ApiError> {
        let (revision, object, prev, deleted) = match event {
            WatchEvent::Put { kv, prev } => (
                kv.mod_revision,
                from_store(&kv)?,
                prev.as_ref().map(from_store).transpose()?,
                false,
            ),
            WatchEvent::Delete { prev, revision } => {
                let mut last = from_store(&prev)?;
                set_resource_version(&mut last, revision);
                (revision, last.clone(), Some(from_store(&prev)?), true)
            }
        };
        Ok(CachedEvent {
            revision,
            object: Arc::new(object),
            prev: prev.map(Arc::new),
            deleted,
            encoded: Default::default(),
        })
    }
}

fn object_id(object: &Value) -> String {
    let field = |f: &str| {
        object
            .pointer(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!(
        "{}/{}",
        field("/metadata/namespace"),
        field("/metadata/name")
    )
}

/// One line of a watch response: `{"object":{...},"type":"ADDED"}\n` (serde_json writes
/// keys sorted; clients read the fields by name).
pub fn encode_line(event_type: &str, object: &Value) -> Bytes {
    let mut line =
        serde_json::to_vec(&json!({"type": event_type, "object": object})).expect("JSON encodes");
    line.push(b'\n');
    Bytes::from(line)
}

struct Window {
    events: VecDeque<Arc<CachedEvent>>,
    /// The newest state of every object changed since the cache started, by
    /// `namespace/name` (`/name` when cluster-scoped).
    objects: HashMap<String, Arc<Value>>,
    /// Watches after this revision can be served.
    oldest: Revision,
    /// The revision of the newest change seen.
    latest: Revision,
    live: broadcast::Sender<Arc<CachedEvent>>,
}

/// The window's events after a revision, and a receiver of every later one.
pub type Subscription = (Vec<Arc<CachedEvent>>, broadcast::Receiver<Arc<CachedEvent>>);

/// Why a watch cannot start.
#[derive(Debug)]
pub struct TooOld {
    /// The oldest revision that can be watched from.
    pub oldest: Revision,
}

/// The watch cache of one resource type.
pub struct WatchCache {
    rt: Arc<ResourceType>,
    capacity: usize,
    window: RwLock<Window>,
}

impl WatchCache {
    /// Starts following `rt`'s objects in `store` from the current revision.
    pub async fn start(
        store: Arc<dyn Store>,
        rt: Arc<ResourceType>,
        capacity: usize,
    ) -> Result<Arc<WatchCache>, StoreError> {
        let revision = store.current_revision().await?;
        let cache = Arc::new(WatchCache {
            rt,
            capacity: capacity.max(16),
            window: RwLock::new(Window {
                events: VecDeque::new(),
                objects: HashMap::new(),
                oldest: revision,
                latest: revision,
                live: broadcast::channel(4096).0,
            }),
        });
        let stream = store.watch(&cache.rt.key_prefix(None), revision).await?;
        tokio::spawn(cache.clone().follow(store, stream));
        Ok(cache)
    }

    /// The resource type.
    pub fn resource_type(&self) -> &Arc<ResourceType> {
        &self.rt
    }

    /// The revision of the newest change seen.
    pub fn latest(&self) -> Revision {
        self.window.read().expect("watch cache lock").latest
    }

    /// The object at exactly `revision`, if that is its newest state the cache has seen.
    /// Saves a store read when a client updates what it last read.
    pub fn object_at(
        &self,
        namespace: Option<&str>,
        name: &str,
        revision: Revision,
    ) -> Option<Arc<Value>> {
        let window = self.window.read().expect("watch cache lock");
        let object = window
            .objects
            .get(&format!("{}/{name}", namespace.unwrap_or_default()))?;
        let rv = object.pointer("/metadata/resourceVersion")?.as_str()?;
        (rv.parse::<Revision>().ok()? == revision).then(|| object.clone())
    }

    /// The events after `revision` still in the window, and a receiver of every later
    /// one, with no gap between them.
    pub fn watch_from(&self, revision: Revision) -> Result<Subscription, TooOld> {
        let window = self.window.read().expect("watch cache lock");
        if revision < window.oldest {
            return Err(TooOld {
                oldest: window.oldest,
            });
        }
        let start = window.events.partition_point(|e| e.revision <= revision);
        let backlog = window.events.range(start..).cloned().collect();
        Ok((backlog, window.live.subscribe()))
    }

    async fn follow(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        mut stream: crate::storage::WatchStream,
    ) {
        let prefix = self.rt.key_prefix(None);
        loop {
            while let Some(next) = stream.next().await {
                let event = match next {
                    Ok(event) => event,
                    Err(err) => {
                        tracing::warn!(resource = %self.rt.qualified_resource(), error = %err, "store watch failed");
                        break;
                    }
                };
                match CachedEvent::from_store(event) {
                    Ok(event) => self.push(Arc::new(event)),
                    Err(err) => tracing::error!(error = %err, "undecodable object in the store"),
                }
            }
            // Resume where we were; if that history is gone, start over and cut every
            // watcher off so they come back and relist.
            loop {
                let latest = self.latest();
                match store.watch(&prefix, latest).await {
                    Ok(s) => {
                        stream = s;
                        break;
                    }
                    Err(StoreError::Expired { .. }) => {
                        if let Ok(now) = store.current_revision().await {
                            self.reset(now);
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot re-establish the store watch; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
    }

    fn push(&self, event: Arc<CachedEvent>) {
        let mut window = self.window.write().expect("watch cache lock");
        if event.revision <= window.latest {
            return;
        }
        window.latest = event.revision;
        let id = object_id(&event.object);
        if event.deleted {
            window.objects.remove(&id);
        } else {
            window.objects.insert(id, event.object.clone());
        }
        window.events.push_back(event.clone());
        while window.events.len() > self.capacity {
            if let Some(dropped) = window.events.pop_front() {
                window.oldest = dropped.revision;
            }
        }
        // No receivers is fine.
        let _ = window.live.send(event);
    }

    fn reset(&self, revision: Revision) {
        let mut window = self.window.write().expect("watch cache lock");
        window.events.clear();
        window.objects.clear();
        window.oldest = revision;
        window.latest = revision;
        // Dropping the old sender ends every live watch.
        window.live = broadcast::channel(4096).0;
    }
}
