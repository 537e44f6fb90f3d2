//! `outpost drift [INSTALL]`: the DriftReports the runners sent, with their field diffs.

use kube_client::api::{Api, ListParams};
use outpost_api::{DriftReport, Install};

use crate::client::Common;
use crate::output;

/// Arguments of `outpost drift`.
#[derive(clap::Args)]
pub struct DriftArgs {
    /// Only this install's reports; every install's in the namespace when omitted.
    install: Option<String>,
    /// Wait until a report shows drift (of INSTALL, or of any install), then print.
    #[arg(long)]
    wait: bool,
    /// With --wait: give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 60, requires = "wait")]
    timeout: u64,
    #[command(flatten)]
    common: Common,
}

/// Prints one row per report, and under a drifted one a row per differing field.
pub async fn run(args: DriftArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let mut params = ListParams::default();
    if let Some(install) = &args.install {
        if Api::<Install>::namespaced(client.clone(), &namespace)
            .get_opt(install)
            .await?
            .is_none()
        {
            anyhow::bail!(
                "install {namespace}/{install} not found: list installs with `outpost status -n {namespace}`"
            );
        }
        params = params.labels(&format!("outpost.dev/install={install}"));
    }
    let api = Api::<DriftReport>::namespaced(client, &namespace);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.timeout);
    let mut reports = loop {
        let reports = api.list(&params).await?.items;
        if !args.wait || reports.iter().any(|r| !r.spec.in_sync) {
            break reports;
        }
        if std::time::Instant::now() >= deadline {
            anyhow::bail!(
                "no drift reported in namespace {namespace}{} within {} s: runners check a component's objects after its first successful deploy (see `outpost status` and the App's `drift` settings)",
                args.install
                    .as_deref()
                    .map(|i| format!(" for install {i}"))
                    .unwrap_or_default(),
                args.timeout
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    reports.sort_by_key(|r| (r.spec.install.clone(), r.spec.entity.name.clone()));
    if reports.is_empty() && args.common.output == output::Format::Table {
        eprintln!(
            "no drift reports in namespace {namespace}{}: runners report drift after a component's first successful deploy (see `outpost status`)",
            args.install
                .as_deref()
                .map(|i| format!(" for install {i}"))
                .unwrap_or_default()
        );
        return Ok(());
    }
    let mut rows = vec![
        [
            "INSTALL", "ENTITY", "STATE", "PATH", "OP", "APPLIED", "LIVE", "OBSERVED",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let show = |v: &Option<serde_json::Value>| v.as_ref().map_or("-".to_owned(), |v| v.to_string());
    for report in &reports {
        let spec = &report.spec;
        rows.push(vec![
            spec.install.clone(),
            spec.entity.name.clone(),
            if spec.in_sync { "InSync" } else { "Drifted" }.into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            format!("{} ago", output::age(spec.observed_at.0)),
        ]);
        for entry in &spec.diff {
            rows.push(vec![
                String::new(),
                String::new(),
                String::new(),
                entry.path.clone(),
                format!("{:?}", entry.op).to_lowercase(),
                show(&entry.desired),
                show(&entry.live),
                String::new(),
            ]);
        }
    }
    output::print(args.common.output, &reports, rows)
}
