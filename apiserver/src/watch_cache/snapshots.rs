//! The objects of a list that did not fit its `limit`, kept for its continue pages, as
//! kube-apiserver's cache keeps snapshots for them since 1.33 (`ListFromCacheSnapshot`).
//!
//! A continue page is read at the first page's revision. Without a snapshot it is a
//! store read at an older revision, which the embedded store answers by reading every
//! change since (of every type): a kube watcher's list of 10,000 Installs (500 a page)
//! during a rollout read 19 pages of that log, 70 MB of allocations in two seconds. A
//! snapshot is the list of every object under the list's prefix at that revision (not
//! only those the first page's selectors and access passed: each continue page applies
//! its own request's filter, as a page read from the store does), as `Arc`s of the cached
//! objects: a pointer each, and the old versions of objects changed since kept alive
//! while it is.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::CachedObject;
use crate::storage::Revision;

/// Snapshots kept per type; a new one beyond them drops the least recently used (its
/// list's next page is then read from the store, as before).
pub const KEPT: usize = 8;

/// How long a snapshot is kept after its last use.
pub const KEPT_FOR: Duration = Duration::from_secs(60);

/// Every object under one prefix at one revision, in key order.
pub type Objects = Arc<[Arc<CachedObject>]>;

struct Held {
    prefix: String,
    revision: Revision,
    used: Instant,
    objects: Objects,
}

/// A type's snapshots, most recently used last.
#[derive(Default)]
pub(super) struct Snapshots {
    held: Mutex<VecDeque<Held>>,
}

impl Snapshots {
    /// Keeps `objects`, every object under `prefix` at `revision`.
    pub(super) fn keep(&self, prefix: String, revision: Revision, objects: Objects) {
        self.keep_at(Instant::now(), prefix, revision, objects);
    }

    fn keep_at(&self, now: Instant, prefix: String, revision: Revision, objects: Objects) {
        let mut held = self.held.lock().expect("snapshots lock");
        held.retain(|h| {
            now.duration_since(h.used) < KEPT_FOR && (h.prefix != prefix || h.revision != revision)
        });
        if held.len() >= KEPT {
            held.pop_front();
        }
        held.push_back(Held {
            prefix,
            revision,
            used: now,
            objects,
        });
    }

    /// The objects kept under `prefix` at `revision`, if they still are.
    pub(super) fn find(&self, prefix: &str, revision: Revision) -> Option<Objects> {
        self.find_at(Instant::now(), prefix, revision)
    }

    fn find_at(&self, now: Instant, prefix: &str, revision: Revision) -> Option<Objects> {
        let mut held = self.held.lock().expect("snapshots lock");
        held.retain(|h| now.duration_since(h.used) < KEPT_FOR);
        let at = held
            .iter()
            .position(|h| h.prefix == prefix && h.revision == revision)?;
        let mut found = held.remove(at)?;
        found.used = now;
        let objects = found.objects.clone();
        held.push_back(found);
        Some(objects)
    }

    /// How many are kept, and how many objects they point to.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let held = self.held.lock().expect("snapshots lock");
        (held.len(), held.iter().map(|h| h.objects.len()).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(n: usize) -> Objects {
        let rt = crate::registry::ResourceType::schemaless(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            true,
        );
        (0..n)
            .map(|i| {
                let object = serde_json::json!({"metadata": {"name": format!("w{i}")}});
                Arc::new(CachedObject::new(&rt, format!("/w/{i}"), 1, &object))
            })
            .collect()
    }

    #[test]
    fn keeps_the_most_recently_used_for_a_while() {
        let snapshots = Snapshots::default();
        let start = Instant::now();
        let found = |at: Duration, prefix: &str, revision| {
            snapshots
                .find_at(start + at, prefix, revision)
                .map(|o| o.len())
        };
        for revision in 1..=KEPT as Revision {
            snapshots.keep_at(start, "/a/".into(), revision, objects(revision as usize));
        }
        assert_eq!(snapshots.counts(), (KEPT, (1..=KEPT).sum()));
        // By prefix and revision.
        assert_eq!(found(Duration::ZERO, "/a/", 2), Some(2));
        assert_eq!(found(Duration::ZERO, "/b/", 2), None);
        assert_eq!(found(Duration::ZERO, "/a/", 99), None);
        // Revision 1 was used least recently (2 was just found): a new one drops it.
        snapshots.keep_at(start, "/b/".into(), 1, objects(1));
        assert_eq!(found(Duration::ZERO, "/a/", 1), None);
        assert_eq!(found(Duration::ZERO, "/a/", 3), Some(3));
        assert_eq!(snapshots.counts().0, KEPT);
        // Keeping one again (prefix and revision) replaces it.
        snapshots.keep_at(start, "/b/".into(), 1, objects(5));
        assert_eq!(snapshots.counts().0, KEPT);
        assert_eq!(found(Duration::ZERO, "/b/", 1), Some(5));
        // A use keeps it for `KEPT_FOR` more; the others expire.
        let later = KEPT_FOR / 2;
        assert_eq!(found(later, "/a/", 4), Some(4));
        assert_eq!(
            found(later + KEPT_FOR / 2 + Duration::from_millis(1), "/a/", 5),
            None
        );
        assert_eq!(
            found(later + KEPT_FOR - Duration::from_millis(1), "/a/", 4),
            Some(4)
        );
        assert_eq!(snapshots.counts().0, 1);
        assert_eq!(found(later * 2 + KEPT_FOR * 2, "/a/", 4), None);
        assert_eq!(snapshots.counts(), (0, 0));
    }
}
