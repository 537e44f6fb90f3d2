//! Rollouts end to end: the real `outpost server` and `outpost controllers`, a simulated
//! runner (it completes Ready and Approved Plans at once, failing every Plan of the
//! installs it is told to; a `prompt` install's Plans wait for a person first), and
//! `outpost rollout` from the CLI.
//!
//! Installs pinned (`spec.release`) to the App's first release stay on it when the App
//! changes; a Rollout moves them ring by ring, halts when an install of wave 1 fails
//! (wave 2 stays on the old release), continues to Completed once that install is fixed
//! and the rollout resumed, and a second rollout aborted after its first wave leaves the
//! installs it had not moved on their release.
//!
//! A rollout of one component (`spec.component`) moves only that component when the
//! App's release changed two: each moved install gets exactly one new Plan, the other
//! component none; a failing install in wave 1 halts it before wave 2; an install in
//! `prompt` mode, and one outside its maintenance window, hold wave 2 (shown as held)
//! until approved and opened; abort leaves wave 3 untouched; a whole-release rollout
//! then clears the component pins.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_client::core::Status;
use kube_client::runtime::{WatchStreamExt as _, watcher};
use outpost_api::{
    Action, App, Component, Install, InstallProgressState, OperationRole, Plan, PlanPhase, Rollout,
    RolloutPhase,
};
use outpost_testing::shop::{
    create_app, create_install, deployed_release, release_after, set_component, set_version,
};
use outpost_testing::{Backend, ControlPlane, eventually, on_both_backends, outpost_binary};
use serde_json::json;

/// Installs by name with their `ring` label; waves of two by ring are (b, d), (c, f),
/// (a, e). `z` is not selected (no `fleet` label).
const INSTALLS: &[(&str, Option<&str>)] = &[
    ("a", Some("2")),
    ("b", Some("0")),
    ("c", Some("1")),
    ("d", Some("0")),
    ("e", Some("2")),
    ("f", Some("1")),
    ("z", None),
];

/// Completes each Ready or Approved Plan at once: `Failed` for the installs in `failing`,
/// else `Succeeded` — except that a `prompt` install's Ready Plan first asks a person
/// (`AwaitingApproval` with a one-change diff).
struct SimulatedRunner {
    task: tokio::task::JoinHandle<()>,
    failing: Arc<Mutex<BTreeSet<String>>>,
}

impl SimulatedRunner {
    fn start(client: kube_client::Client) -> Self {
        let failing = Arc::new(Mutex::new(BTreeSet::new()));
        let fails = failing.clone();
        let plans = Api::<Plan>::namespaced(client.clone(), "default");
        let installs = Api::<Install>::namespaced(client, "default");
        let task = tokio::spawn(async move {
            let mut events = watcher(plans.clone(), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(plan) = event else { continue };
                if !outpost_runner::claim::claimable(plan.status.as_ref().and_then(|s| s.phase)) {
                    continue;
                }
                let fail = fails.lock().unwrap().contains(&plan.spec.install);
                let now = jiff::Timestamp::now().to_string();
                let ready = plan.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Ready);
                let prompt = match installs.get(&plan.spec.install).await {
                    Ok(install) => {
                        install.spec.approval_mode() == outpost_api::ApprovalMode::Prompt
                    }
                    Err(_) => continue,
                };
                let status = if ready && prompt {
                    // Planned: a person approves the diff first.
                    let diff = outpost_api::PlanDiff::new(
                        outpost_api::content_hash(&json!({"plan": plan.name_any()})),
                        0,
                        1,
                        0,
                    );
                    json!({"phase": "AwaitingApproval", "diff": diff})
                } else if fail {
                    json!({"phase": "Failed", "finishedAt": now, "message": "simulated failure"})
                } else {
                    json!({"phase": "Succeeded", "finishedAt": now, "outputs": {"ok": true}})
                };
                // Fenced like a real claim: a Plan is completed once.
                let patch = json!({"metadata": {"resourceVersion": plan.resource_version()},
                                   "status": status});
                let _ = plans
                    .patch_status(
                        &plan.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await;
            }
        });
        SimulatedRunner { task, failing }
    }

