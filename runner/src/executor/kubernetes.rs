//! The `kubernetes_manifest` executor: server-side apply into the install's cluster.
//!
//! * **plan**: every object of the manifest is applied with `dryRun=All` (field
//!   manager `outpost-runner`, forced); the diff is the list of dry-run results, and
//!   each is compared with the live object, both [normalised](normalise).
//! * **apply**: the same server-side apply for real; outputs name the applied objects
//!   (`objects`), next to the outputs the component declares (`manifest.outputs`, as
//!   the control plane rendered them); the normalised results are the baseline drift compares with. The object
//!   references are also kept in the entity's work directory, for teardown.
//! * **observe**: reads each last-applied object back, normalised (`null` if gone);
//!   [`watch_objects`] wakes drift detection as soon as one of them changes.
//! * **teardown**: deletes the objects (the plan lists what will go), last first.
//! * **Secrets**: the App secrets the Plan lists in `kubernetesSecrets` are written as
//!   Secrets first, after their namespaces and before the manifest's objects (see
//!   [`secret_objects`]); their values are in no diff, log, output or baseline, only in
//!   the cluster. They are torn down with the component.
//!
//! Namespaced objects without a namespace go into the manifest's `namespace` (else
//! the client's default); a namespace that does not exist is created first.
//! CustomResourceDefinitions go first and are waited for; custom resources of a CRD
//! the same manifest creates are planned without a dry-run ([`crds`]).
//!
//! Layout: this file holds the [`Executor`] sequence (plan, apply, unchanged, moved,
//! observe); [`targets`] resolves a manifest's objects against the cluster, [`writes`]
//! does the writes around the apply (Secrets, CRD waits, pruning, teardown),
//! [`objects`] normalises, parses, addresses and records objects, and [`watch`] wakes
//! drift detection.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use kube_client::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube_client::core::{ApiResource, GroupVersionKind};
use kube_client::discovery::{ApiCapabilities, Scope, pinned_kind};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use outpost_api::{
    ChangeAction, FieldChange, ManifestSource, Operation, PolicyInput, ResourceChange,
};
use serde_json::{Value, json};

use super::{Applied, Diff, Executor, ExecutorError, Moved, StepContext, typed};

pub mod crds;
mod objects;
pub mod secret_objects;
mod targets;
mod watch;
mod writes;

use objects::{
    address, describe, dropped, object_address, read_references, without_managed_fields,
    without_secret_data, write_references,
};
pub use objects::{normalise, parse_manifest};
pub use watch::watch_objects;

use secret_objects::SecretObject;

/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "outpost-runner";
/// Where the applied objects' references are kept in the entity's work directory.
const OBJECTS_FILE: &str = "kubernetes-objects.json";

/// Applies `kubernetes_manifest` components with a client of the install's cluster.
#[derive(Clone)]
pub struct KubernetesExecutor {
    client: kube_client::Client,
}

/// One object of a manifest, with where it is served.
struct Target {
    /// A Namespace the manifest's objects need and the cluster lacks: created before
    /// them, but not part of the component (never recorded, never torn down).
    ensured: bool,
    /// The CRD of this manifest that defines its kind, when the cluster does not serve
    /// the kind yet: it cannot be dry-run ([`crds`]).
    pending_crd: Option<String>,
    object: Value,
    resource: ApiResource,
    namespace: Option<String>,
    name: String,
}

impl Target {
    fn api(&self, client: &kube_client::Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }

    fn reference(&self, uid: Option<&str>) -> Value {
        json!({
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": uid,
        })
    }
}

impl KubernetesExecutor {
    /// An executor applying with `client` (built from the runner's `--kubeconfig`).
    pub fn new(client: kube_client::Client) -> Self {
        KubernetesExecutor { client }
    }
}

