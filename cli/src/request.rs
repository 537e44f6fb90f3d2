//! `outpost deploy COMPONENT --install I` and `outpost trigger ACTION --install I
//! [--role R]`: ask the Install controller for a one-off Plan.
//!
//! The CLI does not render templates: it adds a request to the Install's
//! `spec.requests`, and the Install controller makes the Plan `<install>-<id>` from the
//! desired state it renders, owned by the Install and labelled like its own, so the
//! gate and the runner treat it like any other. The CLI removes its request once the
//! Plan exists (or withdraws it when none came in time); requests a CLI left behind
//! (interrupted) are dropped by the next one once their Plan exists.

use std::time::{Duration, Instant};

use kube_client::ResourceExt as _;
use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{Action, Component, Install, Operation, Plan, PlanRequest, TriggerKind};

use crate::client::{Common, operator};
use crate::output;

/// Arguments of `outpost deploy`.
#[derive(clap::Args)]
pub struct DeployArgs {
    /// The component to deploy again, with the desired state rendered now.
    component: String,
    #[command(flatten)]
    target: Target,
}

/// Arguments of `outpost trigger`.
#[derive(clap::Args)]
pub struct TriggerArgs {
    /// The action to run (one with a `manual` trigger).
    action: String,
    /// Run under this role: the runtime override, step 1 of the role precedence chain.
    /// The App must declare it, or the Plan is denied.
    #[arg(long)]
    role: Option<String>,
    #[command(flatten)]
    target: Target,
}

/// What `deploy` and `trigger` share: the install they request a Plan of, what to wait
/// for, and the connection.
#[derive(clap::Args)]
struct Target {
    /// The install.
    #[arg(long)]
    install: String,
    /// Print the Plan's phase changes until it finishes; fail if it fails.
    #[arg(long)]
    wait: bool,
    /// Seconds the Install controller has to make the Plan.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    #[command(flatten)]
    common: Common,
}

/// Requests a `deploy` Plan of a component.
pub async fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.target.common.client().await?;
    let install = get_install(&client, &namespace, &args.target.install).await?;
    let app = &install.spec.app;
    let component = Api::<Component>::namespaced(client.clone(), &namespace)
        .get_opt(&args.component)
        .await?
        .filter(|c| c.spec.app == *app);
    if component.is_none() {
        anyhow::bail!(
            "component {namespace}/{} not found in app {app} of install {}: list the app's components with `kubectl get components -n {namespace} --field-selector spec.app={app}`",
            args.component,
            args.target.install
        );
    }
    let request = PlanRequest::new(Operation::Deploy, &args.component, None, Some(operator()));
    submit(&client, &namespace, &install, request, &args.target).await
}

/// Requests a `trigger` Plan of an action, optionally with a runtime role override.
pub async fn trigger(args: TriggerArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.target.common.client().await?;
    let install = get_install(&client, &namespace, &args.target.install).await?;
    let app = &install.spec.app;
    let Some(action) = Api::<Action>::namespaced(client.clone(), &namespace)
        .get_opt(&args.action)
        .await?
        .filter(|a| a.spec.app == *app)
    else {
        anyhow::bail!(
            "action {namespace}/{} not found in app {app} of install {}: list the app's actions with `kubectl get actions -n {namespace} --field-selector spec.app={app}`",
            args.action,
            args.target.install
        );
    };
    if !action
        .spec
        .triggers
        .iter()
        .any(|t| t.kind() == Some(TriggerKind::Manual))
    {
        anyhow::bail!(
            "action {namespace}/{} has no manual trigger, so it cannot be run by hand: add `- type: manual` to its spec.triggers",
            args.action
        );
    }
    if let Some(role) = &args.role
        && let Some(error) = outpost_api::role::validate_role_name("--role", role)
    {
        anyhow::bail!(
            "--role {role:?} is not a role name ({error}): pass a role the app declares (kubectl get app {app} -o yaml, spec.permissions)"
        );
    }
    let request = PlanRequest::new(
        Operation::Trigger,
        &args.action,
        args.role.clone(),
        Some(operator()),
    );
    submit(&client, &namespace, &install, request, &args.target).await
}

