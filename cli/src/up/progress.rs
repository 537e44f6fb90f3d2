//! What `outpost up` shows while the example install converges: the install's phase
//! changes and each Plan as it finishes (entity, operation, result, seconds).

use std::time::Duration;

use anyhow::bail;
use kube_client::api::Api;
use outpost_api::{Install, InstallPhase};

use super::children::Supervised;
use crate::wait::{FinishedPlans, describe};

/// Prints progress until install `namespace/name` is Active, or Degraded (a Plan failed:
/// it stays so until someone acts, so waiting longer would not help). Fails if the runner
/// exits.
pub async fn until_active(
    client: &kube_client::Client,
    namespace: &str,
    name: &str,
    runner: &mut Supervised,
) -> anyhow::Result<InstallPhase> {
    let installs: Api<Install> = Api::namespaced(client.clone(), namespace);
    let mut plans = FinishedPlans::new(client, namespace, name);
    let mut first = true;
    let mut phase: Option<InstallPhase> = None;
    loop {
        if let Some(status) = runner.exited() {
            bail!(
                "the runner exited with {status}; its log ({}):\n{}",
                runner.log().display(),
                runner.log_tail()
            );
        }
        let (done, _) = plans.poll().await?;
        // Plans finished in an earlier run are summed up, not listed again.
        if std::mem::take(&mut first) && plans.finished_before() > 0 {
            println!(
                "outpost: {} Plans of {namespace}/{name} finished in an earlier run",
                plans.finished_before()
            );
        }
        for plan in &done {
            println!("outpost: plan {}", describe(plan));
        }
        let install = installs.get(name).await?;
        let now = install.status.as_ref().and_then(|s| s.phase);
        if now != phase {
            if let Some(now) = now {
                println!("outpost: install {namespace}/{name} is {now:?}");
            }
            phase = now;
        }
        if let Some(done @ (InstallPhase::Active | InstallPhase::Degraded)) = phase {
            return Ok(done);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
