//! What `outpost up` shows while the example install converges: the install's phase
//! changes and each Plan as it finishes (entity, operation, result, seconds).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::bail;
use kube_client::api::{Api, ListParams};
use outpost_api::{Install, InstallPhase, Plan, PlanPhase};

use super::children::Supervised;

/// Whether a Plan is in a phase it never leaves.
fn finished(plan: &Plan) -> bool {
    matches!(
        plan.status.as_ref().and_then(|s| s.phase),
        Some(PlanPhase::Succeeded | PlanPhase::Failed | PlanPhase::Denied)
    )
}

/// One line for a finished Plan: `deploy web-image Succeeded in 2 s (PLAN)`.
fn describe(plan: &Plan) -> String {
    let status = plan.status.clone().unwrap_or_default();
    // Plan timestamps have whole seconds, so durations are whole seconds too.
    let seconds = match (&status.started_at, &status.finished_at) {
        (Some(started), Some(finished)) => match finished.0.duration_since(started.0).as_secs() {
            0 => " in <1 s".to_owned(),
            secs => format!(" in {secs} s"),
        },
        _ => String::new(),
    };
    let message = status
        .message
        .filter(|_| status.phase != Some(PlanPhase::Succeeded))
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    format!(
        "{} {} {:?}{seconds} ({}){message}",
        plan.spec.operation,
        plan.spec.entity.name,
        status.phase.unwrap_or(PlanPhase::Pending),
        plan.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Prints progress until install `namespace/name` is Active. Fails if the runner exits.
pub async fn until_active(
    client: &kube_client::Client,
    namespace: &str,
    name: &str,
    runner: &mut Supervised,
) -> anyhow::Result<()> {
    let installs: Api<Install> = Api::namespaced(client.clone(), namespace);
    let plans: Api<Plan> = Api::namespaced(client.clone(), namespace);
    let selector = ListParams::default().labels(&format!("outpost.dev/install={name}"));
    let mut reported: Option<BTreeSet<String>> = None;
    let mut phase: Option<InstallPhase> = None;
    loop {
        if let Some(status) = runner.exited() {
            bail!(
                "the runner exited with {status}; its log ({}):\n{}",
                runner.log().display(),
                runner.log_tail()
            );
        }
        let mut done: Vec<Plan> = plans
            .list(&selector)
            .await?
            .items
            .into_iter()
            .filter(finished)
            .collect();
        done.sort_by_key(|p| p.status.as_ref().and_then(|s| s.finished_at.clone()));
        match &mut reported {
            None => {
                // Plans finished in an earlier run are summed up, not listed again.
                if !done.is_empty() {
                    println!(
                        "outpost: {} Plans of {namespace}/{name} finished in an earlier run",
                        done.len()
                    );
                }
                reported = Some(done.iter().filter_map(|p| p.metadata.uid.clone()).collect());
            }
            Some(reported) => {
                for plan in &done {
                    let uid = plan.metadata.uid.clone().unwrap_or_default();
                    if reported.insert(uid) {
                        println!("outpost: plan {}", describe(plan));
                    }
                }
            }
        }
        let install = installs.get(name).await?;
        let now = install.status.as_ref().and_then(|s| s.phase);
        if now != phase {
            if let Some(now) = now {
                println!("outpost: install {namespace}/{name} is {now:?}");
            }
            phase = now;
        }
        if phase == Some(InstallPhase::Active) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
