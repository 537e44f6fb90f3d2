//! `outpost approve PLAN` and `outpost deny PLAN`: decide a Plan that waits for approval.
//!
//! An approval binds to the Plan's content hash (the runner refuses a Plan whose hash
//! moved since); both are status updates fenced by the Plan's resourceVersion, so a
//! decision never overwrites one made meanwhile.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{Plan, PlanPhase, PlanStatus};

use crate::client::{Common, operator};
use crate::output;

/// Arguments of `outpost approve`.
#[derive(clap::Args)]
pub struct ApproveArgs {
    /// The Plan (`kubectl get plans` or `outpost status` show which wait).
    plan: String,
    #[command(flatten)]
    common: Common,
}

/// Arguments of `outpost deny`.
#[derive(clap::Args)]
pub struct DenyArgs {
    /// The Plan.
    plan: String,
    /// Why, recorded in the Plan's status message.
    #[arg(long, default_value = "no reason given")]
    reason: String,
    #[command(flatten)]
    common: Common,
}

/// Approves an AwaitingApproval Plan, bound to its content hash.
pub async fn approve(args: ApproveArgs) -> anyhow::Result<()> {
    let (api, plan) = awaiting(&args.common, &args.plan, "approve").await?;
    let Some(hash) = plan.spec.content_hash.clone() else {
        anyhow::bail!(
            "plan {} has no content hash, so an approval could not bind to it: deny it with `outpost deny {}` and make a new one",
            args.plan,
            args.plan
        );
    };
    // What is being approved: the operation, the role and what policies said of it.
    let spec = &plan.spec;
    let kind = serde_json::to_value(spec.entity.kind)?;
    let mut what = format!(
        "plan {}: {} of {} {}",
        args.plan,
        spec.operation,
        kind.as_str().unwrap_or_default(),
        spec.entity.name
    );
    if let Some(role) = plan.status.as_ref().and_then(|s| s.role.as_ref()) {
        what.push_str(&format!(" under role {}", role.name));
    }
    eprintln!("{what}");
    for verdict in plan.status.iter().flat_map(|s| &s.verdicts) {
        for message in &verdict.messages {
            eprintln!("  policy {} warns: {message}", verdict.policy);
        }
    }
    let by = operator();
    let status = PlanStatus::approval_patch(&by, &hash, Time(jiff::Timestamp::now()));
    let plan = decide(&api, &plan, status, &args.plan).await?;
    eprintln!("plan {} approved by {by} (content {hash})", args.plan);
    output::print(
        args.common.output,
        &plan,
        vec![vec![format!("plan/{} approved", args.plan)]],
    )
}

/// Denies an AwaitingApproval Plan, recording who and why.
pub async fn deny(args: DenyArgs) -> anyhow::Result<()> {
    let (api, plan) = awaiting(&args.common, &args.plan, "deny").await?;
    let by = operator();
    let status = PlanStatus::denial_patch(&by, &args.reason, Time(jiff::Timestamp::now()));
    let plan = decide(&api, &plan, status, &args.plan).await?;
    eprintln!("plan {} denied by {by}: {}", args.plan, args.reason);
    output::print(
        args.common.output,
        &plan,
        vec![vec![format!("plan/{} denied", args.plan)]],
    )
}

/// The Plan, if it waits for approval; else an error that says what it is instead.
async fn awaiting(common: &Common, name: &str, verb: &str) -> anyhow::Result<(Api<Plan>, Plan)> {
    let (client, namespace) = common.client().await?;
    let api = Api::<Plan>::namespaced(client, &namespace);
    let plan = get_plan(&api, &namespace, name).await?;
    let phase = plan.status.as_ref().and_then(|s| s.phase);
    if phase != Some(PlanPhase::AwaitingApproval) {
        let phase = phase.map_or("not gated yet (Pending)".to_owned(), |p| format!("{p:?}"));
        anyhow::bail!(
            "plan {namespace}/{name} is {phase}, not AwaitingApproval, so there is nothing to {verb}: see where it is with `outpost logs {name} -n {namespace}`"
        );
    }
    Ok((api, plan))
}

/// Reads a Plan, or says how to find the right name.
pub async fn get_plan(api: &Api<Plan>, namespace: &str, name: &str) -> anyhow::Result<Plan> {
    api.get_opt(name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "plan {namespace}/{name} not found: list plans with `kubectl get plans -n {namespace}` (`outpost status` counts those awaiting approval)"
        )
    })
}

async fn decide(
    api: &Api<Plan>,
    plan: &Plan,
    status: serde_json::Value,
    name: &str,
) -> anyhow::Result<Plan> {
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": plan.resource_version()},
        "status": status,
    });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(plan) => Ok(plan),
        Err(kube_client::Error::Api(e)) if e.code == 409 => anyhow::bail!(
            "plan {name} changed while you decided (someone else approved or denied it): look again with `outpost logs {name}`"
        ),
        Err(err) => Err(err.into()),
    }
}
