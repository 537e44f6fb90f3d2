//! A kube-rs `Controller` with a finalizer, pointed at `outpost server`, reconciles
//! Installs through create, update and delete, and recovers from a 410 by relisting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube_client::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::finalizer::{Event, finalizer};
use kube_client::runtime::watcher;
use outpost_api::Install;
use outpost_testing::{Backend, ControlPlane, on_both_backends};
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

async fn eventually<F: Fn(&Seen) -> bool>(ctx: &(Api<Install>, Mutex<Seen>), what: &str, check: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check(&*ctx.1.lock().await) {
        assert!(Instant::now() < deadline, "controller never {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    eventually(&ctx, "reconciled the new install", |s| {
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
    eventually(&ctx, "reconciled the update", |s| {
        s.applied.iter().any(|(n, g)| n == "ctl" && *g == 2)
    })
    .await;

    // Writes to another kind move the store on; after a restart the server's watch cache
    // starts past the controller's resourceVersion, so its watch gets 410 and relists.
    let components: Api<kube_client::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube_client::core::ApiResource::from_gvk_with_plural(
            &kube_client::core::GroupVersionKind::gvk("outpost.dev", "v1alpha1", "Component"),
            "components",
        ),
    );
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
    eventually(&ctx, "reconciled after the 410", |s| {
        s.applied.iter().any(|(n, g)| n == "ctl" && *g == 3)
    })
    .await;

    api.delete("ctl", &DeleteParams::default()).await.unwrap();
    eventually(&ctx, "cleaned up", |s| s.cleaned.iter().any(|n| n == "ctl")).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_opt("ctl").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the install was never removed after cleanup"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    controller.abort();
}
