//! The `helm_chart` executor: a chart rendered by Helm, applied as a set of objects.
//!
//! * **render**: `helm template RELEASE CHART --namespace NS --values FILE
//!   --include-crds --skip-tests --kube-version V --api-versions ...` (see [`render`]),
//!   the release named after the component, `.Capabilities` from the install's cluster
//!   (its version and every group/version and group/version/kind it serves). Values
//!   are the component's `helm.values` (dotted paths, typed as `helm --set` types
//!   them). The rendering of each Plan is kept in the entity's work directory, so the
//!   apply applies exactly what was planned.
//! * **plan, apply, drift, teardown**: the rendered objects are handed to the
//!   [`KubernetesExecutor`] as a manifest: server-side apply (CRDs first, waited for
//!   until Established, then Namespaces: [`super::kubernetes::crds`]), the dry-run as
//!   the diff, an inventory of what was
//!   applied, pruning of what an upgrade no longer renders, drift per object,
//!   teardown of the inventory. No release Secret is written: there is no Helm release
//!   to get stuck `pending-*`.
//! * **hooks** are refused: a chart that renders an object annotated `helm.sh/hook`
//!   (other than tests, which `--skip-tests` leaves out) fails the Plan naming them.
//!   Their ordering and deletion policies are Helm's release machinery, which this
//!   executor does not run.
//! * **sources**: a local chart directory under a `--module-root` (as terraform's local
//!   modules), or a chart in an OCI registry (`oci://HOST/NAME` at `helm.version`),
//!   copied into the install's registry (`helm.destination`) and pulled from there by
//!   digest ([`oci`]); the diff names it `install-registry/name@sha256:…` (its basis,
//!   so its hash and the Plan's `status.diff.source`, and its summary), and so does the
//!   apply's `chart` output. A chart of an HTTP chart repository (`helm.repository`)
//!   is checked against its index's digest and takes the same road ([`repo`]).
//! * Secret references (`${outpost-secret:…}`) in values are refused: rendered values
//!   would be in the diff. Secrets a Plan lists in `kubernetesSecrets` are written as
//!   for manifests.

mod oci;
pub mod render;
mod repo;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use outpost_api::Operation;
use serde_json::{Value, json};

use super::kubernetes::{KubernetesExecutor, parse_manifest};
use super::{Applied, BASIS_ARTEFACT, Diff, Executor, ExecutorError, Moved, StepContext, typed};
use render::{Chart, Renderer};

/// Where each Plan's rendering is kept, under the entity's work directory.
const RENDERED_DIR: &str = "helm-rendered";
/// The output naming the chart a registry chart was rendered from, by digest.
const CHART_OUTPUT: &str = "chart";
/// The output naming where that chart was copied from, by digest.
const CHART_SOURCE_OUTPUT: &str = "chartSource";
/// The key of the diff's basis naming where the chart was copied from.
const BASIS_COPIED_FROM: &str = "copiedFrom";
/// The annotation that makes an object a Helm hook.
const HOOK_ANNOTATION: &str = "helm.sh/hook";

/// Applies `helm_chart` components: Helm renders, the Kubernetes executor applies.
#[derive(Clone)]
pub struct HelmExecutor {
    objects: KubernetesExecutor,
    renderer: Renderer,
    chart_roots: Vec<PathBuf>,
}

impl HelmExecutor {
    /// An executor rendering with `renderer` and applying with `client`; local charts
    /// must be under one of `chart_roots`.
    pub fn new(client: kube_client::Client, renderer: Renderer, chart_roots: Vec<PathBuf>) -> Self {
        HelmExecutor {
            objects: KubernetesExecutor::new(client.clone()),
            renderer,
            chart_roots,
        }
    }

