//! The InstallStack controller: renders, per Install, the CloudFormation install stack
//! the customer runs (roles, runner, secrets) into an `InstallStack` object of the same
//! name, owned by the Install, and re-renders it when the Install or its App changes, or
//! when its stack is edited or deleted. A stack depends on nothing else (the render is a
//! function of the App, the Install and the controller's options), so the periodic
//! re-render is only a safety net ([`RESYNC`]).

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use kube_client::api::{Api, Patch, PatchParams, PostParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::reflector::{ObjectRef, Store};
use kube_client::runtime::{Predicate as _, WatchStreamExt as _, predicates, reflector, watcher};
use kube_client::{Client, Resource as _, ResourceExt as _};
use outpost_api::{App, Install, InstallStack, InstallStackSpec, Lean, content_hash};
use serde_json::{Value, json};

use crate::caches::installs::{Change, applied};
use crate::logic::install_stack::{StackOptions, render_install_stack};
use crate::logic::template::{InstallOutputs, TemplateContext};

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum StackControllerError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
}

struct Context {
    client: Client,
    options: StackOptions,
    apps: reflector::Store<App>,
    stacks: reflector::Store<InstallStack>,
}

/// How long after its last reconcile a stack is rendered again though nothing changed:
/// controller-runtime's `SyncPeriod`, for the one change no watch event announces (a
/// stack deleted while the controllers' watch was broken: a relist drops it silently).
/// It was 300 s; at 10,000 installs that was 33 renders a second and about a fifth of
/// the controllers' CPU (perf, `bench fleet --installs 10000`), for stacks that had not
/// changed.
pub const RESYNC: Duration = Duration::from_secs(3600);

/// The field manager of rendered stacks.
pub const MANAGER: &str = "outpost-install-stack";

/// Runs the InstallStack controller until the stream ends, on the shared watch of
/// Installs: its store and a follower of its changes
/// ([`crate::caches::installs::InstallCache`]).
pub async fn run(
    client: Client,
    options: StackOptions,
    installs: Store<Install>,
    changes: impl Stream<Item = Change> + Send + 'static,
) {
    // A change to an App's spec re-renders every install's stack; its status (the
    // release the App controller records) does not enter the stack.
    let (apps, apps_writer) = reflector::store();
    let app_changes = watcher::watcher(Api::<App>::all(client.clone()), crate::watch_config())
        .default_backoff()
        .reflect(apps_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default())
        .filter_map(|app| async move { app.is_ok().then_some(()) });
    // Only spec and label changes of an Install change its stack: the install
    // controller's many status updates must not re-render it each time.
    let install_changes = applied(changes, predicates::generation.combine(predicates::labels));
    // The stacks as stored: one that is already what would be applied is not applied
    // again (a server-side apply of an unchanged stack costs the server a full merge).
    // Only their specs' digests are kept ([`keep_digest`]). Every change, deletion
    // included, reconciles the owner: an edited or deleted stack is rendered again.
    let (stacks, stacks_writer) = reflector::store();
    let stack_events = outpost_api::lean::watcher(Api::all(client.clone()), crate::watch_config())
        .default_backoff()
        .modify(keep_digest)
        .reflect(stacks_writer)
        .touched_objects();
    let ctx = Arc::new(Context {
        client: client.clone(),
        options,
        apps,
        stacks,
    });
    Controller::for_shared_stream(install_changes, installs)
        .owns_stream(stack_events)
        .reconcile_all_on(app_changes)
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "install stack reconcile");
            }
        })
        .await;
}

