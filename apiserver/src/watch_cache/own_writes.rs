//! The revisions this server wrote objects at, until its watch cache has them.
//!
//! A patch starts from the cache's copy of its object ([`super::WatchCache::get_current`])
//! and writes on the condition that the object is still at that copy's revision. The
//! cache follows the store a moment behind, so a client that writes an object twice in a
//! row (a controller's status after its finalizer, two steps of one reconcile) could
//! have its second patch start from the copy before its first: the store refuses that
//! write, and the server reads the store and writes again. Every write this server makes
//! is noted here by key; a key written at a revision the cache has not reached is read
//! from the store at once, without the refused write.
//!
//! The keys share [`SLOTS`] slots by hash, each holding the newest revision written to
//! any of its keys: a key is taken for written when another key of its slot was written
//! since the cache's revision, which only costs that read a store read. Nothing here can
//! make a write succeed that the store would refuse.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};

use crate::storage::Revision;

/// Slots per resource type: writes in flight at once are far fewer, so two of them
/// rarely share one.
const SLOTS: usize = 1024;

pub(super) struct OwnWrites {
    slots: Box<[AtomicI64]>,
}

impl Default for OwnWrites {
    fn default() -> Self {
        OwnWrites {
            slots: (0..SLOTS).map(|_| AtomicI64::new(0)).collect(),
        }
    }
}

impl OwnWrites {
    fn slot(&self, namespace: Option<&str>, name: &str) -> &AtomicI64 {
        let mut hasher = DefaultHasher::new();
        (namespace, name).hash(&mut hasher);
        // Truncation is the point: any bits of the hash pick a slot.
        #[allow(clippy::cast_possible_truncation)]
        let i = hasher.finish() as usize % SLOTS;
        &self.slots[i]
    }

    /// `namespace/name` was written at `revision`.
    pub(super) fn wrote(&self, namespace: Option<&str>, name: &str, revision: Revision) {
        self.slot(namespace, name)
            .fetch_max(revision, Ordering::Relaxed);
    }

    /// The newest revision `namespace/name` (or a key sharing its slot) was written at
    /// by this server; 0 if none.
    pub(super) fn newest(&self, namespace: Option<&str>, name: &str) -> Revision {
        self.slot(namespace, name).load(Ordering::Relaxed)
    }
}
