//! The install controller's view of an install's objects (Plans, DriftReports): one
//! watch of every object of the kind, indexed by the install that owns it (label
//! `outpost.dev/install`), like an informer with an index.
//!
//! Listing an install's Plans through the API on every reconcile would cost a request
//! each time, so reconciling a fleet would load the API server with one list per
//! install per change. The index is fed by the same stream that triggers reconciles, so
//! a reconcile caused by an event always sees that event.
//!
//! Only changes that can change what the controller does trigger a reconcile
//! ([`Indexed::concerns_install`]): a Plan's gating, approval and claim do not.
//!
//! What the controller never reads is dropped as objects come in (a Plan's rendered
//! desired state, the parts of its status that are the gate's, the runner's and
//! approvers' — role, verdicts, diff, approval, claim, log — and every object's managed
//! fields, which are not even decoded: [`outpost_api::Lean`]): the index holds every
//! Plan of the fleet, and those are most of a Plan's size.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt as _};
use kube_client::api::Api;
use kube_client::runtime::reflector::ObjectRef;
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, Resource, ResourceExt as _};
use outpost_api::{DriftReport, Install, Plan, PlanPhase, PlanStatus};

use outpost_api::labels::INSTALL as INSTALL_LABEL;

/// (namespace, install) → objects by name.
type Index<K> = HashMap<(String, String), BTreeMap<String, Arc<K>>>;

/// An object kept in an [`InstallIndex`], trimmed of what is never read.
pub trait Indexed:
    Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Drops what the index's readers do not need (the watch decodes no managed fields).
    fn trim(&mut self) {}

    /// Whether the change from `before` (as indexed, `None` if unknown) to `after` can
    /// change what the install's controller does, so that it must look again.
    fn concerns_install(before: Option<&Self>, after: &Self) -> bool {
        let _ = (before, after);
        true
    }
}

impl Indexed for Plan {
    /// Keeps of the status what the controller reads: the phase, when it finished, the
    /// outputs (templates refer to them), and the message and reason.
    fn trim(&mut self) {
        self.spec.desired_state = None;
        self.status = self.status.take().map(|status| PlanStatus {
            phase: status.phase,
            finished_at: status.finished_at,
            outputs: status.outputs,
            message: status.message,
            reason: status.reason,
            ..PlanStatus::default()
        });
    }

    /// A Plan the controller did not know of, or one that finished (it may unblock the
    /// next step, or fail the install). Gating, approval, a claim and the runner's
    /// progress change nothing the controller decides or shows: the component stays
    /// Deploying until the Plan finishes.
    fn concerns_install(before: Option<&Self>, after: &Self) -> bool {
        let phase = |plan: &Plan| plan.status.as_ref().and_then(|s| s.phase);
        match before {
            None => true,
            Some(before) => {
                phase(before) != phase(after)
                    && matches!(
                        phase(after),
                        Some(PlanPhase::Succeeded | PlanPhase::Failed | PlanPhase::Denied)
                    )
            }
        }
    }
}

impl Indexed for DriftReport {}

/// Every object of a kind, by install.
pub struct InstallIndex<K> {
    objects: RwLock<Index<K>>,
    /// Filled while a (re)list is under way; swapped in when it completes.
    relist: RwLock<Index<K>>,
    ready: AtomicBool,
}

/// Every Plan, by install.
pub type PlanIndex = InstallIndex<Plan>;

impl<K> Default for InstallIndex<K> {
    fn default() -> Self {
        InstallIndex {
            objects: RwLock::default(),
            relist: RwLock::default(),
            ready: AtomicBool::new(false),
        }
    }
}