async fn reconcile(
    install: Arc<Install>,
    ctx: Arc<Context>,
) -> Result<Action, StackControllerError> {
    let namespace = install.namespace().unwrap_or_default();
    let name = install.name_any();
    if install.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), ctx.apps.wait_until_ready()).await;
    let Some(app) = ctx
        .apps
        .get(&ObjectRef::new(&install.spec.app).within(&namespace))
    else {
        tracing::info!(install = %name, app = %install.spec.app, "no such app yet; no stack");
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let context = match TemplateContext::new(&app, &install, &InstallOutputs::default()) {
        Ok(context) => context,
        Err(err) => {
            tracing::warn!(install = %name, error = %err, "cannot render the install's templates");
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    };
    let render = |template: &str| context.render_str(template).map_err(|e| e.to_string());
    let spec = match render_install_stack(&app, &install, &ctx.options, &render) {
        Ok(spec) => spec,
        Err(err) => {
            tracing::warn!(install = %name, error = %err, "cannot render the install stack");
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    };
    let owner = install
        .controller_owner_ref(&())
        .expect("a stored Install has a name and uid");
    let rendered = digest(&spec);
    let stored = ctx.stacks.get(&ObjectRef::new(&name).within(&namespace));
    if stored.is_some_and(|stored| {
        stored.spec.template.as_str() == Some(rendered.as_str())
            && stored.owner_references().contains(&owner)
            && stored.labels().get(outpost_api::labels::INSTALL) == Some(&name)
    }) {
        return Ok(Action::requeue(RESYNC));
    }
    let stack = json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "InstallStack",
        "metadata": {"name": name, "ownerReferences": [owner], "labels": {outpost_api::labels::INSTALL: name}},
        "spec": spec,
    });
    // Answers decoded without their managed fields; the replace below sends none, which
    // keeps the stored ones.
    let stacks = Api::<Lean<InstallStack>>::namespaced(ctx.client.clone(), &namespace);
    let Lean(mut applied) = stacks
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&stack),
        )
        .await?;
    // An apply takes back every field another writer changed, and drops what it no longer
    // renders, but keeps what another writer added (a resource patched into the template
    // by hand is that writer's, not the applier's to prune). The stack is the render and
    // nothing else: then its spec is replaced, conditional on the version just applied.
    if digest(&applied.spec) != rendered {
        tracing::warn!(install = %name, "the stack holds fields another writer added; replacing its spec with the render");
        applied.spec = spec;
        stacks
            .replace(
                &name,
                &PostParams {
                    dry_run: false,
                    field_manager: Some(MANAGER.to_owned()),
                },
                &Lean(applied),
            )
            .await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// Trims a stack as it comes off the watch to what the reconcile compares: its spec's
/// digest (in place of the template; the parameters are in the digest too), its owners
/// and labels. The controller keeps every install's stack, and a stack's CloudFormation
/// template, decoded, with the managed fields of its server-side apply (now not decoded:
/// the watch is [`outpost_api::Lean`]), was over half the controllers' memory (`outpost bench fleet --installs 300`: 62 of 111 MiB of heap,
/// about 210 KiB per install; heaptrack).
fn keep_digest(stack: &mut InstallStack) {
    stack.spec.template = Value::String(digest(&stack.spec));
    stack.spec.parameters.clear();
}

/// The content hash of a stack's spec.
fn digest(spec: &InstallStackSpec) -> String {
    serde_json::to_value(spec)
        .map(|spec| content_hash(&spec))
        .unwrap_or_default()
}

fn error_policy(_: Arc<Install>, err: &StackControllerError, _: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "install stack reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(template: Value) -> InstallStack {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "InstallStack",
            "metadata": {"name": "i"},
            "spec": {"install": "i", "version": "v1", "template": template,
                     "parameters": {"Region": "eu-west-1"}},
        }))
        .expect("a valid InstallStack")
    }

    #[test]
    fn a_kept_stack_is_its_specs_digest_and_matches_only_that_spec() {
        let template = json!({"Resources": {"Role": {"Type": "AWS::IAM::Role"}}});
        let stored = stack(template.clone());
        let mut kept = stored.clone();
        keep_digest(&mut kept);
        assert!(kept.spec.parameters.is_empty());
        assert_eq!(
            kept.spec.template.as_str(),
            Some(digest(&stored.spec).as_str())
        );
        // What the controller would apply: the same spec matches, any change does not.
        assert_eq!(
            kept.spec.template.as_str(),
            Some(digest(&stack(template).spec).as_str())
        );
        let changed = stack(json!({"Resources": {"Role": {"Type": "AWS::IAM::User"}}}));
        assert_ne!(
            kept.spec.template.as_str(),
            Some(digest(&changed.spec).as_str())
        );
        let mut reparametrised = stored.clone();
        reparametrised
            .spec
            .parameters
            .insert("Region".into(), "us-east-1".into());
        assert_ne!(
            kept.spec.template.as_str(),
            Some(digest(&reparametrised.spec).as_str())
        );
    }
}
