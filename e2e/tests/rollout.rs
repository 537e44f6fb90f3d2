//! Rollouts end to end: the real `outpost server` and `outpost controllers`, a simulated
//! runner (it completes approved Plans at once, failing every Plan of the installs it is
//! told to), and `outpost rollout` from the CLI.
//!
//! Installs pinned (`spec.release`) to the App's first release stay on it when the App
//! changes; a Rollout moves them ring by ring, halts when an install of wave 1 fails
//! (wave 2 stays on the old release), continues to Completed once that install is fixed
//! and the rollout resumed, and a second rollout aborted after its first wave leaves the
//! installs it had not moved on their release.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use outpost_api::{App, Install, Plan, PlanPhase, Rollout, RolloutPhase};
use outpost_e2e::shop::{create_app, deployed_release, release_after, set_version};
use outpost_e2e::{Backend, ControlPlane, eventually, on_both_backends, outpost_binary};
use serde_json::json;

on_both_backends!(a_rollout_halts_on_a_failing_wave_resumes_and_aborts);

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

/// Completes each approved Plan at once: `Failed` for the installs in `failing`, else
/// `Succeeded`.
struct SimulatedRunner {
    task: tokio::task::JoinHandle<()>,
    failing: Arc<Mutex<BTreeSet<String>>>,
}

