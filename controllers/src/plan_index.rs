//! The install controller's view of Plans: one watch on every Plan, indexed by the
//! install that owns it (label `outpost.dev/install`), like an informer with an index.
//!
//! Listing an install's Plans through the API on every reconcile would cost a read of
//! every Plan of the namespace each time (the server filters by label after reading),
//! so reconciling a fleet would be quadratic. The index is fed by the same stream that
//! triggers reconciles, so a reconcile caused by a Plan event always sees that event.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt as _};
use kube_client::api::Api;
use kube_client::runtime::reflector::ObjectRef;
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Install, Plan};

use crate::install_controller::INSTALL_LABEL;

/// (namespace, install) → Plans by name.
type Index = HashMap<(String, String), BTreeMap<String, Arc<Plan>>>;

/// Every Plan, by install.
#[derive(Default)]
pub struct PlanIndex {
    plans: RwLock<Index>,
    /// Filled while a (re)list is under way; swapped in when it completes.
    relist: RwLock<Index>,
    ready: AtomicBool,
}

impl PlanIndex {
    /// Whether the first list completed (until then the index knows nothing).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The Plans of `install` in `namespace`, by name.
    pub fn of(&self, namespace: &str, install: &str) -> BTreeMap<String, Plan> {
        self.plans
            .read()
            .expect("not poisoned")
            .get(&(namespace.to_owned(), install.to_owned()))
            .map(|plans| {
                plans
                    .iter()
                    .map(|(name, plan)| (name.clone(), Plan::clone(plan)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records a Plan this controller just created, unless the watch already brought it
    /// (possibly newer).
    pub fn remember(&self, plan: Plan) {
        if let Some(key) = key_of(&plan) {
            self.plans
                .write()
                .expect("not poisoned")
                .entry(key)
                .or_default()
                .entry(plan.name_any())
                .or_insert_with(|| Arc::new(plan));
        }
    }

    /// Watches every Plan, keeping the index current; yields the installs to reconcile
    /// after each change (every indexed install after a relist).
    pub fn watch(
        self: Arc<Self>,
        client: Client,
    ) -> impl Stream<Item = ObjectRef<Install>> + Send + 'static {
        watcher(Api::<Plan>::all(client), watcher::Config::default())
            .default_backoff()
            .flat_map(move |event| {
                let refs = match event {
                    Ok(event) => self.apply(event),
                    Err(err) => {
                        tracing::debug!(error = %err, "plan index watch");
                        vec![]
                    }
                };
                futures::stream::iter(refs)
            })
    }

    fn apply(&self, event: watcher::Event<Plan>) -> Vec<ObjectRef<Install>> {
        match event {
            watcher::Event::Init => {
                self.relist.write().expect("not poisoned").clear();
                vec![]
            }
            watcher::Event::InitApply(plan) => {
                if let Some(key) = key_of(&plan) {
                    self.relist
                        .write()
                        .expect("not poisoned")
                        .entry(key)
                        .or_default()
                        .insert(plan.name_any(), Arc::new(plan));
                }
                vec![]
            }
            watcher::Event::InitDone => {
                let fresh = std::mem::take(&mut *self.relist.write().expect("not poisoned"));
                let refs = fresh
                    .keys()
                    .map(|(ns, install)| ObjectRef::new(install).within(ns))
                    .collect();
                *self.plans.write().expect("not poisoned") = fresh;
                self.ready.store(true, Ordering::Release);
                refs
            }
            watcher::Event::Apply(plan) => {
                let Some(key) = key_of(&plan) else {
                    return vec![];
                };
                let target = ObjectRef::new(&key.1).within(&key.0);
                self.plans
                    .write()
                    .expect("not poisoned")
                    .entry(key)
                    .or_default()
                    .insert(plan.name_any(), Arc::new(plan));
                vec![target]
            }
            watcher::Event::Delete(plan) => {
                let Some(key) = key_of(&plan) else {
                    return vec![];
                };
                let target = ObjectRef::new(&key.1).within(&key.0);
                let mut plans = self.plans.write().expect("not poisoned");
                if let Some(of_install) = plans.get_mut(&key) {
                    of_install.remove(&plan.name_any());
                    if of_install.is_empty() {
                        plans.remove(&key);
                    }
                }
                vec![target]
            }
        }
    }
}

fn key_of(plan: &Plan) -> Option<(String, String)> {
    let install = plan.labels().get(INSTALL_LABEL)?;
    Some((plan.namespace()?, install.clone()))
}
