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

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube_client::api::Api;
use kube_client::runtime::reflector::{self, ObjectRef, Store};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Action, App, Component, OperationRole, Policy};

use crate::AppObjects;

/// How long a reconcile waits for the caches' first list before it retries later.
const READY_WAIT: Duration = Duration::from_secs(5);

/// An App and the objects that name it, as cached, sorted by name (as a List returns
/// them).
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

    /// The release these objects make (as the App controller computes `status.release`).
    pub fn hash(&self) -> String {
        crate::release_hash(
            &self.app,
            &self.components,
            &self.actions,
            &self.operation_roles,
        )
    }
}

/// The cached Apps, Components, Actions, OperationRoles and Policies.
#[derive(Clone)]
pub struct AppCache {
    apps: Store<App>,
    components: Store<Component>,
    actions: Store<Action>,
    roles: Store<OperationRole>,
    policies: Store<Policy>,
}

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
            follow(Api::<App>::all(client.clone()), apps_writer),
            follow(Api::<Component>::all(client.clone()), components_writer),
            follow(Api::<Action>::all(client.clone()), actions_writer),
            follow(Api::<OperationRole>::all(client.clone()), roles_writer),
            follow(Api::<Policy>::all(client.clone()), policies_writer),
        ]);
        (
            AppCache {
                apps,
                components,
                actions,
                roles,
                policies,
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

    /// App `namespace/name` and the objects that name it.
    pub fn release(&self, namespace: &str, name: &str) -> Option<Release> {
        let app = self.app(namespace, name)?;
        Some(Release {
            app: App::clone(&app),
            components: of_app(&self.components, namespace, name, |c| &c.spec.app),
            actions: of_app(&self.actions, namespace, name, |a| &a.spec.app),
            operation_roles: of_app(&self.roles, namespace, name, |r| &r.spec.app),
        })
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

/// A watch of every `K`, kept in `writer`'s store, yielding `()` after each change.
fn follow<K>(
    api: Api<K>,
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
    watcher(api, crate::watch_config())
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
fn of_app<K>(store: &Store<K>, namespace: &str, app: &str, app_of: impl Fn(&K) -> &String) -> Vec<K>
where
    K: kube_client::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut objects: Vec<K> = store
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace) && app_of(o) == app)
        .map(|o| K::clone(o))
        .collect();
    objects.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    objects
}