impl SimulatedRunner {
    fn start(client: kube_client::Client) -> Self {
        let failing = Arc::new(Mutex::new(BTreeSet::new()));
        let fails = failing.clone();
        let plans = Api::<Plan>::namespaced(client, "default");
        let task = tokio::spawn(async move {
            let mut events = watcher(plans.clone(), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(plan) = event else { continue };
                if plan.status.as_ref().and_then(|s| s.phase) != Some(PlanPhase::Approved) {
                    continue;
                }
                let fail = fails.lock().unwrap().contains(&plan.spec.install);
                let now = jiff::Timestamp::now().to_string();
                let status = if fail {
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

async fn a_rollout_halts_on_a_failing_wave_resumes_and_aborts(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let _controllers = cp.start_controllers("rollout");
    let runner = SimulatedRunner::start(client.clone());
    let apps = Api::<App>::namespaced(client.clone(), "default");
    let installs = Api::<Install>::namespaced(client.clone(), "default");
    let plans = Api::<Plan>::namespaced(client.clone(), "default");
    let rollouts = Api::<Rollout>::namespaced(client.clone(), "default");

    create_app(&client).await;
    let first = release_after(&apps, None).await;
    for (name, ring) in INSTALLS {
        let mut labels = json!({});
        if let Some(ring) = ring {
            labels = json!({"ring": ring, "fleet": "yes"});
        }
        let install = json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
            "metadata": {"name": name, "labels": labels},
            "spec": {"app": "shop", "approvalMode": "approve-all", "release": first,
                     "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
        });
        installs
            .create(
                &PostParams::default(),
                &serde_json::from_value(install).unwrap(),
            )
            .await
            .unwrap();
    }
    let all: Vec<&str> = INSTALLS.iter().map(|(n, _)| *n).collect();
    eventually(
        60,
        "every install Active on the first release",
        async || {
            for name in &all {
                let install = installs.get(name).await.ok()?;
                (deployed_release(&install).as_deref() == Some(first.as_str())).then_some(())?;
            }
            Some(())
        },
    )
    .await;

    // A new release: pinned installs stay where they are and say why.
    set_version(&client, "2").await;
    let second = release_after(&apps, Some(&first)).await;
    eventually(30, "every install ReleasePinned", async || {
        for name in &all {
            let install = installs.get(name).await.ok()?;
            let conditions = install.status?.conditions;
            conditions
                .iter()
                .find(|c| c.type_ == "ReleasePinned" && c.message.contains(&second))?;
        }
        Some(())
    })
    .await;
    on_release(&installs, &all, &first).await;
    let planned_second = plans
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.spec.release.as_deref() == Some(second.as_str()))
        .count();
    assert_eq!(planned_second, 0, "nothing is planned for a pinned install");

    // A malformed Rollout is refused with every cause.
    let bad = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "bad"},
        "spec": {"app": "shop", "waveSize": "half", "orderBy": "-ring"},
    });
    let refused = rollouts
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
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
    assert!(
        status.message.contains("spec.waveSize") && status.message.contains("spec.orderBy"),
        "{status:?}"
    );

    // Install d (wave 1) fails every Plan: the rollout halts before wave 2.
    runner.fail("d", true);
    let rollout = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "second"},
        "spec": {"app": "shop", "selector": {"matchLabels": {"fleet": "yes"}},
                 "orderBy": "ring", "waveSize": 2},
    });
    create(&rollouts, rollout).await;
    let halted = in_phase(&rollouts, "second", RolloutPhase::Halted, 60).await;
    let halt = halted.halt.clone().expect("a halt is recorded");
    assert_eq!(
        (halt.wave, halt.reason.as_str()),
        (1, "WaveFailed"),
        "{halt:?}"
    );
    assert_eq!(halt.installs, ["d"]);
    assert!(
        halt.message.contains("simulated failure"),
        "{}",
        halt.message
    );
    let waves: Vec<Vec<String>> = halted.waves.iter().map(|w| w.installs.clone()).collect();
    assert_eq!(
        waves,
        [["b", "d"], ["c", "f"], ["a", "e"]].map(|w| w.map(String::from).to_vec()),
        "waves by ring, two each, z not selected"
    );
    assert_eq!(halted.waves[0].failed, 1);
    assert!(halted.waves[1].started_at.is_none(), "wave 2 never started");
    eventually(30, "install b on the new release", async || {
        (deployed_release(&installs.get("b").await.ok()?)? == second).then_some(())
    })
    .await;
    on_release(&installs, &["c", "f", "a", "e", "z"], &first).await;
    let table = cp.kubectl().ok(&["get", "rollouts"]);
    assert!(
        table.contains("Halted") && table.contains("WAVE"),
        "{table}"
    );

    // Resuming while d still fails halts again at once; wave 2 still does not start.
    let said = outpost(&cp, &["rollout", "resume", "second"]);
    assert!(said.contains("cleared the halt of wave 1"), "{said}");
    // The resume cleared the halt (it said so), so a halt seen now was recorded anew.
    let again = eventually(30, "the rollout halted again", async || {
        rollout_status(&rollouts, "second").await.halt
    })
    .await;
    assert_eq!(again.installs, ["d"]);
    on_release(&installs, &["c", "f"], &first).await;

    // d is fixed (its failed Plan goes, the install controller plans it again), resume:
    // the rollout continues to Completed.
    runner.fail("d", false);
    for plan in plans
        .list(&ListParams::default().labels("outpost.dev/install=d"))
        .await
        .unwrap()
        .items
    {
        if plan.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Failed) {
            plans
                .delete(&plan.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
    }
    eventually(30, "install d on the new release", async || {
        (deployed_release(&installs.get("d").await.ok()?)? == second).then_some(())
    })
    .await;
    outpost(&cp, &["rollout", "resume", "second"]);
    let completed = in_phase(&rollouts, "second", RolloutPhase::Completed, 60).await;
    assert_eq!((completed.updated, completed.total), (6, 6));
    assert!(completed.halt.is_none());
    on_release(&installs, &["a", "b", "c", "d", "e", "f"], &second).await;
    on_release(&installs, &["z"], &first).await;
    let shown = outpost(&cp, &["rollout", "status", "second"]);
    assert!(
        shown.contains("Completed, wave 3/3, 6/6 installs"),
        "{shown}"
    );

    // A third release, rolled out with a pause between waves, aborted after wave 1:
    // the installs it had not moved stay on the second release.
    set_version(&client, "3").await;
    let third = release_after(&apps, Some(&second)).await;
    let rollout = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "third"},
        "spec": {"app": "shop", "selector": {"matchLabels": {"fleet": "yes"}},
                 "orderBy": "ring", "waveSize": "33%", "pauseSeconds": 4, "paused": true},
    });
    create(&rollouts, rollout).await;
    // Created paused: no wave starts until resumed.
    let paused = in_phase(&rollouts, "third", RolloutPhase::Paused, 30).await;
    assert_eq!(paused.waves.len(), 3);
    assert!(paused.waves.iter().all(|w| w.started_at.is_none()));
    on_release(&installs, &["b", "d"], &second).await;
    let said = outpost(&cp, &["rollout", "resume", "third"]);
    assert!(said.contains("rollout third resumed"), "{said}");
    eventually(60, "wave 1 of the third rollout completed", async || {
        let status = rollouts.get("third").await.ok()?.status?;
        status.waves.first()?.completed_at.as_ref().map(|_| ())
    })
    .await;
    let said = outpost(&cp, &["rollout", "abort", "third"]);
    assert!(said.contains("aborted"), "{said}");
    eventually(30, "the third rollout Aborted", async || {
        (rollout_status(&rollouts, "third").await.phase == Some(RolloutPhase::Aborted))
            .then_some(())
    })
    .await;
    // Past the pause, when wave 2 would have started.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let aborted = rollout_status(&rollouts, "third").await;
    assert_eq!(aborted.phase, Some(RolloutPhase::Aborted));
    assert!(aborted.waves[1].started_at.is_none(), "{aborted:?}");
    on_release(&installs, &["b", "d"], &third).await;
    on_release(&installs, &["c", "f", "a", "e"], &second).await;
    let refused = Command::new(outpost_binary())
        .args(["rollout", "resume", "third"])
        .env("KUBECONFIG", cp.kubeconfig(&cp.admin_token))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("was aborted"),
        "{refused:?}"
    );

    // A rollout of a release the App has moved past cannot render it: it halts before
    // moving anything.
    let rollout = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "back"},
        "spec": {"app": "shop", "release": second, "selector": {"matchLabels": {"fleet": "yes"}},
                 "orderBy": "ring", "waveSize": 2},
    });
    create(&rollouts, rollout).await;
    let halt = eventually(30, "the rollout of an old release halted", async || {
        rollout_status(&rollouts, "back").await.halt
    })
    .await;
    assert_eq!(halt.reason, "ReleaseSuperseded", "{halt:?}");
    assert!(halt.message.contains(&third), "{}", halt.message);
    let back = rollout_status(&rollouts, "back").await;
    assert!(
        back.waves.iter().all(|w| w.started_at.is_none()),
        "{back:?}"
    );
    on_release(&installs, &["b", "d"], &third).await;
}
