//! The watch caches: every object of every served type in memory, kept current by one
//! store watch of the whole keyspace ([`feed`]), like kube-apiserver's cacher. Lists
//! and watches are served from here, never from the store; clients never open store
//! watches of their own. How it works, and why, is in `README.md` next to this file.
//!
//! * Each object is kept as its JSON, encoded once ([`CachedObject`]); lists and watch
//!   events are written from it without decoding.
//! * Objects are indexed by the owner they name (a type's [`crate::registry::IndexBy`]: a label and a
//!   field), so a list and watch of one owner's objects touch only those.
//! * A window of recent changes per type serves watches from an older revision; one
//!   older than the window is `Gone` (410) and the client relists.
//! * A change is queued only for the watchers it concerns ([`watchers`]).

pub mod feed;
mod object;
mod own_writes;
mod served;
pub mod snapshots;
mod watchers;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::registry::ResourceType;
use crate::storage::{KeyValue, Revision, WatchEvent};

pub use feed::{CacheSet, Progress};
pub use object::CachedObject;
pub use served::{Served, ServedTypes, TypeKey};
pub use watchers::{LiveEvents, QUEUE, Stopped};

/// The most bytes of objects one type's window keeps (besides its count limit): a type
/// with large objects keeps fewer changes.
pub const WINDOW_BYTES: usize = 32 << 20;
/// Changes a window keeps whatever their size.
const MIN_WINDOW: usize = 100;
/// The shortest dictionary a type's compressed objects are compressed against
/// ([`Dictionary`]): a few Plans or Installs.
const DICTIONARY_BYTES: usize = 8 * 1024;
/// The longest: LZ4 looks back 64 KiB, and the dictionary's cost to each compression
/// grows with it. Two rendered stacks (≈ 20 KiB each) fill it.
const DICTIONARY_MAX_BYTES: usize = 32 * 1024;

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

    /// What comes before the object in the event's line.
    fn head(self) -> &'static [u8] {
        match self {
            EventType::Added => b"{\"type\":\"ADDED\",\"object\":",
            EventType::Modified => b"{\"type\":\"MODIFIED\",\"object\":",
            EventType::Deleted => b"{\"type\":\"DELETED\",\"object\":",
        }
    }
}

/// A change to one object, shared by every watcher.
#[derive(Debug)]
pub struct CachedEvent {
    /// The store revision of the change.
    pub revision: Revision,
    /// The object after the change (for a delete: its last state, at the delete's revision).
    pub object: Arc<CachedObject>,
    /// The object before the change, if it existed.
    pub prev: Option<Arc<CachedObject>>,
    /// Whether the change deleted the object.
    pub deleted: bool,
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

    /// The event as one line of a watch response.
    pub fn line(&self, event_type: EventType) -> Line {
        Line::Event(event_type, self.object.json())
    }
}

/// One line of a watch response.
///
/// An event's line is the object's JSON as the cache keeps it between a head
/// (`{"type":"ADDED","object":`) and a tail (`}\n`), sent as three chunks: the JSON is
/// not copied. Encoding each event's line once and keeping it with the event held a second
/// copy of every object in the window for as long as the event stayed there, and every
/// watch's initial events were copies of the objects it listed (`outpost bench fleet
/// --installs 300`, heaptrack: 41 of the API server's 204 MiB were those lines).
#[derive(Clone, Debug)]
pub enum Line {
    /// A line of its own (bookmarks, errors, table rows).
    Whole(Bytes),
    /// A watch event of this type around an object's JSON.
    Event(EventType, Bytes),
}

impl Line {
    /// The line's bytes, in the order they are sent.
    pub fn chunks(self) -> impl Iterator<Item = Bytes> {
        let (first, rest) = match self {
            Line::Whole(line) => (line, None),
            Line::Event(event_type, object) => (
                Bytes::from_static(event_type.head()),
                Some([object, Bytes::from_static(b"}\n")]),
            ),
        };
        std::iter::once(first).chain(rest.into_iter().flatten())
    }
}