impl<K: Indexed> InstallIndex<K> {
    /// Whether the first list completed (until then the index knows nothing).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The objects of `install` in `namespace`, by name.
    pub fn of(&self, namespace: &str, install: &str) -> BTreeMap<String, Arc<K>> {
        self.objects
            .read()
            .expect("not poisoned")
            .get(&(namespace.to_owned(), install.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Records an object this controller just created, unless the watch already
    /// brought it (possibly newer).
    pub fn remember(&self, mut object: K) {
        object.trim();
        if let Some(key) = key_of(&object) {
            self.objects
                .write()
                .expect("not poisoned")
                .entry(key)
                .or_default()
                .entry(object.name_any())
                .or_insert_with(|| Arc::new(object));
        }
    }

    /// Watches every object of the kind, keeping the index current; yields the installs
    /// to reconcile after each change (every indexed install after a relist).
    pub fn watch(
        self: Arc<Self>,
        client: Client,
    ) -> impl Stream<Item = ObjectRef<Install>> + Send + 'static {
        outpost_api::lean::watcher(Api::all(client), crate::watch_config())
            .default_backoff()
            .flat_map(move |event| {
                let refs = match event {
                    Ok(event) => self.apply(event),
                    Err(err) => {
                        tracing::debug!(error = %err, "install index watch");
                        vec![]
                    }
                };
                futures::stream::iter(refs)
            })
    }

    fn apply(&self, event: watcher::Event<K>) -> Vec<ObjectRef<Install>> {
        match event {
            watcher::Event::Init => {
                self.relist.write().expect("not poisoned").clear();
                vec![]
            }
            watcher::Event::InitApply(mut object) => {
                object.trim();
                if let Some(key) = key_of(&object) {
                    self.relist
                        .write()
                        .expect("not poisoned")
                        .entry(key)
                        .or_default()
                        .insert(object.name_any(), Arc::new(object));
                }
                vec![]
            }
            watcher::Event::InitDone => {
                let fresh = std::mem::take(&mut *self.relist.write().expect("not poisoned"));
                let refs = fresh
                    .keys()
                    .map(|(ns, install)| ObjectRef::new(install).within(ns))
                    .collect();
                *self.objects.write().expect("not poisoned") = fresh;
                self.ready.store(true, Ordering::Release);
                refs
            }
            watcher::Event::Apply(mut object) => {
                object.trim();
                let Some(key) = key_of(&object) else {
                    return vec![];
                };
                let target = ObjectRef::new(&key.1).within(&key.0);
                let before = self
                    .objects
                    .write()
                    .expect("not poisoned")
                    .entry(key)
                    .or_default()
                    .insert(object.name_any(), Arc::new(object.clone()));
                if K::concerns_install(before.as_deref(), &object) {
                    vec![target]
                } else {
                    vec![]
                }
            }
            watcher::Event::Delete(object) => {
                let Some(key) = key_of(&object) else {
                    return vec![];
                };
                let target = ObjectRef::new(&key.1).within(&key.0);
                let mut objects = self.objects.write().expect("not poisoned");
                if let Some(of_install) = objects.get_mut(&key) {
                    of_install.remove(&object.name_any());
                    if of_install.is_empty() {
                        objects.remove(&key);
                    }
                }
                vec![target]
            }
        }
    }
}

fn key_of<K: Resource>(object: &K) -> Option<(String, String)> {
    let install = object.labels().get(INSTALL_LABEL)?;
    Some((object.namespace()?, install.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_indexed_plan_keeps_what_the_install_controller_reads() {
        let mut plan: Plan = serde_json::from_value(serde_json::json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
            "metadata": {"name": "p", "namespace": "ns", "labels": {INSTALL_LABEL: "i"}},
            "spec": {"install": "i", "entity": {"kind": "component", "name": "c"},
                     "operation": "deploy", "desiredState": {"type": "job"}},
            "status": {"phase": "Succeeded", "finishedAt": "2026-11-27T00:00:00Z",
                       "outputs": {"url": "https://x"}, "message": "done", "reason": "NoChanges",
                       "claimedBy": "runner", "log": "applied",
                       "verdicts": [{"policy": "p", "denied": false, "enforcement": "deny"}],
                       "diff": {"hash": "sha256:00", "summary": "nothing", "short": "+0 ~0 -0",
                                "add": 0, "change": 0, "destroy": 0}},
        }))
        .expect("a valid Plan");
        let whole = plan.status.clone().expect("a status");
        assert!(whole.diff.is_some() && whole.log.is_some() && whole.claimed_by.is_some());
        plan.trim();
        assert_eq!(plan.spec.desired_state, None);
        let status = plan.status.expect("kept");
        assert_eq!(status.phase, Some(PlanPhase::Succeeded));
        assert!(status.finished_at.is_some());
        assert_eq!(status.outputs["url"], "https://x");
        assert_eq!(status.message.as_deref(), Some("done"));
        assert_eq!(status.reason.as_deref(), Some("NoChanges"));
        assert_eq!(status.claimed_by, None);
        assert_eq!(status.log, None);
        assert!(status.verdicts.is_empty());
        assert_eq!(status.diff, None);
    }
}