/// The outputs a rendered component declares (`manifest.outputs`), as strings.
fn declared_outputs(desired: &Value) -> std::collections::BTreeMap<String, Value> {
    desired["manifest"]["outputs"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

impl Executor for KubernetesExecutor {
    /// Server-side apply of the same objects is idempotent, and the re-plan compares
    /// each dry-run result with the live object: what the cut apply wrote is unchanged.
    fn resumable(&self) -> bool {
        true
    }

    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move {
            if ctx.operation == Operation::Teardown {
                return self.plan_teardown(ctx).await;
            }
            let (mut create, mut change, mut unchanged) = (0, 0, 0);
            let mut document = Vec::new();
            let mut namespaces = Vec::new();
            let mut resources = Vec::new();
            let mut basis = Vec::new();
            // Secrets are compared here, in memory; the diff policies see never has them.
            let secrets = secret_objects::secret_objects(ctx)?;
            let mut stale_secrets = Vec::new();
            for secret in &secrets {
                let live = self.live(&self.secret_target(secret).await?).await?;
                if !secret.is_current(live.as_ref()) {
                    stale_secrets.push(secret.describe());
                    resources.push(ResourceChange {
                        address: format!("Secret/{}/{}", secret.namespace, secret.name),
                        action: if live.is_some() {
                            ChangeAction::Update
                        } else {
                            ChangeAction::Create
                        },
                        fields: vec![FieldChange {
                            path: "data".into(),
                            before: live.is_some().then(|| crate::plan_diff::SENSITIVE.into()),
                            after: Some(crate::plan_diff::SENSITIVE.into()),
                        }],
                        note: None,
                    });
                }
            }
            let mut not_dry_run = 0;
            for target in self.targets_with(&ctx.desired, &secrets).await? {
                let address = address(&target);
                if let Some(crd) = &target.pending_crd {
                    // Its kind is not served until its CRD is applied: shown as rendered.
                    create += 1;
                    not_dry_run += 1;
                    basis.push(json!({"address": address, "resourceVersion": null}));
                    resources.push(ResourceChange {
                        address,
                        action: ChangeAction::Create,
                        fields: Vec::new(),
                        note: Some(format!(
                            "its CRD {crd} is created by this Plan; not dry-run"
                        )),
                    });
                    document.push(target.object.clone());
                    continue;
                }
                let live = self.live(&target).await?;
                let result = self.dry_run(&target).await?;
                basis.push(json!({
                    "address": address,
                    "resourceVersion": live.as_ref().and_then(|l| l.pointer("/metadata/resourceVersion")),
                }));
                match &live {
                    _ if target.ensured => {
                        namespaces.push(target.name.clone());
                        resources.push(ResourceChange {
                            address,
                            action: ChangeAction::Create,
                            fields: Vec::new(),
                            note: None,
                        });
                    }
                    None => {
                        create += 1;
                        resources.push(ResourceChange {
                            address,
                            action: ChangeAction::Create,
                            fields: Vec::new(),
                            note: None,
                        });
                    }
                    Some(live) if normalise(live) != normalise(&result) => {
                        change += 1;
                        let secret = target.resource.kind == "Secret";
                        resources.push(ResourceChange {
                            address,
                            action: ChangeAction::Update,
                            fields: crate::plan_diff::field_changes(
                                &normalise(live),
                                &normalise(&result),
                                &|path: &str| {
                                    secret
                                        && (path.starts_with("data")
                                            || path.starts_with("stringData"))
                                },
                            ),
                            note: None,
                        });
                    }
                    Some(_) => unchanged += 1,
                }
                document.push(without_managed_fields(result));
            }
            let pruned = self.prunable(ctx, &secrets).await?;
            for object in &pruned {
                resources.push(ResourceChange {
                    address: object_address(object),
                    action: ChangeAction::Delete,
                    fields: Vec::new(),
                    note: None,
                });
            }
            let mut summary = format!(
                "{} objects: {create} to create, {change} to change, {unchanged} unchanged",
                create + change + unchanged
            );
            if not_dry_run > 0 {
                summary.push_str(&format!(
                    " ({not_dry_run} not dry-run: their CRDs are created by this Plan)"
                ));
            }
            if !pruned.is_empty() {
                summary.push_str(&format!("; {} to prune", pruned.len()));
            }
            if !namespaces.is_empty() {
                summary.push_str(&format!("; namespace {} to create", namespaces.join(", ")));
            }
            if !stale_secrets.is_empty() {
                summary.push_str(&format!("; {} to write", stale_secrets.join(", ")));
            }
            Ok(Diff {
                input: PolicyInput::Kubernetes,
                summary,
                changes: create + change > 0
                    || !namespaces.is_empty()
                    || !stale_secrets.is_empty()
                    || !pruned.is_empty(),
                resources: Some(resources),
                basis: Value::Array(basis),
                document: Value::Array(document),
            })
        })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        _diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move {
            if ctx.operation == Operation::Teardown {
                return self.apply_teardown(ctx).await;
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let mut references = Vec::new();
            let mut applied = Vec::new();
            let mut log = String::new();
            let secrets = secret_objects::secret_objects(ctx)?;
            let mut secrets_pending = !secrets.is_empty();
            let mut audit = serde_json::Map::new();
            let mut applied_crds = Vec::new();
            for target in self.targets_with(&ctx.desired, &secrets).await? {
                if !applied_crds.is_empty() && !crds::is_crd(&target.object) {
                    // Everything after the CRDs may need them served.
                    self.await_established(&applied_crds, &mut log).await?;
                    applied_crds.clear();
                }
                // Secrets go in once their namespaces exist, before what reads them.
                if secrets_pending && target.resource.kind != "Namespace" {
                    secrets_pending = false;
                    references.extend(self.apply_secrets(&secrets, &mut log).await?);
                }
                let result = target
                    .api(&self.client)
                    .patch(&target.name, &params, &Patch::Apply(&target.object))
                    .await
                    .with_context(|| {
                        format!("server-side apply of {} failed", describe(&target))
                    })?;
                log.push_str(&format!("{} serverside-applied\n", describe(&target)));
                if crds::is_crd(&target.object) {
                    applied_crds.push(target.name.clone());
                }
                if target.ensured {
                    continue;
                }
                references.push(target.reference(result.metadata.uid.as_deref()));
                applied.push(normalise(&serde_json::to_value(result)?));
            }
            if !applied_crds.is_empty() {
                self.await_established(&applied_crds, &mut log).await?;
            }
            if secrets_pending {
                references.extend(self.apply_secrets(&secrets, &mut log).await?);
            }
            if !secrets.is_empty() {
                let written = secrets.iter().flat_map(SecretObject::audit).collect();
                audit.insert(
                    secret_objects::DESIRED_KEY.to_owned(),
                    Value::Array(written),
                );
            }
            let pruned = self.prune(ctx, &references, &mut log).await?;
            if !pruned.is_empty() {
                audit.insert("pruned".to_owned(), Value::Array(pruned));
            }
            write_references(&ctx.work_dir, &references)?;
            let mut outputs = declared_outputs(&ctx.desired);
            outputs.insert(
                ManifestSource::OBJECTS_OUTPUT.to_owned(),
                Value::Array(references),
            );
            Ok(Applied {
                outputs,
                log,
                last_applied: Value::Array(applied),
                audit,
            })
        })
    }

    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move {
            // Nothing is applied: the references are the live objects' (their uids are in
            // the dry-run results), the baseline those results normalised.
            if ctx.operation == Operation::Teardown {
                return Ok(Applied {
                    outputs: [("deleted".to_owned(), Value::Array(Vec::new()))].into(),
                    last_applied: Value::Array(Vec::new()),
                    ..Applied::default()
                });
            }
            let objects = diff.document.as_array().cloned().unwrap_or_default();
            let mut references = read_references(&ctx.work_dir)?
                .into_iter()
                .filter(|r| r["kind"] == "Secret")
                .collect::<Vec<_>>();
            references.extend(objects.iter().map(|o| {
                json!({
                    "apiVersion": o["apiVersion"],
                    "kind": o["kind"],
                    "namespace": o.pointer("/metadata/namespace"),
                    "name": o.pointer("/metadata/name"),
                    "uid": o.pointer("/metadata/uid"),
                })
            }));
            let mut outputs = declared_outputs(&ctx.desired);
            outputs.insert(
                ManifestSource::OBJECTS_OUTPUT.to_owned(),
                Value::Array(references),
            );
            Ok(Applied {
                outputs,
                log: String::new(),
                last_applied: Value::Array(objects.iter().map(normalise).collect()),
                audit: Default::default(),
            })
        })
    }

    fn moved<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Option<Moved>, ExecutorError>> {
        typed(async move {
            let Some(planned) = diff.basis.as_array() else {
                return Ok(None);
            };
            let secrets = secret_objects::secret_objects(ctx)?;
            let mut now = Vec::new();
            for target in self.targets_with(&ctx.desired, &secrets).await? {
                let live = self.live(&target).await?;
                now.push(json!({
                    "address": address(&target),
                    "resourceVersion": live.as_ref().and_then(|l| l.pointer("/metadata/resourceVersion")),
                }));
            }
            for (i, object) in now.iter().enumerate() {
                if planned.get(i) != Some(object) {
                    return Ok(Some(Moved(format!(
                        "{} changed since planning",
                        object["address"].as_str().unwrap_or_default()
                    ))));
                }
            }
            if now.len() != planned.len() {
                return Ok(Some(Moved(
                    "the set of objects changed since planning".into(),
                )));
            }
            Ok(None)
        })
    }

    fn observe<'a>(
        &'a self,
        _ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(async move {
            let objects = last_applied
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut observed = Vec::new();
            for target in self.referenced(objects).await? {
                observed.push(match self.live(&target).await? {
                    Some(live) => normalise(&live),
                    None => Value::Null,
                });
            }
            Ok(Value::Array(observed))
        })
    }

    fn changes<'a>(
        &'a self,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Option<BoxStream<'static, ()>>, ExecutorError>> {
        typed(async move {
            let stream = watch_objects(self.client.clone(), last_applied).await?;
            Ok(Some(stream.boxed()))
        })
    }
}