/// One line of a watch response for a value (bookmarks, errors, table rows).
pub fn encode_line(event_type: &str, object: &Value) -> Line {
    let mut line =
        serde_json::to_vec(&json!({"type": event_type, "object": object})).expect("JSON encodes");
    line.push(b'\n');
    Line::Whole(Bytes::from(line))
}

/// Why a watch cannot start from a revision.
#[derive(Debug)]
pub struct TooOld {
    /// The oldest revision that can be watched from.
    pub oldest: Revision,
}

/// A watcher's start: the window's changes after its revision, then the live ones, with
/// no gap between them.
pub struct Subscription {
    /// Changes after the requested revision that were already in the window.
    pub backlog: Vec<Arc<CachedEvent>>,
    /// Every later change that concerns the watcher.
    pub live: LiveEvents,
}

/// A consistent snapshot: objects, the revision they are at, and the changes after it.
pub struct Snapshot {
    /// The objects that passed the filter, in key order.
    pub objects: Vec<Arc<CachedObject>>,
    /// The revision the snapshot is at.
    pub revision: Revision,
}

/// How much a cache holds (for `/metrics`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    /// Objects.
    pub objects: usize,
    /// Bytes of their JSON (as held: compressed or not) and selector fields, and of the
    /// dictionary its compressed objects are compressed against.
    pub bytes: usize,
    /// Changes in the window.
    pub window: usize,
    /// Bytes of the objects those changes carry.
    pub window_bytes: usize,
    /// Watchers filed under an index value.
    pub indexed_watchers: usize,
    /// Watchers of every change.
    pub other_watchers: usize,
    /// Objects lists and gets have looked at since start: those of one index value when
    /// the index names it, every object of the namespace otherwise.
    pub objects_read: u64,
}

struct State {
    objects: BTreeMap<String, Arc<CachedObject>>,
    /// Index value → keys of the objects filed under it.
    by_index: HashMap<String, BTreeSet<String>>,
    bytes: usize,
    events: VecDeque<Arc<CachedEvent>>,
    /// Bytes of the objects the window's events carry.
    window_bytes: usize,
    /// Watches after this revision can be served from the window.
    oldest: Revision,
    /// The revision of the last change applied (or of the last load).
    latest: Revision,
    watchers: watchers::Watchers,
}

/// The cache of one resource type.
pub struct WatchCache {
    rt: Arc<ResourceType>,
    capacity: usize,
    progress: Arc<Progress>,
    state: RwLock<State>,
    /// Objects lists and gets looked at ([`CacheStats::objects_read`]).
    objects_read: AtomicU64,
    dictionary: Mutex<Dictionary>,
    /// What this server wrote that the cache may not have yet.
    own_writes: own_writes::OwnWrites,
    /// The objects of lists that did not fit their `limit`, for their continue pages.
    snapshots: snapshots::Snapshots,
}

/// The dictionary a type's compressed objects ([`crate::registry::Compressed`]) are
/// compressed against: the JSON of its first such objects, twice the first one's length
/// (at least [`DICTIONARY_BYTES`], at most [`DICTIONARY_MAX_BYTES`]). Those few are held
/// as they are; every later one is compressed against them (and keeps them: a reload
/// keeps the dictionary).
#[derive(Default)]
struct Dictionary {
    made: Option<Arc<[u8]>>,
    making: Vec<u8>,
    /// How long it is to be, set by the first object.
    length: usize,
}

impl Dictionary {
    /// The dictionary to compress `object` against, once made; until then `object`'s
    /// JSON goes into it.
    fn for_object(&mut self, object: &CachedObject) -> Option<Arc<[u8]>> {
        if self.made.is_none() {
            let json = object.json();
            if self.making.is_empty() {
                self.length = (2 * json.len()).clamp(DICTIONARY_BYTES, DICTIONARY_MAX_BYTES);
            }
            self.making.extend_from_slice(&json);
            if self.making.len() < self.length {
                return None;
            }
            let start = self.making.len() - self.length;
            self.made = Some(Arc::from(&self.making[start..]));
            self.making = Vec::new();
            return None;
        }
        self.made.clone()
    }
}