    /// Renders the Plan's chart (pulled from the install's registry first, for a chart
    /// from a registry) and keeps the rendering for its apply; also returns what was
    /// pulled.
    async fn render(
        &self,
        ctx: &StepContext,
    ) -> anyhow::Result<(StepContext, Option<oci::Pulled>)> {
        let mut chart = Chart::of(&ctx.desired, &self.chart_roots)?;
        let mut pulled = None;
        if chart.from_registry {
            let helm = ctx
                .desired
                .get("helm")
                .or_else(|| ctx.desired.pointer("/component/helm"))
                .context("the desired state has no `helm`")?;
            let chart_pulled = if helm.get("repository").is_some_and(|r| !r.is_null()) {
                repo::pull(helm, &ctx.env, &ctx.work_dir).await?
            } else {
                oci::pull(helm, &ctx.env, &ctx.work_dir).await?
            };
            chart.directory = chart_pulled.archive.clone();
            pulled = Some(chart_pulled);
        }
        let manifest = self
            .renderer
            .template(&ctx.entity, &chart, ctx.timeout)
            .await?;
        refuse_hooks(&manifest)?;
        let path = rendered_path(&ctx.work_dir, &ctx.plan_uid);
        std::fs::create_dir_all(path.parent().unwrap_or(&ctx.work_dir))
            .with_context(|| format!("cannot create {}", path.display()))?;
        std::fs::write(&path, &manifest)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok((as_manifest(ctx, &chart.namespace, manifest), pulled))
    }
}

/// `diff` naming the chart it was rendered from, `pulled` from the install's registry:
/// in its basis (so in its hash, which an approval binds to, and in the Plan's
/// `status.diff.source`), with where it was copied from, and in its summary. The
/// objects' own basis moves under `objects`.
fn with_chart(mut diff: Diff, pulled: &oci::Pulled) -> Diff {
    diff.summary = format!("chart {}: {}", pulled.reference, diff.summary);
    diff.basis = json!({BASIS_ARTEFACT: pulled.reference, BASIS_COPIED_FROM: pulled.source,
                        "objects": diff.basis});
    diff
}

/// The chart a diff names ([`with_chart`]), if any.
fn chart_of(diff: &Diff) -> Option<&str> {
    diff.basis.get(BASIS_ARTEFACT).and_then(Value::as_str)
}

/// `diff` as the Kubernetes executor computed it: the objects' basis back in place.
fn objects_diff(diff: &Diff) -> Diff {
    let mut objects = diff.clone();
    if chart_of(diff).is_some() {
        objects.basis = diff.basis.get("objects").cloned().unwrap_or(Value::Null);
    }
    objects
}

/// `applied` with the `chart` and `chartSource` outputs: the chart `diff` was rendered
/// from and where it was copied from, by digest (none for a local chart or a teardown).
fn with_lineage(diff: &Diff, mut applied: Applied) -> Applied {
    if let Some(reference) = chart_of(diff) {
        applied
            .outputs
            .insert(CHART_OUTPUT.to_owned(), Value::String(reference.to_owned()));
        if let Some(source) = diff.basis.get(BASIS_COPIED_FROM) {
            applied
                .outputs
                .insert(CHART_SOURCE_OUTPUT.to_owned(), source.clone());
        }
    }
    applied
}

impl HelmExecutor {
    /// The Plan's context with the rendering its plan kept.
    fn rendered(&self, ctx: &StepContext) -> anyhow::Result<StepContext> {
        let chart = Chart::of(&ctx.desired, &self.chart_roots)?;
        let path = rendered_path(&ctx.work_dir, &ctx.plan_uid);
        let manifest = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "the rendering planned for Plan {} is gone ({}): plan again",
                ctx.plan,
                path.display()
            )
        })?;
        Ok(as_manifest(ctx, &chart.namespace, manifest))
    }

    /// What the Plan's plan computed its diff for: the inventory (teardown) or the
    /// rendering kept for it.
    fn planned(&self, ctx: &StepContext) -> anyhow::Result<StepContext> {
        match ctx.operation {
            Operation::Teardown => Ok(Self::inventory(ctx)),
            _ => self.rendered(ctx),
        }
    }

    /// A teardown's context: no manifest, so the inventory of the last apply is removed.
    fn inventory(ctx: &StepContext) -> StepContext {
        StepContext {
            desired: json!({"type": "helm_chart"}),
            ..ctx.clone()
        }
    }
}

/// `ctx` with its desired state the rendered `manifest` (and the Secrets it writes).
fn as_manifest(ctx: &StepContext, namespace: &str, manifest: String) -> StepContext {
    let mut desired = json!({
        "type": "helm_chart",
        "manifest": {"namespace": namespace, "content": manifest},
    });
    if let Some(secrets) = ctx
        .desired
        .get(super::kubernetes::secret_objects::DESIRED_KEY)
    {
        desired[super::kubernetes::secret_objects::DESIRED_KEY] = secrets.clone();
    }
    StepContext {
        desired,
        ..ctx.clone()
    }
}

