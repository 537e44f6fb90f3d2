//! `outpost rollout pause|resume|abort|status NAME`: steer a Rollout.
//!
//! `pause` and `resume` flip `spec.paused`; `abort` sets `spec.aborted`. A rollout that
//! halted by itself keeps its halt in `status.halt` until `resume` clears it (a status
//! patch fenced by the resourceVersion, like `kubectl argo rollouts promote`); the
//! Rollout controller then halts it again if the reason still holds.

use kube_client::ResourceExt as _;
use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{InstallProgressState, Rollout, RolloutPhase};
use serde_json::json;

use crate::client::Common;
use crate::output;

/// The `outpost rollout` verbs.
#[derive(clap::Subcommand)]
pub enum RolloutCommand {
    /// Start no new wave until resumed; installs already moved keep converging.
    Pause(RolloutArgs),
    /// Continue a paused or halted rollout.
    ///
    /// Clears `spec.paused` and a halt. A halt whose reason still holds (a wave with more
    /// failed or denied installs than `spec.maxFailures`) comes back at once: fix the
    /// installs first (e.g. delete the failed Plan so the install controller plans it
    /// again) or raise `spec.maxFailures`.
    Resume(RolloutArgs),
    /// Stop the rollout for good: installs not moved yet stay on their release, installs
    /// already moved stay on the new one.
    Abort(RolloutArgs),
    /// Show the rollout's phase, each wave's progress and the installs held (outside
    /// their maintenance window, or awaiting approval).
    Status(RolloutArgs),
}

/// Arguments of each `outpost rollout` verb.
#[derive(clap::Args)]
pub struct RolloutArgs {
    /// The Rollout (`kubectl get rollouts`).
    name: String,
    #[command(flatten)]
    common: Common,
}

/// Runs one `outpost rollout` verb.
pub async fn run(command: RolloutCommand) -> anyhow::Result<()> {
    match command {
        RolloutCommand::Pause(args) => {
            let rollout = set_spec(&args, json!({"paused": true}), "pause").await?;
            eprintln!(
                "rollout {} paused: no new wave starts until `outpost rollout resume {}`",
                args.name, args.name
            );
            show(&args, &rollout)
        }
        RolloutCommand::Resume(args) => {
            let mut rollout = set_spec(&args, json!({"paused": false}), "resume").await?;
            if let Some(halt) = rollout.status.as_ref().and_then(|s| s.halt.clone()) {
                rollout = clear_halt(&args, &rollout).await?;
                eprintln!(
                    "rollout {} resumed; cleared the halt of wave {} ({}): it halts again if that still holds",
                    args.name, halt.wave, halt.reason
                );
            } else {
                eprintln!("rollout {} resumed", args.name);
            }
            show(&args, &rollout)
        }
        RolloutCommand::Abort(args) => {
            let rollout = set_spec(&args, json!({"aborted": true}), "abort").await?;
            eprintln!(
                "rollout {} aborted: installs not moved yet stay on their release",
                args.name
            );
            show(&args, &rollout)
        }
        RolloutCommand::Status(args) => {
            let (api, namespace) = api(&args).await?;
            let rollout = get(&api, &namespace, &args.name).await?;
            show(&args, &rollout)
        }
    }
}

async fn api(args: &RolloutArgs) -> anyhow::Result<(Api<Rollout>, String)> {
    let (client, namespace) = args.common.client().await?;
    Ok((Api::namespaced(client, &namespace), namespace))
}

async fn get(api: &Api<Rollout>, namespace: &str, name: &str) -> anyhow::Result<Rollout> {
    api.get_opt(name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "rollout {namespace}/{name} not found: list rollouts with `kubectl get rollouts -n {namespace}`"
        )
    })
}

/// Merges `fields` into the Rollout's spec, refusing when it already finished.
async fn set_spec(
    args: &RolloutArgs,
    fields: serde_json::Value,
    verb: &str,
) -> anyhow::Result<Rollout> {
    let (api, namespace) = api(args).await?;
    let rollout = get(&api, &namespace, &args.name).await?;
    let phase = rollout.status.as_ref().and_then(|s| s.phase);
    if rollout.spec.aborted || matches!(phase, Some(RolloutPhase::Completed)) {
        let what = if rollout.spec.aborted {
            "was aborted"
        } else {
            "completed"
        };
        anyhow::bail!(
            "rollout {namespace}/{} {what}, so there is nothing to {verb}: start another Rollout to move installs again",
            args.name
        );
    }
    Ok(api
        .patch(
            &args.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": fields})),
        )
        .await?)
}

/// Clears `status.halt`, fenced by the resourceVersion read: a write of the controller
/// in between (it records progress as installs move) is a conflict, and the halt is
/// read and cleared again, a few times.
async fn clear_halt(args: &RolloutArgs, rollout: &Rollout) -> anyhow::Result<Rollout> {
    let (api, namespace) = api(args).await?;
    let mut rollout = rollout.clone();
    for _ in 0..10 {
        if rollout
            .status
            .as_ref()
            .and_then(|s| s.halt.as_ref())
            .is_none()
        {
            return Ok(rollout);
        }
        let patch = json!({
            "metadata": {"resourceVersion": rollout.resource_version()},
            "status": {"halt": null},
        });
        match api
            .patch_status(&args.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(cleared) => return Ok(cleared),
            Err(kube_client::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                rollout = get(&api, &namespace, &args.name).await?;
            }
            Err(err) => return Err(err.into()),
        }
    }
    anyhow::bail!(
        "rollout {} kept changing while resuming (the controller updates it as installs move): run `outpost rollout resume {}` again",
        args.name,
        args.name
    )
}

/// Prints the rollout: a line for it (and the component, for a rollout of one), its
/// halt and held installs, then one row per wave.
fn show(args: &RolloutArgs, rollout: &Rollout) -> anyhow::Result<()> {
    let status = rollout.status.clone().unwrap_or_default();
    let phase = status
        .phase
        .map_or("Pending".to_owned(), |p| format!("{p:?}"));
    let mut rows = vec![
        [
            "WAVE",
            "INSTALLS",
            "SUCCEEDED",
            "FAILED",
            "DENIED",
            "PENDING",
            "STARTED",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for (i, wave) in status.waves.iter().enumerate() {
        rows.push(vec![
            (i + 1).to_string(),
            wave.installs.join(","),
            wave.succeeded.to_string(),
            wave.failed.to_string(),
            wave.denied.to_string(),
            wave.pending.to_string(),
            wave.started_at
                .as_ref()
                .map_or("-".into(), |t| format!("{} ago", output::age(t.0))),
        ]);
    }
    if args.common.output == output::Format::Table {
        let component = status
            .component
            .as_ref()
            .or(rollout.spec.component.as_ref());
        println!(
            "rollout {} of app {}{}: {phase}, wave {}/{}, {}/{} installs on {}",
            rollout.name_any(),
            rollout.spec.app,
            component.map_or(String::new(), |c| format!(", component {c} only")),
            status.current_wave,
            status.wave_count,
            status.updated,
            status.total,
            status.release.as_deref().unwrap_or("(not started)")
        );
        if let Some(halt) = &status.halt {
            println!("halted ({}): {}", halt.reason, halt.message);
        }
        let held = status.waves.iter().flat_map(|w| &w.progress);
        for install in held.filter(|p| p.state == InstallProgressState::Held) {
            let why = install.message.as_deref().unwrap_or("held");
            println!("held: {}: {why}", install.install);
        }
    }
    output::print(args.common.output, rollout, rows)
}
