//! `outpost approve` and `outpost deny`: decide on the diff of a Plan that waits for
//! approval, through `PATCH plans/NAME/approval`. The API server records who decided
//! (the authenticated user) and when (its clock), and accepts the decision only for the
//! diff it names (`diffHash`): what was shown here is what gets applied.
//!
//! `outpost approve --selector L --diff-hash H` approves, one by one, every Plan
//! awaiting approval that matches `L` and whose diff is exactly `H` (fleet approval: the
//! same reviewed change on many installs).

use kube_client::api::{Api, ListParams, Patch, PatchParams};
use outpost_api::plan_lifecycle::{ApprovalDecision, ApprovalRequest};
use outpost_api::{Plan, PlanPhase};

use crate::client::Common;
use crate::output;

/// Arguments of `outpost approve`.
#[derive(clap::Args)]
pub struct ApproveArgs {
    /// The Plan (`kubectl get plans` or `outpost status` show which wait); or
    /// `--selector` with `--diff-hash` for every matching Plan.
    #[arg(required_unless_present = "selector", conflicts_with = "selector")]
    plan: Option<String>,
    /// Approve every Plan awaiting approval that has these labels (e.g.
    /// `outpost.dev/app=shopfront`) and exactly the diff `--diff-hash`.
    #[arg(short = 'l', long, requires = "diff_hash")]
    selector: Option<String>,
    /// The diff approved (`status.diff.hash`, as `outpost diff` shows it); by default the
    /// Plan's current one, shown before it is approved.
    #[arg(long)]
    diff_hash: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// Arguments of `outpost deny`.
#[derive(clap::Args)]
pub struct DenyArgs {
    /// The Plan.
    plan: String,
    /// Why, recorded in the approval and the Plan's status message.
    #[arg(long)]
    reason: String,
    /// The diff denied; by default the Plan's current one.
    #[arg(long)]
    diff_hash: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// Approves one Plan's diff, or every matching Plan's with `--selector`.
pub async fn approve(args: ApproveArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let api = Api::<Plan>::namespaced(client, &namespace);
    if let (Some(selector), Some(hash)) = (&args.selector, &args.diff_hash) {
        return approve_fleet(&api, &namespace, selector, hash, &args.common).await;
    }
    let name = args.plan.as_deref().unwrap_or_default();
    let plan = awaiting(&api, &namespace, name, "approve").await?;
    eprint!("{}", describe(&plan));
    let hash = chosen_hash(&plan, args.diff_hash.as_deref())?;
    let plan = send(&api, name, ApprovalDecision::Approve, &hash, None).await?;
    let by = approver(&plan);
    eprintln!("plan {name} approved by {by} (diff {hash})");
    output::print(
        args.common.output,
        &plan,
        vec![vec![format!("plan/{name} approved")]],
    )
}

/// Denies a Plan's diff, recording why.
pub async fn deny(args: DenyArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let api = Api::<Plan>::namespaced(client, &namespace);
    let plan = awaiting(&api, &namespace, &args.plan, "deny").await?;
    eprint!("{}", describe(&plan));
    let hash = chosen_hash(&plan, args.diff_hash.as_deref())?;
    let plan = send(
        &api,
        &args.plan,
        ApprovalDecision::Deny,
        &hash,
        Some(args.reason.clone()),
    )
    .await?;
    eprintln!(
        "plan {} denied by {}: {}",
        args.plan,
        approver(&plan),
        args.reason
    );
    output::print(
        args.common.output,
        &plan,
        vec![vec![format!("plan/{} denied", args.plan)]],
    )
}

/// Approves each Plan awaiting approval with `selector`'s labels whose diff is `hash`.
async fn approve_fleet(
    api: &Api<Plan>,
    namespace: &str,
    selector: &str,
    hash: &str,
    common: &Common,
) -> anyhow::Result<()> {
    let plans = api.list(&ListParams::default().labels(selector)).await?;
    let waiting: Vec<&Plan> = plans
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::AwaitingApproval))
        .collect();
    let (same, other): (Vec<&Plan>, Vec<&Plan>) = waiting.into_iter().partition(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.diff.as_ref())
            .is_some_and(|d| d.hash == hash)
    });
    let mut approved = Vec::new();
    let mut rows = vec![vec![
        "PLAN".to_owned(),
        "INSTALL".to_owned(),
        "RESULT".to_owned(),
    ]];
    for plan in same {
        let name = plan.metadata.name.clone().unwrap_or_default();
        match send(api, &name, ApprovalDecision::Approve, hash, None).await {
            Ok(plan) => {
                rows.push(vec![name, plan.spec.install.clone(), "approved".into()]);
                approved.push(plan);
            }
            // Decided or re-planned meanwhile: say so and go on with the others.
            Err(err) => {
                rows.push(vec![
                    name,
                    plan.spec.install.clone(),
                    format!("not approved: {err:#}"),
                ]);
            }
        }
    }
    eprintln!(
        "approved {} plan(s) in {namespace} with diff {hash}; {} awaiting approval had another diff",
        approved.len(),
        other.len()
    );
    for plan in other {
        let diff = plan.status.as_ref().and_then(|s| s.diff.as_ref());
        eprintln!(
            "  {} has diff {} ({}): review it with `outpost diff {} -n {namespace}`",
            plan.metadata.name.as_deref().unwrap_or_default(),
            diff.map_or("(none)", |d| d.hash.as_str()),
            diff.map_or("", |d| d.summary.as_str()),
            plan.metadata.name.as_deref().unwrap_or_default(),
        );
    }
    output::print(common.output, &approved, rows)
}