    fn fail(&self, install: &str, fail: bool) {
        let mut failing = self.failing.lock().unwrap();
        if fail {
            failing.insert(install.to_owned());
        } else {
            failing.remove(install);
        }
    }
}

impl Drop for SimulatedRunner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn rollout_status(rollouts: &Api<Rollout>, name: &str) -> outpost_api::RolloutStatus {
    rollouts.get(name).await.unwrap().status.unwrap_or_default()
}

/// Creates the Rollout `object` (JSON).
async fn create(rollouts: &Api<Rollout>, object: serde_json::Value) {
    rollouts
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
}

/// The status of Rollout `name` once it is in `phase` (`secs` at most).
async fn in_phase(
    rollouts: &Api<Rollout>,
    name: &str,
    phase: RolloutPhase,
    secs: u64,
) -> outpost_api::RolloutStatus {
    eventually(secs, &format!("rollout {name} {phase:?}"), async || {
        let status = rollouts.get(name).await.ok()?.status?;
        (status.phase == Some(phase)).then_some(status)
    })
    .await
}

/// `outpost ARGS...` as the admin; panics unless it succeeds. Returns standard error.
fn outpost(cp: &ControlPlane, args: &[&str]) -> String {
    let output = Command::new(outpost_binary())
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig(&cp.admin_token))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("outpost runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "outpost {} failed: {stderr}",
        args.join(" ")
    );
    stderr + &String::from_utf8_lossy(&output.stdout)
}

/// Creates [`INSTALLS`] (a ring also labels `fleet: yes`), in `approve-all` mode,
/// pinned to `release`, and waits for each to be Active on it.
async fn create_fleet(installs: &Api<Install>, release: &str) {
    for (name, ring) in INSTALLS {
        let mut labels = json!({});
        if let Some(ring) = ring {
            labels = json!({"ring": ring, "fleet": "yes"});
        }
        create_install(installs, name, labels, release).await;
    }
    eventually(60, "every install Active on the release", async || {
        for (name, _) in INSTALLS {
            let install = installs.get(name).await.ok()?;
            (deployed_release(&install).as_deref() == Some(release)).then_some(())?;
        }
        Some(())
    })
    .await;
}

/// Waits for every install of [`INSTALLS`] to say it is pinned while the App is at
/// `release` (condition `ReleasePinned`).
async fn pinned_at(installs: &Api<Install>, release: &str) {
    eventually(30, "every install ReleasePinned", async || {
        for (name, _) in INSTALLS {
            let conditions = installs.get(name).await.ok()?.status?.conditions;
            conditions
                .iter()
                .find(|c| c.type_ == "ReleasePinned" && c.message.contains(release))?;
        }
        Some(())
    })
    .await;
}

/// Creating the Rollout `object` is refused with 422 Invalid: the Status.
async fn invalid(rollouts: &Api<Rollout>, object: serde_json::Value) -> Status {
    let refused = rollouts
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap_err();
    let kube_client::Error::Api(status) = refused else {
        panic!("not an API error: {refused:?}")
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{status:?}"
    );
    *status
}

/// Deletes the failed Plans of `install`, so the Install controller plans it again.
async fn delete_failed_plans(plans: &Api<Plan>, install: &str) {
    let of_install = ListParams::default().labels(&format!("outpost.dev/install={install}"));
    for plan in plans.list(&of_install).await.unwrap().items {
        if plan.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Failed) {
            plans
                .delete(&plan.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
    }
}

/// Asserts each install is (still) Active on `release`, pinned to it.
async fn on_release(installs: &Api<Install>, names: &[&str], release: &str) {
    for name in names {
        let install = installs.get(name).await.unwrap();
        assert_eq!(
            install.spec.release.as_deref(),
            Some(release),
            "install {name} pinned"
        );
        assert_eq!(
            deployed_release(&install).as_deref(),
            Some(release),
            "install {name} deployed at the release: {:?}",
            install.status
        );
    }
}

mod component;
mod waves;