impl WatchCache {
    /// An empty cache of `rt` keeping `capacity` changes, at revision 0 until loaded.
    pub fn new(rt: Arc<ResourceType>, capacity: usize, progress: Arc<Progress>) -> Arc<Self> {
        Arc::new(WatchCache {
            rt,
            capacity: capacity.max(16),
            progress,
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                by_index: HashMap::new(),
                bytes: 0,
                events: VecDeque::new(),
                window_bytes: 0,
                oldest: 0,
                latest: 0,
                watchers: Default::default(),
            }),
            objects_read: AtomicU64::new(0),
            dictionary: Mutex::default(),
            own_writes: own_writes::OwnWrites::default(),
            snapshots: snapshots::Snapshots::default(),
        })
    }

    /// The stored object as the cache holds it: compressed against the type's dictionary
    /// when the type compresses it.
    fn cached(&self, kv: &KeyValue) -> Result<CachedObject, crate::status::ApiError> {
        let mut object = CachedObject::from_store(&self.rt, kv)?;
        if object.compressed(&self.rt) {
            let dictionary = self
                .dictionary
                .lock()
                .expect("watch cache dictionary lock")
                .for_object(&object);
            if let Some(dictionary) = dictionary {
                object.compress_with(&dictionary);
            }
        }
        Ok(object)
    }

    /// The resource type.
    pub fn resource_type(&self) -> &Arc<ResourceType> {
        &self.rt
    }

    /// How the feed tells how far the store has been followed.
    pub fn progress(&self) -> &Arc<Progress> {
        &self.progress
    }

    /// Replaces the contents with `items`, read at `revision`, and ends every watch
    /// (their clients relist). Items that do not decode are left out and logged.
    pub fn load(&self, items: &[KeyValue], revision: Revision) {
        let mut objects = BTreeMap::new();
        let mut by_index: HashMap<String, BTreeSet<String>> = HashMap::new();
        let mut bytes = 0;
        for kv in items {
            match self.cached(kv) {
                Ok(object) => {
                    for key in object.index_keys(self.rt.index.as_ref()) {
                        by_index
                            .entry(key.to_owned())
                            .or_default()
                            .insert(kv.key.clone());
                    }
                    bytes += object.size();
                    objects.insert(kv.key.clone(), Arc::new(object));
                }
                Err(err) => {
                    tracing::error!(key = %kv.key, error = %err, "undecodable object in the store")
                }
            }
        }
        let mut state = self.state.write().expect("watch cache lock");
        state.objects = objects;
        state.by_index = by_index;
        state.bytes = bytes;
        state.events.clear();
        state.window_bytes = 0;
        state.oldest = revision;
        state.latest = revision;
        state.watchers.clear();
    }

    /// Applies one change from the store and queues it for the watchers it concerns.
    pub fn apply(&self, change: WatchEvent) {
        let revision = change.revision();
        let key = change.key().to_owned();
        // A put's object is made (read, and compressed when its type says so) before the
        // lock is taken: the cache's readers (lists, an update's read of the current
        // object) do not wait for it.
        let put = match &change {
            WatchEvent::Put { kv, .. } => match self.cached(kv) {
                Ok(object) => Ok(Arc::new(object)),
                Err(err) => {
                    tracing::error!(%key, error = %err, "undecodable object in the store");
                    return;
                }
            },
            // A delete: its object is its last state, made under the lock.
            WatchEvent::Delete { prev: last, .. } => Err(last),
        };
        let mut state = self.state.write().expect("watch cache lock");
        if revision <= state.latest {
            return;
        }
        let prev = state.objects.get(&key).cloned();
        let (object, deleted) = match put {
            Ok(object) => (object, false),
            Err(last) => {
                let last = match &prev {
                    Some(cached) => cached.deleted_at(&self.rt, revision),
                    None => CachedObject::from_store(&self.rt, last)
                        .and_then(|o| o.deleted_at(&self.rt, revision)),
                };
                match last {
                    Ok(object) => (Arc::new(object), true),
                    Err(err) => {
                        tracing::error!(%key, error = %err, "undecodable object in the store");
                        return;
                    }
                }
            }
        };
        state.latest = revision;
        if let Some(prev) = &prev {
            state.bytes -= prev.size();
            for index in prev.index_keys(self.rt.index.as_ref()) {
                if let Some(keys) = state.by_index.get_mut(index) {
                    keys.remove(&key);
                    if keys.is_empty() {
                        state.by_index.remove(index);
                    }
                }
            }
        }
        if deleted {
            state.objects.remove(&key);
        } else {
            state.bytes += object.size();
            for index in object.index_keys(self.rt.index.as_ref()) {
                state
                    .by_index
                    .entry(index.to_owned())
                    .or_default()
                    .insert(key.clone());
            }
            state.objects.insert(key, object.clone());
        }
        let event = Arc::new(CachedEvent {
            revision,
            object,
            prev,
            deleted,
        });
        state.window_bytes += event.object.size();
        state.events.push_back(event.clone());
        while state.events.len() > self.capacity
            || (state.window_bytes > WINDOW_BYTES && state.events.len() > MIN_WINDOW)
        {
            if let Some(dropped) = state.events.pop_front() {
                state.oldest = dropped.revision;
                state.window_bytes -= dropped.object.size();
            }
        }
        let keys: Vec<String> = event
            .object
            .index_keys(self.rt.index.as_ref())
            .chain(
                event
                    .prev
                    .iter()
                    .flat_map(|p| p.index_keys(self.rt.index.as_ref())),
            )
            .map(str::to_owned)
            .collect();
        state
            .watchers
            .deliver(&event, keys.iter().map(String::as_str));
    }

    /// The revision the cache is at: every change up to it is applied.
    pub fn revision(&self) -> Revision {
        let state = self.state.read().expect("watch cache lock");
        self.snapshot_revision(&state)
    }

    fn snapshot_revision(&self, state: &State) -> Revision {
        // The feed advances the progress only after applying a change to its cache, so
        // every change of this type up to the progress is in `state`.
        state.latest.max(self.progress.synced())
    }

    /// The objects in `namespace` (every namespace when `None`) that `keep` accepts,
    /// looked up by `index` (an index value) when given, and the revision they are at.
    pub fn list(
        &self,
        namespace: Option<&str>,
        index: Option<&str>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Snapshot {
        let state = self.state.read().expect("watch cache lock");
        Snapshot {
            objects: self.select(&state, namespace, index, keep),
            revision: self.snapshot_revision(&state),
        }
    }

    /// As [`WatchCache::list`], for a list answered `limit` objects a page (0: all at
    /// once). When more than `limit` pass, every object under the namespace's prefix at
    /// the same revision is kept for the list's continue pages
    /// ([`WatchCache::snapshot_at`]).
    pub fn list_paged(
        &self,
        namespace: Option<&str>,
        index: Option<&str>,
        keep: impl Fn(&CachedObject) -> bool,
        limit: usize,
    ) -> Snapshot {
        let state = self.state.read().expect("watch cache lock");
        let objects = self.select(&state, namespace, index, keep);
        let revision = self.snapshot_revision(&state);
        if limit > 0 && objects.len() > limit {
            let all = self.select(&state, namespace, None, |_| true);
            self.snapshots
                .keep(self.rt.key_prefix(namespace), revision, all.into());
        }
        Snapshot { objects, revision }
    }

    /// Every object in `namespace` (every namespace when `None`) at `revision`, in key
    /// order, if a list at that revision kept them ([`WatchCache::list_paged`]) and they
    /// are still kept ([`snapshots::KEPT`], [`snapshots::KEPT_FOR`]).
    pub fn snapshot_at(
        &self,
        namespace: Option<&str>,
        revision: Revision,
    ) -> Option<snapshots::Objects> {
        self.snapshots
            .find(&self.rt.key_prefix(namespace), revision)
    }

    fn select(
        &self,
        state: &State,
        namespace: Option<&str>,
        index: Option<&str>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Vec<Arc<CachedObject>> {
        let prefix = self.rt.key_prefix(namespace);
        let read = AtomicU64::new(0);
        let pass = |o: &&Arc<CachedObject>| {
            read.fetch_add(1, Ordering::Relaxed);
            o.key.starts_with(&prefix) && keep(o)
        };
        let selected = match index {
            Some(index) => state
                .by_index
                .get(index)
                .into_iter()
                .flatten()
                .filter_map(|key| state.objects.get(key))
                .filter(pass)
                .cloned()
                .collect(),
            None => state
                .objects
                .range(prefix.clone()..)
                .map(|(_, o)| o)
                .take_while(|o| o.key.starts_with(&prefix))
                .filter(pass)
                .cloned()
                .collect(),
        };
        self.objects_read
            .fetch_add(read.into_inner(), Ordering::Relaxed);
        selected
    }

    /// A snapshot (as [`WatchCache::list`]) and a subscription to every later change,
    /// taken together so that no change falls between them.
    pub fn list_and_subscribe(
        self: &Arc<Self>,
        namespace: Option<&str>,
        index: Option<&str>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> (Snapshot, LiveEvents) {
        let mut state = self.state.write().expect("watch cache lock");
        let snapshot = Snapshot {
            objects: self.select(&state, namespace, index, keep),
            revision: self.snapshot_revision(&state),
        };
        let live = state.watchers.add(self, index.map(str::to_owned));
        (snapshot, live)
    }

    /// The window's changes after `revision`, and every later change that concerns a
    /// watcher filed under `index`, with no gap between them.
    pub fn subscribe(
        self: &Arc<Self>,
        revision: Revision,
        index: Option<&str>,
    ) -> Result<Subscription, TooOld> {
        let mut state = self.state.write().expect("watch cache lock");
        if revision < state.oldest {
            return Err(TooOld {
                oldest: state.oldest,
            });
        }
        let start = state.events.partition_point(|e| e.revision <= revision);
        let backlog = state.events.range(start..).cloned().collect();
        let live = state.watchers.add(self, index.map(str::to_owned));
        Ok(Subscription { backlog, live })
    }

    fn unsubscribe(&self, id: u64, index: Option<&str>) {
        self.state
            .write()
            .expect("watch cache lock")
            .watchers
            .remove(id, index);
    }

    /// The object `namespace/name`, as the cache has it.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let key = self.rt.key(namespace, name);
        self.objects_read.fetch_add(1, Ordering::Relaxed);
        self.state
            .read()
            .expect("watch cache lock")
            .objects
            .get(&key)
            .cloned()
    }

    /// Notes that this server wrote `namespace/name` (created, updated or deleted it) at
    /// `revision`: until the cache reaches that revision, [`Self::get_current`] leaves the
    /// object to the store.
    pub fn wrote(&self, namespace: Option<&str>, name: &str, revision: Revision) {
        self.own_writes.wrote(namespace, name, revision);
    }

    /// The object `namespace/name` as the cache has it, to write over: `None` when the
    /// cache does not hold it, or when this server wrote it at a revision the cache has
    /// not reached yet (its copy is older than that write; see `own_writes`). Either way
    /// the caller reads the store.
    pub fn get_current(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let written = self.own_writes.newest(namespace, name);
        if written > self.revision() {
            return None;
        }
        self.get(namespace, name)
    }

    /// The object at exactly `revision`, if that is its newest state the cache has seen.
    /// Saves a store read when a client updates what it last read.
    pub fn object_at(
        &self,
        namespace: Option<&str>,
        name: &str,
        revision: Revision,
    ) -> Option<Value> {
        let object = self.get(namespace, name)?;
        (object.revision == revision)
            .then(|| object.value().ok())
            .flatten()
    }

    /// How much the cache holds.
    pub fn stats(&self) -> CacheStats {
        let state = self.state.read().expect("watch cache lock");
        let (indexed_watchers, other_watchers) = state.watchers.counts();
        CacheStats {
            objects: state.objects.len(),
            bytes: state.bytes
                + self
                    .dictionary
                    .lock()
                    .expect("watch cache dictionary lock")
                    .made
                    .as_ref()
                    .map_or(0, |d| d.len()),
            window: state.events.len(),
            window_bytes: state.window_bytes,
            indexed_watchers,
            other_watchers,
            objects_read: self.objects_read.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