fn rendered_path(work_dir: &Path, plan_uid: &str) -> PathBuf {
    work_dir.join(RENDERED_DIR).join(format!("{plan_uid}.yaml"))
}

/// Fails naming every hook `manifest` renders.
fn refuse_hooks(manifest: &str) -> anyhow::Result<()> {
    let hooks: Vec<String> = parse_manifest(manifest)?
        .iter()
        .filter_map(|object| {
            let hook = object
                .pointer("/metadata/annotations")?
                .get(HOOK_ANNOTATION)?
                .as_str()?;
            Some(format!(
                "{}/{} ({hook})",
                object["kind"].as_str().unwrap_or_default(),
                object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ))
        })
        .collect();
    if !hooks.is_empty() {
        bail!(
            "the chart has Helm hooks, which the runner does not run: {}",
            hooks.join(", ")
        );
    }
    Ok(())
}

impl Executor for HelmExecutor {
    fn resumable(&self) -> bool {
        self.objects.resumable()
    }

    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move {
            if ctx.operation == Operation::Teardown {
                return Ok(self.objects.plan(&Self::inventory(ctx)).await?);
            }
            let (rendered, pulled) = self.render(ctx).await?;
            let diff = self.objects.plan(&rendered).await?;
            Ok(match pulled {
                Some(pulled) => with_chart(diff, &pulled),
                None => diff,
            })
        })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move {
            let applied = self
                .objects
                .apply(&self.planned(ctx)?, &objects_diff(diff))
                .await?;
            let _ = std::fs::remove_file(rendered_path(&ctx.work_dir, &ctx.plan_uid));
            Ok(with_lineage(diff, applied))
        })
    }

    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move {
            let applied = self
                .objects
                .unchanged(&self.planned(ctx)?, &objects_diff(diff))
                .await?;
            Ok(with_lineage(diff, applied))
        })
    }

    fn moved<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Option<Moved>, ExecutorError>> {
        typed(async move {
            Ok(self
                .objects
                .moved(&self.planned(ctx)?, &objects_diff(diff))
                .await?)
        })
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        self.objects.observe(ctx, last_applied)
    }

    fn changes<'a>(
        &'a self,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Option<BoxStream<'static, ()>>, ExecutorError>> {
        self.objects.changes(last_applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_chart_is_in_the_diff_and_the_objects_see_their_own_basis() {
        let objects = Diff {
            input: outpost_api::PolicyInput::Kubernetes,
            document: json!([]),
            summary: "1 objects: 1 to create".into(),
            changes: true,
            resources: None,
            basis: json!([{"address": "ConfigMap/shop/web", "resourceVersion": null}]),
        };
        let reference = "127.0.0.1:5000/acme/shop@sha256:abc";
        let pulled = |reference: &str| oci::Pulled {
            archive: PathBuf::from("/x.tgz"),
            reference: reference.to_owned(),
            source: "vendor.example/charts/shop@sha256:abc".to_owned(),
        };
        let named = with_chart(objects.clone(), &pulled(reference));
        assert_eq!(chart_of(&named), Some(reference));
        assert_eq!(
            named.summary,
            format!("chart {reference}: 1 objects: 1 to create")
        );
        assert_ne!(
            crate::plan_diff::hash(&named),
            crate::plan_diff::hash(&with_chart(objects.clone(), &pulled("r/shop@sha256:def"))),
            "an approval binds to the chart's digest"
        );
        assert_eq!(
            crate::plan_diff::plan_diff(&named).source.as_deref(),
            Some(reference)
        );
        assert_eq!(objects_diff(&named).basis, objects.basis);
        assert_eq!(objects_diff(&objects), objects);
        let applied = with_lineage(&named, Applied::default());
        assert_eq!(applied.outputs[CHART_OUTPUT], json!(reference));
        assert_eq!(
            applied.outputs[CHART_SOURCE_OUTPUT],
            json!("vendor.example/charts/shop@sha256:abc")
        );
        assert!(
            with_lineage(&objects, Applied::default())
                .outputs
                .is_empty()
        );
    }

    #[test]
    fn hooks_are_refused_by_name() {
        let manifest = "---\n# Source: shop/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n";
        let err = refuse_hooks(manifest).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the chart has Helm hooks, which the runner does not run: Job/migrate (pre-install,pre-upgrade)"
        );
        assert!(refuse_hooks(manifest.split("---\napiVersion: batch").next().unwrap()).is_ok());
    }
}
