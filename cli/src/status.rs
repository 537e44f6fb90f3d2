//! `outpost status`: the fleet at a glance, one row per install.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::runner::is_online;
use outpost_api::{
    App, ComponentPhase, DriftState, Install, Plan, PlanPhase, Runner, RunnerSettings,
};
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
    runner_version: Option<String>,
}

/// What the control plane knows of the installs' runners and apps, by namespace and name.
#[derive(Default)]
struct Fleet {
    awaiting: BTreeMap<(String, String), usize>,
    /// The most recent heartbeat of each install's Runners, and that runner's version.
    heartbeats: BTreeMap<(String, String), (jiff::Timestamp, String)>,
    heartbeat_seconds: BTreeMap<(String, String), u32>,
}

/// Prints the summary of every install in the namespace (or all of them).
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let all = args.all_namespaces;
    let installs = list::<Install>(&client, all, &namespace, ListParams::default()).await?;
    let mut fleet = Fleet::default();
    let awaiting = ListParams::default().fields("status.phase=AwaitingApproval");
    for plan in list::<Plan>(&client, all, &namespace, awaiting).await? {
        // The field selector is the server's; the phase is checked here too.
        if plan.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::AwaitingApproval) {
            *fleet
                .awaiting
                .entry((plan.namespace().unwrap_or_default(), plan.spec.install))
                .or_default() += 1;
        }
    }
    for runner in list::<Runner>(&client, all, &namespace, ListParams::default()).await? {
        let Some(beat) = runner
            .status
            .as_ref()
            .and_then(|s| s.last_heartbeat.clone())
        else {
            continue;
        };
        let key = (
            runner.namespace().unwrap_or_default(),
            runner.spec.install.clone(),
        );
        if fleet.heartbeats.get(&key).is_none_or(|(t, _)| *t < beat.0) {
            fleet
                .heartbeats
                .insert(key, (beat.0, runner.spec.version.clone()));
        }
    }
    for app in list::<App>(&client, all, &namespace, ListParams::default()).await? {
        let seconds = app
            .spec
            .runner
            .as_ref()
            .and_then(|r| r.heartbeat_seconds)
            .unwrap_or(RunnerSettings::DEFAULT_HEARTBEAT_SECONDS);
        fleet.heartbeat_seconds.insert(
            (app.namespace().unwrap_or_default(), app.name_any()),
            seconds,
        );
    }
    let summaries: Vec<InstallSummary> = installs
        .iter()
        .map(|install| summary(install, &fleet))
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
            s.runner_version.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    output::print(args.common.output, &summaries, rows)
}

/// The objects of kind `K` in `namespace`, or in every namespace.
async fn list<K>(
    client: &kube_client::Client,
    all: bool,
    namespace: &str,
    params: ListParams,
) -> anyhow::Result<Vec<K>>
where
    K: kube_client::Resource<Scope = kube_client::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api = if all {
        Api::<K>::all(client.clone())
    } else {
        Api::<K>::namespaced(client.clone(), namespace)
    };
    Ok(api.list(&params).await?.items)
}

fn summary(install: &Install, fleet: &Fleet) -> InstallSummary {
    let namespace = install.namespace().unwrap_or_default();
    let name = install.name_any();
    let key = (namespace.clone(), name.clone());
    let status = install.status.clone().unwrap_or_default();
    let components = &status.components;
    let count = |f: &dyn Fn(&outpost_api::ComponentState) -> bool| {
        components.iter().filter(|c| f(c)).count()
    };
    let interval = fleet
        .heartbeat_seconds
        .get(&(namespace.clone(), install.spec.app.clone()))
        .copied()
        .unwrap_or(RunnerSettings::DEFAULT_HEARTBEAT_SECONDS);
    let heartbeat = fleet.heartbeats.get(&key);
    let now = Time(jiff::Timestamp::now());
    let online = heartbeat.is_some_and(|(beat, _)| is_online(&Time(*beat), &now, interval));
    InstallSummary {
        app: install.spec.app.clone(),
        phase: status.phase.map(|p| format!("{p:?}")),
        components_in_sync: count(&|c| {
            c.phase == Some(ComponentPhase::Deployed) && c.drift != Some(DriftState::Drifted)
        }),
        components: components.len(),
        drifted: count(&|c| c.drift == Some(DriftState::Drifted)),
        failed: count(&|c| c.phase == Some(ComponentPhase::Failed)),
        awaiting_approval: fleet.awaiting.get(&key).copied().unwrap_or(0),
        runner_online: online,
        runner_last_heartbeat: heartbeat.map(|(beat, _)| beat.to_string()),
        runner_version: heartbeat.map(|(_, version)| version.clone()),
        namespace,
        name,
    }
}
