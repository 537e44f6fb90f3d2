//! Installs as watched, in memory, once for every controller that reads them: the
//! Install controller, the InstallStack controller and the gate read the one store, and
//! the Install, InstallStack and Rollout controllers are triggered by its changes.
//!
//! Each kept its own watch and store until the fleet bench showed what that cost: every
//! Install event (two status writes per Plan in a rollout) was decoded four times and
//! every Install kept three times, in a process whose memory at 10,000 installs was at
//! its goal with no margin.
//!
//! Build it, take what each controller needs ([`InstallCache::store`],
//! [`InstallCache::follow`]) and then run [`InstallCache::watch`] beside the controllers:
//! a follower taken later would miss changes. Each follower is a bounded queue the watch
//! waits on, so every follower's stream must be polled (a controller does, as long as it
//! runs).

use std::collections::HashMap;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{SinkExt as _, Stream, StreamExt as _};
use kube_client::api::Api;
use kube_client::runtime::reflector::{self, Store};
use kube_client::runtime::{Predicate, WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::Install;

/// Changes a follower may be behind by before the watch waits for it.
const QUEUE: usize = 1024;

/// One change of an Install, as the watch saw it.
#[derive(Clone, Debug)]
pub enum Change {
    /// Created or changed.
    Applied(Arc<Install>),
    /// Listed, when the watch starts or lists again.
    Listed(Arc<Install>),
    /// Deleted.
    Deleted(Arc<Install>),
}

/// The shared watch of Installs, its store and its followers.
pub struct InstallCache {
    store: Store<Install>,
    writer: reflector::store::Writer<Install>,
    followers: Vec<mpsc::Sender<Change>>,
}

impl Default for InstallCache {
    fn default() -> Self {
        let (store, writer) = reflector::store();
        InstallCache {
            store,
            writer,
            followers: Vec::new(),
        }
    }
}

impl InstallCache {
    /// The Installs (without their managed fields), filled once the watch has listed.
    pub fn store(&self) -> Store<Install> {
        self.store.clone()
    }

    /// Every change the watch sees from now on.
    pub fn follow(&mut self) -> impl Stream<Item = Change> + Send + 'static {
        let (sender, receiver) = mpsc::channel(QUEUE);
        self.followers.push(sender);
        receiver
    }

    /// Watches Installs into the store and hands every change to each follower, until
    /// the watch ends (it does not: it retries with backoff).
    pub async fn watch(self, client: Client) {
        let InstallCache {
            writer,
            mut followers,
            ..
        } = self;
        // Decoded without managed fields: no controller reads them, and an Install written
        // by several managers carries a field set per manager (most of a kept one's size).
        let mut events = outpost_api::lean::watcher(Api::all(client), crate::watch_config())
            .default_backoff()
            .reflect(writer)
            .boxed();
        while let Some(event) = events.next().await {
            let change = match event {
                Ok(watcher::Event::Apply(install)) => Change::Applied(Arc::new(install)),
                Ok(watcher::Event::InitApply(install)) => Change::Listed(Arc::new(install)),
                Ok(watcher::Event::Delete(install)) => Change::Deleted(Arc::new(install)),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                Err(err) => {
                    tracing::debug!(error = %err, "install watch");
                    continue;
                }
            };
            for follower in &mut followers {
                // A follower that stopped (its controller ended) is not waited for.
                let _ = follower.send(change.clone()).await;
            }
        }
    }
}

/// The Installs created, changed or listed, of those changed only the ones whose
/// `predicate` property changed (as kube's `predicate_filter`: an Install whose
/// property is `None` always passes). A deleted Install is forgotten, so one created
/// again with its name passes.
pub fn applied<P>(
    changes: impl Stream<Item = Change> + Send + 'static,
    predicate: P,
) -> impl Stream<Item = Arc<Install>> + Send + 'static
where
    P: Predicate<Install> + Send + 'static,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    changes.filter_map(move |change| {
        let passed = match change {
            Change::Applied(install) | Change::Listed(install) => {
                let uid = install.uid().unwrap_or_default();
                match predicate.hash_property(&install) {
                    None => Some(install),
                    Some(hash) => (seen.insert(uid, hash) != Some(hash)).then_some(install),
                }
            }
            Change::Deleted(install) => {
                seen.remove(&install.uid().unwrap_or_default());
                None
            }
        };
        std::future::ready(passed)
    })
}

/// `()` for each Install created, changed or deleted (not for those listed when the
/// watch starts or lists again).
pub fn touched(
    changes: impl Stream<Item = Change> + Send + 'static,
) -> impl Stream<Item = ()> + Send + 'static {
    changes.filter_map(|change| {
        std::future::ready(match change {
            Change::Applied(_) | Change::Deleted(_) => Some(()),
            Change::Listed(_) => None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use serde_json::json;

    fn install(uid: &str, generation: i64, phase: &str) -> Arc<Install> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
                "metadata": {"name": "acme", "namespace": "default", "uid": uid,
                             "generation": generation},
                "spec": {"app": "shop",
                         "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
                "status": {"phase": phase},
            }))
            .expect("a valid Install"),
        )
    }

    fn generation(install: &Install) -> Option<u64> {
        install.metadata.generation.map(|g| g as u64)
    }

    fn generations(changes: Vec<Change>) -> Vec<(String, i64)> {
        block_on(
            applied(futures::stream::iter(changes), generation)
                .map(|i| (i.uid().unwrap(), i.metadata.generation.unwrap()))
                .collect(),
        )
    }

    #[test]
    fn only_a_changed_property_passes_and_a_deleted_install_is_forgotten() {
        let passed = generations(vec![
            Change::Listed(install("a", 1, "Pending")),
            // A status write: the generation did not move.
            Change::Applied(install("a", 1, "Active")),
            Change::Applied(install("a", 2, "Active")),
            // Listed again after the watch broke: nothing changed.
            Change::Listed(install("a", 2, "Active")),
            Change::Deleted(install("a", 2, "Active")),
            // The same name again: a new object, and the old uid was forgotten.
            Change::Applied(install("b", 1, "Pending")),
            Change::Applied(install("a", 2, "Active")),
        ]);
        assert_eq!(
            passed,
            [
                ("a".into(), 1),
                ("a".into(), 2),
                ("b".into(), 1),
                ("a".into(), 2)
            ]
        );
    }

    #[test]
    fn without_a_property_every_change_passes() {
        let changes = vec![
            Change::Applied(install("a", 1, "Pending")),
            Change::Applied(install("a", 1, "Active")),
        ];
        let passed: Vec<Arc<Install>> =
            block_on(applied(futures::stream::iter(changes), |_: &Install| None).collect());
        assert_eq!(passed.len(), 2);
    }

    #[test]
    fn touched_counts_changes_and_deletions_not_lists() {
        let changes = vec![
            Change::Listed(install("a", 1, "Pending")),
            Change::Applied(install("a", 1, "Active")),
            Change::Deleted(install("a", 1, "Active")),
        ];
        let touched: Vec<()> = block_on(touched(futures::stream::iter(changes)).collect());
        assert_eq!(touched.len(), 2);
    }
}
