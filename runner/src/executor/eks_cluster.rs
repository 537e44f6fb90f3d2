//! `kubernetes_manifest` without a kubeconfig: each Plan reaches the cluster its
//! desired state names (`cluster`, from the sandbox's outputs) with a fresh EKS token
//! of the Plan's role ([`crate::eks`]), so what a Plan may do in the cluster is what
//! the cluster grants that role.

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;

use super::kubernetes::KubernetesExecutor;
use super::{Applied, Diff, Executor, Moved, StepContext};
use crate::eks::Cluster;

/// The namespace of objects a manifest does not place, as with a kubeconfig that names
/// none.
const DEFAULT_NAMESPACE: &str = "default";

/// Applies `kubernetes_manifest` components into the cluster of each Plan's `cluster`
/// block, under the Plan's role: a [`KubernetesExecutor`] per step.
#[derive(Clone, Debug, Default)]
pub struct PlanRoleClusterExecutor;

impl PlanRoleClusterExecutor {
    /// The Kubernetes executor of `ctx`'s cluster, authenticated as `ctx`'s role.
    async fn executor(ctx: &StepContext) -> anyhow::Result<KubernetesExecutor> {
        let cluster = Cluster::of(&ctx.desired)?.ok_or_else(|| {
            anyhow::anyhow!(
                "the component has no `cluster` block and the runner has no --kubeconfig: \
                 name the install's cluster (from the sandbox's outputs) in the component"
            )
        })?;
        let client = cluster.client(&ctx.env, DEFAULT_NAMESPACE).await?;
        Ok(KubernetesExecutor::new(client))
    }
}

impl Executor for PlanRoleClusterExecutor {
    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, anyhow::Result<Diff>> {
        Box::pin(async move { Self::executor(ctx).await?.plan(ctx).await })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, anyhow::Result<Applied>> {
        Box::pin(async move { Self::executor(ctx).await?.apply(ctx, diff).await })
    }

    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, anyhow::Result<Applied>> {
        Box::pin(async move { Self::executor(ctx).await?.unchanged(ctx, diff).await })
    }

    /// As [`KubernetesExecutor`]: a plan against live objects finishes a cut apply.
    fn resumable(&self) -> bool {
        true
    }

    fn moved<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, anyhow::Result<Option<Moved>>> {
        Box::pin(async move { Self::executor(ctx).await?.moved(ctx, diff).await })
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, anyhow::Result<Value>> {
        Box::pin(async move { Self::executor(ctx).await?.observe(ctx, last_applied).await })
    }

    /// `None`: a watch would need a token that outlives the Plan's credentials, so drift
    /// in such a cluster is found on schedule.
    fn changes<'a>(
        &'a self,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, anyhow::Result<Option<BoxStream<'static, ()>>>> {
        Box::pin(async { Ok(None) })
    }
}
