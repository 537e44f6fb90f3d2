//! Who gets a change: watchers filed under the index value they select (an owner's
//! watch of its objects) get only the changes of that value's objects; the others get every
//! change of the type. Each has a queue of its own, so a change wakes only the watchers
//! it concerns, and one slow watcher never holds up the rest: when its queue is full
//! it is dropped from the table and told it lagged, and it catches up from the window.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::{CachedEvent, WatchCache};
use crate::storage::Revision;

/// Changes a watcher may have queued before it counts as lagging.
pub const QUEUE: usize = 16_384;

struct Slot {
    tx: mpsc::Sender<Arc<CachedEvent>>,
    lagged: Arc<AtomicBool>,
}

/// The watchers of one cache.
#[derive(Default)]
pub(super) struct Watchers {
    next: u64,
    by_index: HashMap<String, HashMap<u64, Slot>>,
    all: HashMap<u64, Slot>,
}

impl Watchers {
    /// Files a new watcher (under `index` when it selects one index value's objects).
    pub(super) fn add(&mut self, cache: &Arc<WatchCache>, index: Option<String>) -> LiveEvents {
        let (tx, rx) = mpsc::channel(QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let id = self.next;
        self.next += 1;
        let slot = Slot {
            tx,
            lagged: lagged.clone(),
        };
        match &index {
            Some(key) => {
                self.by_index
                    .entry(key.clone())
                    .or_default()
                    .insert(id, slot);
            }
            None => {
                self.all.insert(id, slot);
            }
        }
        LiveEvents {
            rx,
            lagged,
            cache: Arc::downgrade(cache),
            id,
            index,
        }
    }

    pub(super) fn remove(&mut self, id: u64, index: Option<&str>) {
        match index {
            Some(key) => {
                if let Some(slots) = self.by_index.get_mut(key) {
                    slots.remove(&id);
                    if slots.is_empty() {
                        self.by_index.remove(key);
                    }
                }
            }
            None => {
                self.all.remove(&id);
            }
        }
    }

    /// Queues `event` for every watcher it concerns: those filed under one of `keys`
    /// (the index values of the object before and after the change) and the unfiled ones.
    pub(super) fn deliver<'k>(
        &mut self,
        event: &Arc<CachedEvent>,
        keys: impl IntoIterator<Item = &'k str>,
    ) {
        let mut seen: Vec<&str> = Vec::with_capacity(2);
        for key in keys {
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            if let Some(slots) = self.by_index.get_mut(key) {
                offer(slots, event);
                if slots.is_empty() {
                    self.by_index.remove(key);
                }
            }
        }
        offer(&mut self.all, event);
    }

    /// Ends every watcher (they see their stream close, not a lag).
    pub(super) fn clear(&mut self) {
        self.by_index.clear();
        self.all.clear();
    }

    /// Watchers filed under an index value, and the others.
    pub(super) fn counts(&self) -> (usize, usize) {
        (
            self.by_index.values().map(HashMap::len).sum(),
            self.all.len(),
        )
    }
}

fn offer(slots: &mut HashMap<u64, Slot>, event: &Arc<CachedEvent>) {
    slots.retain(|_, slot| match slot.tx.try_send(event.clone()) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            slot.lagged.store(true, Ordering::Release);
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    });
}

/// Why a watcher's live events stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Its queue overflowed: it must catch up from the window (or relist).
    Lagged,
    /// The cache ended every watch (it relisted after the store's history was
    /// compacted): the client must relist.
    Closed,
}

/// The changes queued for one watcher. Dropping it files the watcher out.
pub struct LiveEvents {
    rx: mpsc::Receiver<Arc<CachedEvent>>,
    lagged: Arc<AtomicBool>,
    cache: Weak<WatchCache>,
    id: u64,
    index: Option<String>,
}

impl LiveEvents {
    /// The next change, in revision order.
    pub async fn recv(&mut self) -> Result<Arc<CachedEvent>, Stopped> {
        match self.rx.recv().await {
            Some(event) => Ok(event),
            None if self.lagged.load(Ordering::Acquire) => Err(Stopped::Lagged),
            None => Err(Stopped::Closed),
        }
    }

    /// The changes queued for this watcher, taken without waiting, and the revision it
    /// has then been sent every change up to: the cache's, read before the queue was
    /// emptied (the cache queues a change for its watchers before its revision passes
    /// it). `None` for the revision when the watcher lagged or the cache ended it: then
    /// only the last change taken says how far it got.
    ///
    /// A quiet watcher's BOOKMARK carries that revision, so the watcher can resume from
    /// it after the window has moved past its own last change.
    pub fn drain(&mut self) -> (Vec<Arc<CachedEvent>>, Option<Revision>) {
        let progress = self.cache.upgrade().map(|cache| cache.revision());
        let mut events = Vec::new();
        loop {
            match self.rx.try_recv() {
                Ok(event) => events.push(event),
                Err(mpsc::error::TryRecvError::Empty) => return (events, progress),
                Err(mpsc::error::TryRecvError::Disconnected) => return (events, None),
            }
        }
    }

    /// The index value the watcher is filed under, if any.
    pub fn index(&self) -> Option<&str> {
        self.index.as_deref()
    }
}

impl Drop for LiveEvents {
    fn drop(&mut self) {
        if let Some(cache) = self.cache.upgrade() {
            cache.unsubscribe(self.id, self.index.as_deref());
        }
    }
}
