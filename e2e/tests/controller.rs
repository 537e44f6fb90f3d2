//! A kube-rs `Controller` with a finalizer, pointed at `outpost server`, reconciles
//! Installs through create, update and delete, and recovers from a 410 by relisting.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube_client::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::finalizer::{Event, finalizer};
use kube_client::runtime::watcher;
use outpost_api::Install;
use outpost_testing::{Backend, ControlPlane, eventually, on_both_backends};
use serde_json::json;
use tokio::sync::Mutex;

on_both_backends!(controller_with_finalizer_reconciles_and_survives_410);

const FINALIZER: &str = "e2e.outpost.dev/cleanup";

#[derive(Default)]
struct Seen {
    applied: Vec<(String, i64)>,
    cleaned: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

async fn reconcile(
    install: Arc<Install>,
    ctx: Arc<(Api<Install>, Mutex<Seen>)>,
) -> Result<Action, Failed> {
    let (api, seen) = &*ctx;
    finalizer(api, FINALIZER, install, |event| async {
        match event {
            Event::Apply(install) => {
                let name = install.metadata.name.clone().unwrap_or_default();
                let generation = install.metadata.generation.unwrap_or_default();
                seen.lock().await.applied.push((name.clone(), generation));
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"phase": "Active", "observedGeneration": generation}}),
                    ),
                )
                .await
                .map_err(|e| Failed(e.to_string()))?;
                Ok(Action::requeue(Duration::from_secs(300)))
            }
            Event::Cleanup(install) => {
                seen.lock()
                    .await
                    .cleaned
                    .push(install.metadata.name.clone().unwrap_or_default());
                Ok::<_, Failed>(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Failed(e.to_string()))
}

fn error_policy(_: Arc<Install>, _: &Failed, _: Arc<(Api<Install>, Mutex<Seen>)>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

/// Waits until what the controller saw satisfies `check`.
async fn saw(ctx: &(Api<Install>, Mutex<Seen>), what: &str, check: impl Fn(&Seen) -> bool) {
    let what = format!("the controller to have {what}");
    eventually(30, &what, async || {
        check(&*ctx.1.lock().await).then_some(())
    })
    .await;
}

async fn controller_with_finalizer_reconciles_and_survives_410(backend: Backend) {
    let mut cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let api: Api<Install> = Api::namespaced(client.clone(), "default");
    let ctx = Arc::new((api.clone(), Mutex::new(Seen::default())));
    let controller = tokio::spawn(
        Controller::new(api.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {}),
    );

    let install: Install = serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": "ctl"},
        "spec": {"app": "shopfront", "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &install).await.unwrap();
    saw(&ctx, "reconciled the new install", |s| {
        s.applied.iter().any(|(n, _)| n == "ctl")
    })
    .await;
    let stored = api.get("ctl").await.unwrap();
    assert_eq!(
        stored.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_owned()][..])
    );

    api.patch(
        "ctl",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"approvalMode": "approve-all"}})),
    )
    .await
    .unwrap();
    saw(&ctx, "reconciled the update", |s| {
        s.applied.iter().any(|(n, g)| n == "ctl" && *g == 2)
    })
    .await;

    // Writes to another kind move the store on; after a restart the server's watch cache
    // starts past the controller's resourceVersion, so its watch gets 410 and relists.
    let components: Api<outpost_api::Component> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        let component = serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
            "metadata": {"name": format!("c{i}")},
            "spec": {"app": "shopfront", "type": "job", "job": {"image": "busybox", "command": ["true"]}},
        }))
        .unwrap();
        components
            .create(&PostParams::default(), &component)
            .await
            .unwrap();
    }
    let stale = api
        .get("ctl")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    cp.restart().await;
    let expired = cp
        .raw(Some(&cp.admin_token), "GET", &format!("/apis/outpost.dev/v1alpha1/namespaces/default/installs?watch=true&resourceVersion={stale}&timeoutSeconds=2"), &[], "")
        .await;
    assert!(
        expired.text.contains("\"code\":410"),
        "the old revision is gone after the restart: {}",
        expired.text
    );

    api.patch(
        "ctl",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"approvalMode": "prompt"}})),
    )
    .await
    .unwrap();
    saw(&ctx, "reconciled after the 410", |s| {
        s.applied.iter().any(|(n, g)| n == "ctl" && *g == 3)
    })
    .await;

    api.delete("ctl", &DeleteParams::default()).await.unwrap();
    saw(&ctx, "cleaned up", |s| s.cleaned.iter().any(|n| n == "ctl")).await;
    eventually(30, "the install to be removed after cleanup", async || {
        api.get_opt("ctl").await.unwrap().is_none().then_some(())
    })
    .await;
    controller.abort();
}