/// What is decided on: the operation, role, policy warnings and the diff.
fn describe(plan: &Plan) -> String {
    let spec = &plan.spec;
    let kind = serde_json::to_value(spec.entity.kind).unwrap_or_default();
    let mut out = format!(
        "plan {}: {} of {} {} on install {}",
        plan.metadata.name.as_deref().unwrap_or_default(),
        spec.operation,
        kind.as_str().unwrap_or_default(),
        spec.entity.name,
        spec.install,
    );
    if let Some(role) = plan.status.as_ref().and_then(|s| s.role.as_ref()) {
        out.push_str(&format!(" under role {}", role.name));
    }
    out.push('\n');
    for verdict in plan.status.iter().flat_map(|s| &s.verdicts) {
        for message in &verdict.messages {
            out.push_str(&format!("  policy {} warns: {message}\n", verdict.policy));
        }
    }
    out.push_str(&crate::diff::describe(plan));
    out
}

/// The diff hash to send: `--diff-hash`, else the Plan's current one.
fn chosen_hash(plan: &Plan, given: Option<&str>) -> anyhow::Result<String> {
    if let Some(hash) = given {
        return Ok(hash.to_owned());
    }
    plan.status
        .as_ref()
        .and_then(|s| s.diff.as_ref())
        .map(|d| d.hash.clone())
        .ok_or_else(|| anyhow::anyhow!("the plan has no diff to decide on"))
}

fn approver(plan: &Plan) -> String {
    plan.status
        .as_ref()
        .and_then(|s| s.approval.as_ref())
        .map_or_else(|| "?".to_owned(), |a| a.by.clone())
}

/// Sends one decision to `plans/NAME/approval`.
async fn send(
    api: &Api<Plan>,
    name: &str,
    decision: ApprovalDecision,
    hash: &str,
    reason: Option<String>,
) -> anyhow::Result<Plan> {
    let request = ApprovalRequest {
        decision,
        diff_hash: hash.to_owned(),
        reason,
    };
    match api
        .patch_subresource(
            "approval",
            name,
            &PatchParams::default(),
            &Patch::Merge(&request),
        )
        .await
    {
        Ok(plan) => Ok(plan),
        Err(kube_client::Error::Api(e)) if e.code == 409 => anyhow::bail!(
            "plan {name}: {} (look again with `outpost diff {name}`)",
            e.message
        ),
        Err(kube_client::Error::Api(e)) if e.code == 403 => anyhow::bail!(
            "plan {name}: {} (deciding on Plans needs the group outpost:approvers or outpost:admins)",
            e.message
        ),
        Err(err) => Err(err.into()),
    }
}

/// The Plan, if it waits for approval; else an error that says what it is instead.
async fn awaiting(
    api: &Api<Plan>,
    namespace: &str,
    name: &str,
    verb: &str,
) -> anyhow::Result<Plan> {
    let plan = get_plan(api, namespace, name).await?;
    let phase = plan.status.as_ref().and_then(|s| s.phase);
    if phase != Some(PlanPhase::AwaitingApproval) {
        let phase = phase.map_or("not gated yet (Pending)".to_owned(), |p| format!("{p:?}"));
        anyhow::bail!(
            "plan {namespace}/{name} is {phase}, not AwaitingApproval, so there is nothing to {verb}: see where it is with `outpost logs {name} -n {namespace}`"
        );
    }
    Ok(plan)
}

/// Reads a Plan, or says how to find the right name.
pub async fn get_plan(api: &Api<Plan>, namespace: &str, name: &str) -> anyhow::Result<Plan> {
    api.get_opt(name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "plan {namespace}/{name} not found: list plans with `kubectl get plans -n {namespace}` (`outpost status` counts those awaiting approval)"
        )
    })
}