async fn get_install(
    client: &kube_client::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Install> {
    Api::<Install>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "install {namespace}/{name} not found: list installs with `outpost status -n {namespace}` (or `outpost status -A`)"
            )
        })
}

/// Adds `request` to the Install (fenced by its resourceVersion, retried on a conflict),
/// waits for the controller's Plan and, with `wait`, for its end.
async fn submit(
    client: &kube_client::Client,
    namespace: &str,
    install: &Install,
    request: PlanRequest,
    target: &Target,
) -> anyhow::Result<()> {
    let plan_within = Duration::from_secs(target.timeout);
    let installs = Api::<Install>::namespaced(client.clone(), namespace);
    let plans = Api::<Plan>::namespaced(client.clone(), namespace);
    let name = install.name_any();
    let plan_name = format!("{name}-{}", request.id);
    let requests = Requests {
        installs: &installs,
        plans: &plans,
        install: &name,
    };
    requests
        .update(install.clone(), Some(&request), None)
        .await?;
    eprintln!(
        "requested {} of {} on install {namespace}/{name}; waiting for plan {plan_name}",
        request.operation, request.name
    );
    let deadline = Instant::now() + plan_within;
    let plan = loop {
        if let Some(plan) = plans.get_opt(&plan_name).await? {
            break plan;
        }
        if Instant::now() > deadline {
            // Withdrawn, so that it does not run some time later, unexpectedly; unless
            // the controller made it meanwhile.
            let install = get_install(client, namespace, &name).await?;
            requests.update(install, None, Some(&request.id)).await?;
            if let Some(plan) = plans.get_opt(&plan_name).await? {
                break plan;
            }
            anyhow::bail!(
                "the install controller did not make plan {namespace}/{plan_name} within {}s, so the request was withdrawn: check that `outpost controllers` runs; a component is planned only once its dependencies are deployed (`outpost status -n {namespace}`)",
                plan_within.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Served: the request goes, so that deleting the Plan later does not run it again.
    let install = get_install(client, namespace, &name).await?;
    requests.update(install, None, None).await?;
    let plan = if target.wait {
        crate::logs::wait(&plans, namespace, &plan_name).await?
    } else {
        plan
    };
    output::print(
        target.common.output,
        &plan,
        vec![vec![format!("plan/{plan_name}")]],
    )
}

/// An Install's `spec.requests`, as the CLI keeps it: requests already served (their
/// Plan exists) are dropped whenever it is written.
struct Requests<'a> {
    installs: &'a Api<Install>,
    plans: &'a Api<Plan>,
    install: &'a str,
}

impl Requests<'_> {
    /// Writes the list without served requests and `withdraw`, with `add`, fenced by the
    /// Install's resourceVersion and retried on a conflict.
    async fn update(
        &self,
        mut install: Install,
        add: Option<&PlanRequest>,
        withdraw: Option<&str>,
    ) -> anyhow::Result<()> {
        loop {
            let mut requests = Vec::new();
            for r in &install.spec.requests {
                let served = self
                    .plans
                    .get_opt(&format!("{}-{}", self.install, r.id))
                    .await?
                    .is_some();
                if !served && withdraw != Some(r.id.as_str()) {
                    requests.push(r.clone());
                }
            }
            requests.extend(add.cloned());
            if add.is_none() && requests.len() == install.spec.requests.len() {
                return Ok(()); // nothing to change
            }
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": install.resource_version()},
                "spec": {"requests": requests},
            });
            match self
                .installs
                .patch(self.install, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube_client::Error::Api(e)) if e.code == 409 => {
                    install = self.installs.get(self.install).await?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}
