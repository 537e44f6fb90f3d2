//! The executors a runner has, by component type name, and which one a Plan needs.

use std::collections::BTreeMap;
use std::sync::Arc;

use outpost_api::{EntityKind, Plan};

use crate::executor::Executor;

/// Executors registered by type name (`kubernetes_manifest`, `helm_chart`, `terraform_module`, `job`).
#[derive(Clone, Default)]
pub struct Executors {
    by_type: BTreeMap<String, Arc<dyn Executor>>,
}

impl Executors {
    /// No executors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `executor` for `type_name`, replacing an earlier one.
    pub fn insert(&mut self, type_name: &str, executor: Arc<dyn Executor>) -> &mut Self {
        self.by_type.insert(type_name.to_owned(), executor);
        self
    }

    /// The executor for `type_name`.
    pub fn get(&self, type_name: &str) -> Option<Arc<dyn Executor>> {
        self.by_type.get(type_name).cloned()
    }

    /// The registered type names: the runner's capabilities.
    pub fn capabilities(&self) -> Vec<String> {
        self.by_type.keys().cloned().collect()
    }
}

/// The executor type a Plan needs: a component's `desiredState.type`, the sandbox's
/// type (`terraform_module` unless it says `cloudformation`), an action's `job`.
pub fn executor_type(plan: &Plan) -> Result<String, String> {
    match plan.spec.entity.kind {
        EntityKind::Sandbox => {
            // Provision Plans carry the sandbox block, deprovision Plans `{"sandbox": …}`.
            let desired = plan.spec.desired_state.as_ref();
            let sandbox = desired.map(|d| d.get("sandbox").unwrap_or(d));
            match sandbox.and_then(|s| s.get("type")).and_then(|t| t.as_str()) {
                Some("cloudformation") => Ok("cloudformation".into()),
                _ => Ok("terraform_module".into()),
            }
        }
        EntityKind::Action => Ok("job".into()),
        EntityKind::Component => plan
            .spec
            .desired_state
            .as_ref()
            .and_then(|d| d.get("type"))
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or_else(|| "the desired state has no component type".to_owned()),
    }
}

impl Executors {
    /// The executors built into this runner binary, configured from `args`:
    /// `terraform_module` (also the sandbox), `cloudformation` (also a `cloudformation`
    /// sandbox), `job` (also actions' steps), `container_image`, and
    /// `kubernetes_manifest` and `helm_chart` when a kubeconfig is given (a stack-booted
    /// runner without one: both into each Plan's `cluster` under its role).
    pub async fn standard(args: &crate::RunnerArgs) -> anyhow::Result<Self> {
        let mut executors = Self::new();
        if let Some(path) = &args.kubeconfig {
            use anyhow::Context as _;
            let file = kube_client::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            let config =
                kube_client::Config::from_custom_kubeconfig(file, &Default::default()).await?;
            let client = kube_client::Client::try_from(config)?;
            executors.insert(
                "kubernetes_manifest",
                Arc::new(crate::executor::kubernetes::KubernetesExecutor::new(
                    client.clone(),
                )),
            );
            let renderer = crate::executor::helm::render::Renderer::new(
                args.helm.clone(),
                client.clone(),
                Some(path.clone()),
            );
            executors.insert(
                "helm_chart",
                Arc::new(crate::executor::helm::HelmExecutor::new(
                    client,
                    renderer,
                    args.module_roots.clone(),
                )),
            );
        } else if args.stack.is_some() {
            // A stack-booted runner without a kubeconfig reaches each Plan's cluster
            // under the Plan's role (an EKS token), from the Plan's `cluster` block.
            use crate::executor::eks_cluster::PlanRoleClusterExecutor;
            executors.insert(
                "kubernetes_manifest",
                Arc::new(PlanRoleClusterExecutor::manifests()),
            );
            executors.insert(
                "helm_chart",
                Arc::new(PlanRoleClusterExecutor::helm(
                    args.helm.clone(),
                    args.module_roots.clone(),
                )),
            );
        }
        use crate::executor::terraform::{ProviderAllowList, TerraformExecutor};
        for mirror in &args.terraform_provider_mirror {
            anyhow::ensure!(
                mirror.is_dir(),
                "--terraform-provider-mirror {} is not a directory",
                mirror.display()
            );
        }
        let mirrors = args
            .terraform_provider_mirror
            .iter()
            .map(std::path::absolute)
            .collect::<Result<Vec<_>, _>>()?;
        let providers = ProviderAllowList::new(&args.terraform_providers, mirrors)
            .map_err(|e| anyhow::anyhow!("--terraform-providers: {e}"))?;
        executors.insert(
            "terraform_module",
            Arc::new(
                TerraformExecutor::new(args.terraform.clone())
                    .with_module_roots(args.module_roots.clone())
                    .with_state_backend(args.state_bucket.clone().map(|bucket| {
                        crate::executor::terraform::StateBackend {
                            bucket,
                            endpoint: args.aws_endpoint.clone(),
                        }
                    }))
                    .with_sandbox(args.sandbox())
                    .with_providers(providers),
            ),
        );
        executors.insert(
            "cloudformation",
            Arc::new(crate::executor::cloudformation::CloudFormationExecutor::new()),
        );
        executors.insert(
            "container_image",
            Arc::new(crate::executor::image::ImageExecutor::new()),
        );
        executors.insert(
            "job",
            Arc::new(crate::executor::job::JobExecutor::sandboxed_by(
                args.sandbox(),
            )),
        );
        Ok(executors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sandbox_plan(desired: serde_json::Value) -> Plan {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
            "metadata": {"name": "p"},
            "spec": {"install": "acme", "operation": "provision",
                     "entity": {"kind": "sandbox", "name": "sandbox"},
                     "desiredState": desired}
        }))
        .expect("a test Plan")
    }

    #[test]
    fn a_sandbox_runs_on_the_executor_of_its_type() {
        let cloudformation = json!({"type": "cloudformation", "source": "https://s3/t"});
        assert_eq!(
            executor_type(&sandbox_plan(cloudformation.clone())).unwrap(),
            "cloudformation"
        );
        assert_eq!(
            executor_type(&sandbox_plan(json!({"sandbox": cloudformation}))).unwrap(),
            "cloudformation"
        );
        let terraform = json!({"type": "terraform_module", "source": "/m"});
        assert_eq!(
            executor_type(&sandbox_plan(terraform)).unwrap(),
            "terraform_module"
        );
    }
}
