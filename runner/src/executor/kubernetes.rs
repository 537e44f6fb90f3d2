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
pub mod secret_objects;

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

    /// The objects `desired` declares, resolved against the cluster's discovery, with
    /// a Namespace object first for each namespace that does not exist yet.
    async fn targets(&self, desired: &Value) -> anyhow::Result<Vec<Target>> {
        self.targets_with(desired, &[]).await
    }

    /// [`KubernetesExecutor::targets`], also ensuring the namespaces of `secrets`.
    async fn targets_with(
        &self,
        desired: &Value,
        secrets: &[SecretObject],
    ) -> anyhow::Result<Vec<Target>> {
        let source = desired
            .get("manifest")
            .or_else(|| desired.pointer("/component/manifest"))
            .context("the desired state has no `manifest` (a kubernetes_manifest component)")?;
        let content = source
            .get("content")
            .and_then(Value::as_str)
            .context("the manifest has no `content`")?;
        let namespace = source
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(self.client.default_namespace())
            .to_owned();
        let mut objects = parse_manifest(content)?;
        // CRDs, then Namespaces first, so that what needs them finds them.
        objects.sort_by_key(crds::install_order);
        let defined: Vec<Value> = objects
            .iter()
            .filter(|o| crds::is_crd(o))
            .cloned()
            .collect();
        let mut discovery = Discovery::default();
        let mut targets = Vec::new();
        for object in objects {
            targets.push(
                self.target(&mut discovery, object, &namespace, &defined)
                    .await?,
            );
        }
        let declared: Vec<String> = targets
            .iter()
            .filter(|t| t.resource.kind == "Namespace")
            .map(|t| t.name.clone())
            .collect();
        let mut missing: Vec<String> = Vec::new();
        let secret_namespaces = secrets.iter().map(|s| s.namespace.clone());
        for ns in targets
            .iter()
            .filter_map(|t| t.namespace.clone())
            .chain(secret_namespaces)
        {
            if declared.contains(&ns) || missing.contains(&ns) {
                continue;
            }
            let namespaces = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Namespace"),
                "namespaces",
            );
            let namespaces: Api<DynamicObject> = Api::all_with(self.client.clone(), &namespaces);
            if namespaces
                .get_opt(&ns)
                .await
                .with_context(|| format!("cannot read namespace {ns}"))?
                .is_none()
            {
                missing.push(ns);
            }
        }
        let mut created = Vec::new();
        for ns in missing {
            let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let mut target = self.target(&mut discovery, object, &namespace, &[]).await?;
            target.ensured = true;
            created.push(target);
        }
        created.extend(targets);
        Ok(created)
    }

    /// The target of `object`; a kind the cluster does not serve is resolved from one
    /// of `defined` (the manifest's CRDs) if one defines it.
    async fn target(
        &self,
        discovery: &mut Discovery,
        mut object: Value,
        default_namespace: &str,
        defined: &[Value],
    ) -> anyhow::Result<Target> {
        let (resource, scope, pending_crd) = match discovery.resolve(&self.client, &object).await {
            Ok((resource, caps)) => (resource, caps.scope, None),
            Err(err) => {
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                let kind = object["kind"].as_str().unwrap_or_default();
                match crds::defined_by(defined, api_version, kind) {
                    Some((resource, scope, crd)) => (resource, scope, Some(crd)),
                    None => return Err(err),
                }
            }
        };
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .with_context(|| format!("a {} in the manifest has no metadata.name", resource.kind))?
            .to_owned();
        let namespace = match scope {
            Scope::Cluster => None,
            Scope::Namespaced => {
                let ns = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(default_namespace)
                    .to_owned();
                object["metadata"]["namespace"] = json!(ns);
                Some(ns)
            }
        };
        Ok(Target {
            ensured: false,
            pending_crd,
            object,
            resource,
            namespace,
            name,
        })
    }

    /// The targets of a teardown: the manifest's objects if the Plan carries one, else
    /// those the last apply recorded.
    async fn teardown_targets(&self, ctx: &StepContext) -> anyhow::Result<Vec<Target>> {
        if ctx.desired.get("manifest").is_some()
            || ctx.desired.pointer("/component/manifest").is_some()
        {
            return self.targets(&ctx.desired).await;
        }
        let recorded = read_references(&ctx.work_dir)?;
        self.referenced(&recorded).await
    }

    /// Targets for object references or objects (`apiVersion`, `kind`, `metadata` or
    /// flat `namespace`/`name`).
    async fn referenced(&self, objects: &[Value]) -> anyhow::Result<Vec<Target>> {
        let mut discovery = Discovery::default();
        let mut targets = Vec::new();
        for object in objects.iter().filter(|o| !o.is_null()) {
            let name = object
                .pointer("/metadata/name")
                .or_else(|| object.get("name"))
                .cloned()
                .unwrap_or(Value::Null);
            let namespace = object
                .pointer("/metadata/namespace")
                .or_else(|| object.get("namespace"))
                .cloned()
                .unwrap_or(Value::Null);
            let mut metadata = json!({"name": name});
            if !namespace.is_null() {
                metadata["namespace"] = namespace;
            }
            let shaped = json!({"apiVersion": object["apiVersion"], "kind": object["kind"], "metadata": metadata});
            targets.push(self.target(&mut discovery, shaped, "default", &[]).await?);
        }
        Ok(targets)
    }

    /// The target of one Secret the Plan writes.
    async fn secret_target(&self, secret: &SecretObject) -> anyhow::Result<Target> {
        let mut discovery = Discovery::default();
        self.target(&mut discovery, secret.object(), &secret.namespace, &[])
            .await
    }

    async fn dry_run(&self, target: &Target) -> anyhow::Result<Value> {
        let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let result = target
            .api(&self.client)
            .patch(&target.name, &params, &Patch::Apply(&target.object))
            .await
            .with_context(|| format!("dry-run apply of {} failed", describe(target)))?;
        Ok(serde_json::to_value(result)?)
    }

    async fn live(&self, target: &Target) -> anyhow::Result<Option<Value>> {
        let live = target
            .api(&self.client)
            .get_opt(&target.name)
            .await
            .with_context(|| format!("cannot read {}", describe(target)))?;
        Ok(live.map(serde_json::to_value).transpose()?)
    }

    /// Server-side applies each Secret; returns their references (for teardown and the
    /// `objects` output). Not part of the drift baseline: its data is not compared, so
    /// it is never reported.
    async fn apply_secrets(
        &self,
        secrets: &[SecretObject],
        log: &mut String,
    ) -> anyhow::Result<Vec<Value>> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut references = Vec::new();
        for secret in secrets {
            let target = self.secret_target(secret).await?;
            // The error names the Secret; the API server's message does not carry data.
            let result = target
                .api(&self.client)
                .patch(&target.name, &params, &Patch::Apply(&target.object))
                .await
                .with_context(|| format!("server-side apply of {} failed", secret.describe()))?;
            log.push_str(&format!("{} serverside-applied\n", secret.describe()));
            references.push(target.reference(result.metadata.uid.as_deref()));
        }
        Ok(references)
    }

    /// The live objects the last apply recorded (its inventory) that the desired state
    /// no longer has: an upgrade prunes them. An object recreated since (another uid)
    /// is not the one applied, and is left alone.
    async fn prunable(
        &self,
        ctx: &StepContext,
        secrets: &[SecretObject],
    ) -> anyhow::Result<Vec<Value>> {
        let wanted: Vec<Value> = self
            .targets_with(&ctx.desired, secrets)
            .await?
            .iter()
            .map(|t| t.reference(None))
            .chain(
                secrets
                    .iter()
                    .map(|s| json!({"kind": "Secret", "namespace": s.namespace, "name": s.name})),
            )
            .collect();
        let mut live_objects = Vec::new();
        for recorded in dropped(&read_references(&ctx.work_dir)?, &wanted) {
            let target = self.referenced(std::slice::from_ref(&recorded)).await?;
            let Some(target) = target.first() else {
                continue;
            };
            if let Some(live) = self.live(target).await?
                && (recorded["uid"].is_null()
                    || live.pointer("/metadata/uid") == Some(&recorded["uid"]))
            {
                live_objects.push(without_secret_data(without_managed_fields(live)));
            }
        }
        Ok(live_objects)
    }

    /// Deletes what the last apply recorded and `applied` (this apply's references) no
    /// longer has, each only if it is still the object applied then (uid precondition);
    /// the references of what was deleted.
    async fn prune(
        &self,
        ctx: &StepContext,
        applied: &[Value],
        log: &mut String,
    ) -> anyhow::Result<Vec<Value>> {
        let mut pruned = Vec::new();
        for recorded in dropped(&read_references(&ctx.work_dir)?, applied) {
            let targets = self.referenced(std::slice::from_ref(&recorded)).await?;
            let Some(target) = targets.first() else {
                continue;
            };
            let mut params = DeleteParams::background();
            if let Some(uid) = recorded["uid"].as_str() {
                params = params.preconditions(kube_client::api::Preconditions {
                    uid: Some(uid.to_owned()),
                    resource_version: None,
                });
            }
            match target.api(&self.client).delete(&target.name, &params).await {
                Ok(_) => {
                    log.push_str(&format!("{} pruned\n", describe(target)));
                    pruned.push(recorded);
                }
                // Gone already, or another object of that name since (not ours).
                Err(kube_client::Error::Api(status)) if [404, 409].contains(&status.code) => {}
                Err(err) => {
                    return Err(err).with_context(|| format!("cannot prune {}", describe(target)));
                }
            }
        }
        Ok(pruned)
    }

    /// Waits until the CRDs `names` are `Established` ([`crds::await_established`]).
    async fn await_established(&self, names: &[String], log: &mut String) -> anyhow::Result<()> {
        let definitions = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &definitions);
        crds::await_established(names, crds::ESTABLISHED_TIMEOUT, |name| {
            let api = api.clone();
            async move {
                let live = api
                    .get_opt(&name)
                    .await
                    .with_context(|| format!("cannot read CustomResourceDefinition {name}"))?;
                Ok(live.map(serde_json::to_value).transpose()?)
            }
        })
        .await?;
        log.push_str(&format!("{} established\n", names.join(", ")));
        Ok(())
    }

    async fn plan_teardown(&self, ctx: &StepContext) -> anyhow::Result<Diff> {
        let mut document = Vec::new();
        for target in self.teardown_targets(ctx).await?.iter().rev() {
            if let Some(live) = self.live(target).await? {
                document.push(without_secret_data(without_managed_fields(live)));
            }
        }
        let resources = document
            .iter()
            .map(|object| ResourceChange {
                address: object_address(object),
                action: ChangeAction::Delete,
                fields: Vec::new(),
                note: None,
            })
            .collect();
        Ok(Diff {
            input: PolicyInput::Kubernetes,
            summary: format!("{} objects: {} to delete", document.len(), document.len()),
            changes: !document.is_empty(),
            document: Value::Array(document),
            resources: Some(resources),
            basis: Value::Null,
        })
    }

    async fn apply_teardown(&self, ctx: &StepContext) -> anyhow::Result<Applied> {
        let mut deleted = Vec::new();
        for target in self.teardown_targets(ctx).await?.iter().rev() {
            let gone = target
                .api(&self.client)
                .delete(&target.name, &DeleteParams::background())
                .await;
            match gone {
                Ok(_) => deleted.push(target.reference(None)),
                Err(kube_client::Error::Api(status)) if status.code == 404 => {}
                Err(err) => {
                    return Err(err).with_context(|| format!("cannot delete {}", describe(target)));
                }
            }
        }
        let log = format!("{} objects deleted", deleted.len());
        write_references(&ctx.work_dir, &[])?;
        Ok(Applied {
            outputs: [("deleted".to_owned(), Value::Array(deleted))].into(),
            log,
            last_applied: Value::Array(Vec::new()),
            audit: Default::default(),
        })
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

/// A stream that yields whenever one of the `last_applied` objects is changed or
/// deleted, so drift is checked within seconds of an out-of-band edit. It also yields
/// once each object's watch is established (and again after each reconnection), since
/// changes made before then were not seen: check drift then too. Watches reconnect with
/// backoff and never end. Like every stream, it does nothing until polled.
pub async fn watch_objects(
    client: kube_client::Client,
    last_applied: &Value,
) -> anyhow::Result<impl Stream<Item = ()> + Send + use<>> {
    let objects = last_applied
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let targets = KubernetesExecutor::new(client.clone())
        .referenced(objects)
        .await?;
    let watches = targets.into_iter().map(|target| {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
        watcher(target.api(&client), config)
            .default_backoff()
            .filter_map(|event| async move {
                matches!(
                    event,
                    Ok(watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone)
                )
                .then_some(())
            })
            .boxed()
    });
    Ok(futures::stream::select_all(watches))
}

/// A live or applied object without what the server manages: `metadata.managedFields`,
/// `resourceVersion`, `uid`, `creationTimestamp`, `generation`, and `status`. Drift and
/// "unchanged" are decided on this.
pub fn normalise(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    object
}

/// A Secret the runner wrote without its data (policies read teardown diffs); any other
/// object as it is.
fn without_secret_data(mut object: Value) -> Value {
    let label = format!(
        "/metadata/labels/{}",
        secret_objects::MANAGED_BY_LABEL.replace('/', "~1")
    );
    if object["kind"] == "Secret"
        && object.pointer(&label) == Some(&json!("outpost"))
        && let Some(map) = object.as_object_mut()
    {
        map.remove("data");
        map.remove("stringData");
    }
    object
}

fn without_managed_fields(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    object
}

/// Every object of a multi-document YAML manifest; `List`s are expanded, empty
/// documents skipped.
pub fn parse_manifest(content: &str) -> anyhow::Result<Vec<Value>> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(content).context("the manifest is not valid YAML")?;
    let mut objects = Vec::new();
    for document in documents {
        match document {
            Value::Null => {}
            Value::Object(ref map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && map.get("items").is_some_and(Value::is_array) =>
            {
                objects.extend(map["items"].as_array().cloned().unwrap_or_default());
            }
            Value::Object(ref map)
                if map.contains_key("apiVersion") && map.contains_key("kind") =>
            {
                objects.push(document);
            }
            other => bail!("a manifest document is not a Kubernetes object: {other}"),
        }
    }
    Ok(objects)
}

/// The references among `recorded` whose object is not among `wanted` (references
/// too: same kind, namespace and name), last recorded first (the order teardown
/// deletes in).
fn dropped(recorded: &[Value], wanted: &[Value]) -> Vec<Value> {
    let key = |r: &Value| (r["kind"].clone(), r["namespace"].clone(), r["name"].clone());
    recorded
        .iter()
        .rev()
        .filter(|r| !wanted.iter().any(|w| key(w) == key(r)))
        .cloned()
        .collect()
}

/// `Kind/namespace/name` (`Kind/name` when cluster-scoped), as diffs name objects.
fn address(target: &Target) -> String {
    match &target.namespace {
        Some(ns) => format!("{}/{ns}/{}", target.resource.kind, target.name),
        None => format!("{}/{}", target.resource.kind, target.name),
    }
}

/// [`address`] of an object as the API server returned it.
fn object_address(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

fn describe(target: &Target) -> String {
    let kind = target.resource.kind.to_lowercase();
    match &target.namespace {
        Some(ns) => format!("{kind} {ns}/{}", target.name),
        None => format!("{kind} {}", target.name),
    }
}

fn write_references(work_dir: &Path, references: &[Value]) -> anyhow::Result<()> {
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let path = work_dir.join(OBJECTS_FILE);
    std::fs::write(&path, serde_json::to_vec_pretty(references)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

fn read_references(work_dir: &Path) -> anyhow::Result<Vec<Value>> {
    let path = work_dir.join(OBJECTS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a list of object references", path.display())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Discovery of the kinds a manifest uses, one request per group/version/kind.
#[derive(Default)]
struct Discovery {
    known: HashMap<(String, String), (ApiResource, ApiCapabilities)>,
}

impl Discovery {
    async fn resolve(
        &mut self,
        client: &kube_client::Client,
        object: &Value,
    ) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.known.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("the cluster does not serve {kind} in {api_version}"))?;
        self.known.insert(key, found.clone());
        Ok(found)
    }
}
