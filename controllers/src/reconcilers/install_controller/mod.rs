//! The Install controller: drives an install towards its App's release through Plans.
//!
//! * A finalizer on every Install.
//! * Sandbox `provision` first, then a `deploy` Plan per component in dependency order,
//!   each created once its dependencies' Plans succeeded (their outputs feed its templates).
//! * A Plan's name carries a key: the hash of the component's rendered desired state and
//!   of its dependencies' keys. An input change therefore re-plans exactly the components
//!   whose rendered state changed and their dependents, and names are deterministic, so a
//!   restarted controller never creates a Plan twice (a second create is a 409).
//! * Deleting the Install: `teardown` Plans in reverse order, then sandbox `deprovision`,
//!   then the finalizer goes.
//!
//! The finalizer hands an Install to one of two step functions: [`deploy::deploy`]
//! (`deploy.rs`) moves a live install one step towards its release, and
//! [`teardown::teardown`] (`teardown.rs`) one step towards its removal. Each computes
//! its steps with a pure function (`deploy_steps`, `teardown_steps`, unit tested on
//! values), then both create the ready Plans through `steps.rs`.
//!
//! * An install pinned (`spec.release`) to a release other than the App's current one
//!   gets no new Plan and keeps its status (condition `ReleasePinned`): only the App's
//!   current objects can be rendered. A Rollout moves `spec.release` wave by wave.
//! * Unless some of its components are pinned to the current release
//!   (`spec.componentReleases`, set by a component Rollout): then only those are
//!   planned and the rest is held (condition `ComponentsHeld`), a separate step of
//!   deploy (`install_controller/component_pins.rs`).
//!
//! Plans are owned by the Install and labelled `outpost.dev/install`.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube_client::api::Api;
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::finalizer::{Event, finalizer};
use kube_client::runtime::reflector::Store;
use kube_client::{Client, ResourceExt as _};
use outpost_api::{DriftReport, Install};
use rendering::Renders;
use status::WrittenStatus;

use crate::caches::app_cache::AppCache;
use crate::caches::installs::{Change, applied};
use crate::caches::plan_index::{InstallIndex, PlanIndex};
use crate::logic::gate::PolicyCheck;

mod component_pins;
mod deploy;
mod rendering;
mod status;
mod steps;
mod teardown;

#[cfg(test)]
mod fixtures;

/// The Install finalizer.
pub use outpost_api::finalizers::INSTALL as FINALIZER;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

struct Context {
    client: Client,
    plans: Arc<PlanIndex>,
    drift: Arc<InstallIndex<DriftReport>>,
    apps: AppCache,
    written: WrittenStatus,
    renders: Renders,
    /// The gate's policy check, for the Plans this controller creates with its decision.
    policies: PolicyCheck,
}

/// Runs the Install controller until the stream ends, on the shared watch of Installs:
/// its store and a follower of its changes ([`crate::caches::installs::InstallCache`]).
pub async fn run(
    client: Client,
    policies: PolicyCheck,
    installs: Store<Install>,
    changes: impl Stream<Item = Change> + Send + 'static,
) {
    let plans = Arc::new(PlanIndex::default());
    let drift = Arc::new(InstallIndex::<DriftReport>::default());
    // A change to an App or its objects rolls the new release out to every install.
    let (apps, app_changes) = AppCache::new(&client);
    let ctx = Arc::new(Context {
        client: client.clone(),
        plans: plans.clone(),
        drift: drift.clone(),
        apps,
        written: WrittenStatus::default(),
        renders: Renders::default(),
        policies,
    });
    // An Install's own status (this controller's writes, the runner token's hash) changes
    // nothing it decides: only its spec, deletion and finalizers do.
    Controller::for_shared_stream(applied(changes, spec_or_lifecycle), installs)
        .reconcile_on(plans.watch(client.clone()))
        // A component's drift shows in the Install status as its DriftReport changes.
        .reconcile_on(drift.watch(client))
        .reconcile_all_on(app_changes)
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "install reconcile");
            }
        })
        .await;
}

async fn reconcile(install: Arc<Install>, ctx: Arc<Context>) -> Result<Action, InstallError> {
    let api =
        Api::<Install>::namespaced(ctx.client.clone(), &install.namespace().unwrap_or_default());
    if !ctx.plans.is_ready() || !ctx.drift.is_ready() || !ctx.apps.ready().await {
        // Until the indexes and caches listed once, every object would look missing.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    finalizer(&api, FINALIZER, install, |event| async {
        match event {
            Event::Apply(install) => deploy::deploy(&install, &ctx).await,
            Event::Cleanup(install) => teardown::teardown(&install, &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube_client::runtime::finalizer::Error::ApplyFailed(e)
        | kube_client::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => InstallError::Finalizer(other.to_string()),
    })
}

/// What of an Install makes the controller look at it again: its spec (generation),
/// deletion and finalizers.
fn spec_or_lifecycle(install: &Install) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    install.metadata.generation.hash(&mut hasher);
    install
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    install.metadata.finalizers.hash(&mut hasher);
    Some(hasher.finish())
}

fn error_policy(_: Arc<Install>, err: &InstallError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %err, "install reconcile: retrying");
    Action::requeue(Duration::from_secs(2))
}
