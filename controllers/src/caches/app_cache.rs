//! Apps and the objects of their releases as watched, in memory: what the install
//! controller and the plan gate read instead of asking the API server on every
//! reconcile (a Get and three Lists each, which at fleet scale was most of the API
//! server's load).
//!
//! The caches are reflectors (`kube::runtime::reflector`): a change is in them before
//! the event that announces it reaches the controller, so a reconcile caused by an App
//! change sees it. A reconcile caused by something else may see a cache a moment
//! behind the API server; callers that must not act on an older release compare the
//! [`Release::hash`] with what they expect (a Plan records its release).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube_client::api::Api;
use kube_client::runtime::reflector::{self, ObjectRef, Store};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Action, App, Component, Lean, OperationRole, Policy};

use crate::logic::app_objects::AppObjects;
use crate::logic::graph::{ComponentGraph, Cycle};
use crate::logic::reference::Reference;

/// How long a reconcile waits for the caches' first list before it retries later.
const READY_WAIT: Duration = Duration::from_secs(5);

/// An App and the objects that name it, as cached, sorted by name (as a List returns
/// them), with what is computed once per release.
#[derive(Clone, Debug)]
pub struct Release {
    /// The App.
    pub app: App,
    /// Its Components.
    pub components: Vec<Component>,
    /// Its Actions.
    pub actions: Vec<Action>,
    /// Its matrix rules.
    pub operation_roles: Vec<OperationRole>,
    /// The release these objects make (as the App controller computes `status.release`).
    pub hash: String,
    /// The components' dependency graph, or the cycle that prevents one.
    pub graph: Result<ComponentGraph, Cycle>,
    /// What each component's templates refer to (`None`: a template does not parse),
    /// and the sandbox's under the empty name.
    references: HashMap<String, Option<Vec<Reference>>>,
}

impl Release {
    /// The objects, for validation and the role chain.
    pub fn objects(&self) -> AppObjects<'_> {
        AppObjects {
            app: &self.app,
            components: &self.components,
            actions: &self.actions,
            operation_roles: &self.operation_roles,
        }
    }

    /// The release `app` and its objects make (hash, graph, template references).
    pub(crate) fn new(
        app: App,
        components: Vec<Component>,
        actions: Vec<Action>,
        operation_roles: Vec<OperationRole>,
    ) -> Release {
        let hash =
            crate::logic::app_check::release_hash(&app, &components, &actions, &operation_roles);
        let graph = ComponentGraph::new(&components);
        let mut references: HashMap<String, Option<Vec<Reference>>> = components
            .iter()
            .map(|c| {
                let name = c.metadata.name.clone().unwrap_or_default();
                (name, references_in(&c.spec))
            })
            .collect();
        references.insert(String::new(), references_in(&app.spec.sandbox));
        Release {
            app,
            components,
            actions,
            operation_roles,
            hash,
            graph,
            references,
        }
    }

    /// What component `name`'s templates refer to; `None` if one does not parse (or
    /// there is no such component).
    pub fn component_references(&self, name: &str) -> Option<&[Reference]> {
        self.references.get(name)?.as_deref()
    }

    /// What the sandbox's templates refer to; `None` if one does not parse.
    pub fn sandbox_references(&self) -> Option<&[Reference]> {
        self.references.get("")?.as_deref()
    }
}

/// Every reference of every template in `spec`, or `None` if one does not parse.
fn references_in(spec: &impl serde::Serialize) -> Option<Vec<Reference>> {
    let value = serde_json::to_value(spec).ok()?;
    let mut all = Vec::new();
    for (_, template) in crate::logic::template::templates_in(&value) {
        all.extend(crate::logic::template::references(template).ok()?);
    }
    all.sort();
    all.dedup();
    Some(all)
}

/// What a release was built from: each object's kind, name and resourceVersion. The
/// same fingerprint means the same release, so it is built once.
type Fingerprint = Vec<(u8, String, String)>;

/// The cached Apps, Components, Actions, OperationRoles and Policies.
#[derive(Clone)]
pub struct AppCache {
    apps: Store<App>,
    components: Store<Component>,
    actions: Store<Action>,
    roles: Store<OperationRole>,
    policies: Store<Policy>,
    /// The last release built per (namespace, app), with its fingerprint.
    built: Arc<Mutex<HashMap<(String, String), Built>>>,
}

/// A built release and what it was built from.
type Built = (Fingerprint, Arc<Release>);

