//! `kubernetes_manifest` and `helm_chart` without a kubeconfig: each Plan reaches the
//! cluster its desired state names (`cluster`, from the sandbox's outputs) with a fresh
//! EKS token of the Plan's role ([`crate::eks`]), so what a Plan may do in the cluster
//! is what the cluster grants that role. A chart's objects are applied, dry-run and
//! pruned with that client; Helm's engine gets the same cluster as a kubeconfig that
//! lives only while it renders ([`Renderer::for_plan_cluster`]).
//!
//! A cluster the customer brings is named by a kubeconfig in their secret store
//! (`cluster.kubeconfig: ${outpost-secret:NAME}`), read under the Plan's role like any
//! secret and kept in memory ([`Cluster::customer_kubeconfig`]).

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;

use std::path::PathBuf;

use super::helm::HelmExecutor;
use super::helm::render::Renderer;
use super::kubernetes::KubernetesExecutor;
use super::{Applied, Diff, Executor, ExecutorError, Moved, StepContext, typed};
use crate::eks::Cluster;

/// The namespace of objects a manifest does not place, as with a kubeconfig that names
/// none.
const DEFAULT_NAMESPACE: &str = "default";

/// Applies `kubernetes_manifest` (or, [`PlanRoleClusterExecutor::helm`], `helm_chart`)
/// components into the cluster of each Plan's `cluster` block, under the Plan's role: a
/// [`KubernetesExecutor`] (or [`HelmExecutor`]) per step.
#[derive(Clone, Debug, Default)]
pub struct PlanRoleClusterExecutor {
    /// `helm_chart`: the `--helm` binary and the roots local charts must lie under.
    helm: Option<(PathBuf, Vec<PathBuf>)>,
}

impl PlanRoleClusterExecutor {
    /// `kubernetes_manifest` components.
    pub fn manifests() -> Self {
        Self::default()
    }

    /// `helm_chart` components rendered by `binary` (`--helm`), local charts under one
    /// of `chart_roots`.
    pub fn helm(binary: PathBuf, chart_roots: Vec<PathBuf>) -> Self {
        PlanRoleClusterExecutor {
            helm: Some((binary, chart_roots)),
        }
    }

    /// The executor of `ctx`'s cluster, authenticated as `ctx`'s role.
    async fn executor(&self, ctx: &StepContext) -> anyhow::Result<Box<dyn Executor>> {
        let cluster = Cluster::of(&ctx.desired)?.ok_or_else(|| {
            anyhow::anyhow!(
                "the component has no `cluster` block and the runner has no --kubeconfig: \
                 name the install's cluster (from the sandbox's outputs) in the component"
            )
        })?;
        let kubeconfig = cluster.step_kubeconfig(&ctx.env, DEFAULT_NAMESPACE).await?;
        let client = crate::eks::client_of(kubeconfig.clone()).await?;
        Ok(match &self.helm {
            None => Box::new(KubernetesExecutor::new(client)),
            Some((binary, roots)) => {
                let renderer = Renderer::for_plan_cluster(
                    binary.clone(),
                    client.clone(),
                    kubeconfig,
                    ctx.work_dir.clone(),
                );
                Box::new(HelmExecutor::new(client, renderer, roots.clone()))
            }
        })
    }
}

impl Executor for PlanRoleClusterExecutor {
    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move { Ok(self.executor(ctx).await?.plan(ctx).await?) })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move { Ok(self.executor(ctx).await?.apply(ctx, diff).await?) })
    }

    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move { Ok(self.executor(ctx).await?.unchanged(ctx, diff).await?) })
    }

    /// As [`KubernetesExecutor`]: a plan against live objects finishes a cut apply.
    fn resumable(&self) -> bool {
        true
    }

    fn moved<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Option<Moved>, ExecutorError>> {
        typed(async move { Ok(self.executor(ctx).await?.moved(ctx, diff).await?) })
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(async move { Ok(self.executor(ctx).await?.observe(ctx, last_applied).await?) })
    }

    /// `None`: a watch would need a token that outlives the Plan's credentials, so drift
    /// in such a cluster is found on schedule.
    fn changes<'a>(
        &'a self,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Option<BoxStream<'static, ()>>, ExecutorError>> {
        typed(async { Ok(None) })
    }
}
