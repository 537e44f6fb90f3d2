//! History compaction on a clock, as kube-apiserver does for etcd
//! (`--etcd-compaction-interval`, 5 minutes by default).
//!
//! etcd keeps every revision of every key until it is told to forget them. Without
//! compaction its database grows with every write ever made, and at its quota (2 GiB by
//! default) it refuses every write (`mvcc: database space exceeded`). `outpost bench fleet`
//! at 10,000 installs hit that quota during admission. The embedded store compacts itself
//! by count (`--embedded-history`).

use std::sync::Arc;
use std::time::Duration;

use super::{Revision, Store};

/// Every `interval`, compacts `store` to the revision it was at one interval earlier.
///
/// At least one interval of history is thus kept, for watches and paged lists to resume
/// from; older revisions answer 410 `Expired`, and clients relist, as with
/// kube-apiserver. Several API servers on one etcd may each run one: compacting to a
/// revision already compacted is a no-op.
pub fn spawn_compactor(store: Arc<dyn Store>, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen: Option<Revision> = None;
        loop {
            ticker.tick().await;
            if let Some(revision) = seen.take() {
                match store.compact(revision).await {
                    Ok(()) => tracing::debug!(revision, "compacted the store's history"),
                    Err(err) => {
                        tracing::warn!(revision, error = %err, "compacting the store's history")
                    }
                }
            }
            match store.current_revision().await {
                Ok(current) => seen = Some(current),
                Err(err) => {
                    tracing::warn!(error = %err, "reading the store's revision to compact to later")
                }
            }
        }
    })
}
