//! `outpost status`: the fleet at a glance, one row per install.

use std::collections::BTreeMap;

use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::{ComponentPhase, DriftState, Install, Plan, PlanPhase};
use serde::Serialize;

use crate::client::Common;
use crate::output;

/// Arguments of `outpost status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// Every namespace, not only `-n`'s.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    #[command(flatten)]
    common: Common,
}

/// One install's summary (the `-o json|yaml` form of a row).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstallSummary {
    namespace: String,
    name: String,
    app: String,
    phase: Option<String>,
    components_in_sync: usize,
    components: usize,
    drifted: usize,
    failed: usize,
    awaiting_approval: usize,
    runner_online: bool,
    runner_last_heartbeat: Option<String>,
}

/// Prints the summary of every install in the namespace (or all of them).
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let (installs, plans) = if args.all_namespaces {
        (
            Api::<Install>::all(client.clone()),
            Api::<Plan>::all(client),
        )
    } else {
        (
            Api::<Install>::namespaced(client.clone(), &namespace),
            Api::<Plan>::namespaced(client, &namespace),
        )
    };
    let installs = installs.list(&ListParams::default()).await?.items;
    let awaiting = ListParams::default().fields("status.phase=AwaitingApproval");
    let mut waiting: BTreeMap<(String, String), usize> = BTreeMap::new();
    for plan in plans.list(&awaiting).await?.items {
        // The field selector is the server's; the phase is checked here too.
        if plan.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::AwaitingApproval) {
            *waiting
                .entry((plan.namespace().unwrap_or_default(), plan.spec.install))
                .or_default() += 1;
        }
    }
    let summaries: Vec<InstallSummary> = installs
        .iter()
        .map(|install| summary(install, &waiting))
        .collect();
    if summaries.is_empty() && args.common.output == output::Format::Table {
        let place = if args.all_namespaces {
            "any namespace".to_owned()
        } else {
            format!("namespace {namespace}")
        };
        eprintln!(
            "no installs in {place}: create one with `kubectl apply -f install.yaml` (see manifests/installs.yaml), or look elsewhere with -n NAMESPACE or -A"
        );
        return Ok(());
    }
    let mut rows = vec![
        [
            "NAMESPACE",
            "INSTALL",
            "APP",
            "PHASE",
            "IN-SYNC",
            "DRIFTED",
            "FAILED",
            "AWAITING",
            "RUNNER",
            "HEARTBEAT",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for s in &summaries {
        rows.push(vec![
            s.namespace.clone(),
            s.name.clone(),
            s.app.clone(),
            s.phase.clone().unwrap_or_else(|| "-".into()),
            format!("{}/{}", s.components_in_sync, s.components),
            s.drifted.to_string(),
            s.failed.to_string(),
            s.awaiting_approval.to_string(),
            if s.runner_online { "online" } else { "offline" }.into(),
            s.runner_last_heartbeat
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| format!("{} ago", output::age(t)))
                .unwrap_or_else(|| "never".into()),
        ]);
    }
    output::print(args.common.output, &summaries, rows)
}

fn summary(install: &Install, waiting: &BTreeMap<(String, String), usize>) -> InstallSummary {
    let namespace = install.namespace().unwrap_or_default();
    let status = install.status.clone().unwrap_or_default();
    let components = &status.components;
    let count = |f: &dyn Fn(&outpost_api::ComponentState) -> bool| {
        components.iter().filter(|c| f(c)).count()
    };
    let runner = status.runner.unwrap_or_default();
    InstallSummary {
        name: install.name_any(),
        app: install.spec.app.clone(),
        phase: status.phase.map(|p| format!("{p:?}")),
        components_in_sync: count(&|c| {
            c.phase == Some(ComponentPhase::Deployed) && c.drift != Some(DriftState::Drifted)
        }),
        components: components.len(),
        drifted: count(&|c| c.drift == Some(DriftState::Drifted)),
        failed: count(&|c| c.phase == Some(ComponentPhase::Failed)),
        awaiting_approval: waiting
            .get(&(namespace.clone(), install.name_any()))
            .copied()
            .unwrap_or(0),
        runner_online: runner.connected,
        runner_last_heartbeat: runner.last_heartbeat.map(|t| t.0.to_string()),
        namespace,
    }
}