impl AppCache {
    /// The caches, and the stream that keeps them current: poll it (a controller's
    /// trigger does) and it yields `()` after each change.
    pub fn new(client: &Client) -> (AppCache, impl Stream<Item = ()> + Send + 'static) {
        let (apps, apps_writer) = reflector::store();
        let (components, components_writer) = reflector::store();
        let (actions, actions_writer) = reflector::store();
        let (roles, roles_writer) = reflector::store();
        let (policies, policies_writer) = reflector::store();
        // Every watch backs off on errors: without it a failing watch (API server gone)
        // is retried at once and the task spins without ever yielding.
        let changes = futures::stream::select_all([
            follow(Api::<Lean<App>>::all(client.clone()), apps_writer),
            follow(
                Api::<Lean<Component>>::all(client.clone()),
                components_writer,
            ),
            follow(Api::<Lean<Action>>::all(client.clone()), actions_writer),
            follow(
                Api::<Lean<OperationRole>>::all(client.clone()),
                roles_writer,
            ),
            follow(Api::<Lean<Policy>>::all(client.clone()), policies_writer),
        ]);
        (
            AppCache {
                apps,
                components,
                actions,
                roles,
                policies,
                built: Arc::default(),
            },
            changes,
        )
    }

    /// Whether every cache has listed once (waits a little for it).
    pub async fn ready(&self) -> bool {
        tokio::time::timeout(READY_WAIT, async {
            let _ = self.apps.wait_until_ready().await;
            let _ = self.components.wait_until_ready().await;
            let _ = self.actions.wait_until_ready().await;
            let _ = self.roles.wait_until_ready().await;
            let _ = self.policies.wait_until_ready().await;
        })
        .await
        .is_ok()
    }

    /// App `namespace/name`.
    pub fn app(&self, namespace: &str, name: &str) -> Option<Arc<App>> {
        self.apps.get(&ObjectRef::new(name).within(namespace))
    }

    /// App `namespace/name` and the objects that name it, built once per release.
    pub fn release(&self, namespace: &str, name: &str) -> Option<Arc<Release>> {
        let app = self.app(namespace, name)?;
        let components = of_app(&self.components, namespace, name, |c| &c.spec.app);
        let actions = of_app(&self.actions, namespace, name, |a| &a.spec.app);
        let roles = of_app(&self.roles, namespace, name, |r| &r.spec.app);
        let fingerprint: Fingerprint = std::iter::once(fingerprint_of(0, &*app))
            .chain(components.iter().map(|c| fingerprint_of(1, &**c)))
            .chain(actions.iter().map(|a| fingerprint_of(2, &**a)))
            .chain(roles.iter().map(|r| fingerprint_of(3, &**r)))
            .collect();
        let key = (namespace.to_owned(), name.to_owned());
        if let Some((built_from, release)) = self.built.lock().expect("not poisoned").get(&key)
            && *built_from == fingerprint
        {
            return Some(release.clone());
        }
        let release = Arc::new(Release::new(
            App::clone(&app),
            components.iter().map(|c| Component::clone(c)).collect(),
            actions.iter().map(|a| Action::clone(a)).collect(),
            roles.iter().map(|r| OperationRole::clone(r)).collect(),
        ));
        self.built
            .lock()
            .expect("not poisoned")
            .insert(key, (fingerprint, release.clone()));
        Some(release)
    }

    /// The Policies of `namespace`, sorted by name.
    pub fn policies(&self, namespace: &str) -> Vec<Policy> {
        let mut policies: Vec<Policy> = self
            .policies
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace))
            .map(|p| Policy::clone(p))
            .collect();
        policies.sort_by_key(|p| p.name_any());
        policies
    }
}

/// A watch of every `K`, kept in `writer`'s store, yielding `()` after each change. The
/// objects are decoded without their managed fields ([`outpost_api::Lean`]): nothing
/// here reads them, and a deploy clones the App and its Components.
fn follow<K>(
    api: Api<Lean<K>>,
    writer: reflector::store::Writer<K>,
) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>
where
    K: kube_client::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    outpost_api::lean::watcher(api, crate::watch_config())
        .default_backoff()
        .reflect(writer)
        .filter_map(|event| async move {
            matches!(
                event,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))
            )
            .then_some(())
        })
        .boxed()
}

/// The objects of `store` in `namespace` whose app (`app_of`) is `app`, by name.
fn of_app<K>(
    store: &Store<K>,
    namespace: &str,
    app: &str,
    app_of: impl Fn(&K) -> &String,
) -> Vec<Arc<K>>
where
    K: kube_client::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut objects: Vec<Arc<K>> = store
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace) && app_of(o) == app)
        .collect();
    objects.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    objects
}

fn fingerprint_of<K: kube_client::Resource>(kind: u8, object: &K) -> (u8, String, String) {
    let meta = object.meta();
    (
        kind,
        meta.name.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
    )
}
