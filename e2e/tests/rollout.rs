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
use outpost_e2e::shop::{
    create_app, create_install, deployed_release, release_after, set_component, set_version,
};
use outpost_e2e::{Backend, ControlPlane, eventually, on_both_backends, outpost_binary};
use serde_json::json;

on_both_backends!(
    a_rollout_halts_on_a_failing_wave_resumes_and_aborts,
    a_component_rollout_moves_one_component_in_waves
);

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
    create_fleet(&installs, &first).await;
    let all: Vec<&str> = INSTALLS.iter().map(|(n, _)| *n).collect();

    // A new release: pinned installs stay where they are and say why.
    set_version(&client, "2").await;
    let second = release_after(&apps, Some(&first)).await;
    pinned_at(&installs, &second).await;
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
    let status = invalid(&rollouts, bad).await;
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
    delete_failed_plans(&plans, "d").await;
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

/// The App's release once it is that of its current objects: changing two Components is
/// two releases, and the App's status passes through the first.
async fn settled_release(client: &kube_client::Client) -> String {
    let all = ListParams::default();
    eventually(30, "the release of the App's current objects", async || {
        let app = Api::<App>::namespaced(client.clone(), "default")
            .get("shop")
            .await
            .ok()?;
        let components = Api::<Component>::namespaced(client.clone(), "default");
        let actions = Api::<Action>::namespaced(client.clone(), "default");
        let roles = Api::<OperationRole>::namespaced(client.clone(), "default");
        let expected = outpost_controllers::release_hash(
            &app,
            &components.list(&all).await.ok()?.items,
            &actions.list(&all).await.ok()?.items,
            &roles.list(&all).await.ok()?.items,
        );
        (app.status?.release? == expected).then_some(expected)
    })
    .await
}

/// Each Plan of `release`: (install, entity, phase).
async fn plans_of(plans: &Api<Plan>, release: &str) -> Vec<(String, String, Option<PlanPhase>)> {
    let mut found: Vec<_> = plans
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.spec.release.as_deref() == Some(release))
        .map(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase);
            (p.spec.install, p.spec.entity.name, phase)
        })
        .collect();
    found.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    found
}

/// The release each component of `install` is deployed at, by name.
async fn component_releases(installs: &Api<Install>, name: &str) -> Vec<(String, Option<String>)> {
    let install = installs.get(name).await.unwrap();
    let status = install.status.unwrap_or_default();
    status
        .components
        .into_iter()
        .map(|c| (c.name, c.release))
        .collect()
}

async fn a_component_rollout_moves_one_component_in_waves(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let _controllers = cp.start_controllers("rollout-component");
    let runner = SimulatedRunner::start(client.clone());
    let installs = Api::<Install>::namespaced(client.clone(), "default");
    let plans = Api::<Plan>::namespaced(client.clone(), "default");
    let rollouts = Api::<Rollout>::namespaced(client.clone(), "default");
    let merge = |patch: serde_json::Value| Patch::Merge(patch);

    // Two components, web and cache, at version 1; every install Active on that release.
    set_component(&client, "cache", "1").await;
    create_app(&client).await;
    let first = settled_release(&client).await;
    create_fleet(&installs, &first).await;
    // c (wave 2) asks for approval from now on; f's (wave 2) only maintenance window
    // is days away.
    let closed = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(72))
        .to_zoned(jiff::tz::TimeZone::UTC)
        .weekday();
    let window =
        json!([{"days": [format!("{closed:?}")], "start": "00:00", "durationMinutes": 60}]);
    let params = PatchParams::default();
    installs
        .patch(
            "c",
            &params,
            &merge(json!({"spec": {"approvalMode": "prompt"}})),
        )
        .await
        .unwrap();
    installs
        .patch(
            "f",
            &params,
            &merge(json!({"spec": {"maintenanceWindows": window}})),
        )
        .await
        .unwrap();

    // The App's release changes both components; pinned installs plan nothing.
    set_component(&client, "web", "2").await;
    set_component(&client, "cache", "2").await;
    let second = settled_release(&client).await;
    assert_ne!(first, second);
    pinned_at(&installs, &second).await;

    // A component the App does not have is refused with the cause.
    let unknown = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "db"},
        "spec": {"app": "shop", "component": "db"},
    });
    let status = invalid(&rollouts, unknown).await;
    assert!(
        status.message.contains("spec.component")
            && status
                .message
                .contains("not a component of App \"shop\" (it has cache, web)"),
        "{status:?}"
    );

    // Install b (wave 1) fails: the rollout of web halts before wave 2.
    runner.fail("b", true);
    let rollout = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web-2"},
        "spec": {"app": "shop", "component": "web", "selector": {"matchLabels": {"fleet": "yes"}},
                 "orderBy": "ring", "waveSize": 2},
    });
    create(&rollouts, rollout).await;
    let halted = in_phase(&rollouts, "web-2", RolloutPhase::Halted, 60).await;
    assert_eq!(halted.component.as_deref(), Some("web"));
    let halt = halted.halt.clone().expect("a halt is recorded");
    assert_eq!(
        (halt.wave, halt.reason.as_str(), halt.installs.as_slice()),
        (1, "WaveFailed", &["b".to_owned()][..])
    );
    assert!(halted.waves[1].started_at.is_none(), "wave 2 never started");
    // A halt does not wait for the rest of its wave: d still converges, and is counted.
    eventually(30, "wave 1: b failed, d done", async || {
        let status = rollout_status(&rollouts, "web-2").await;
        (progress(&status, 0)
            == [
                ("b", InstallProgressState::Failed),
                ("d", InstallProgressState::Done),
            ])
        .then_some(())
    })
    .await;
    // Exactly one new Plan on each moved install, of web; none of cache anywhere, none
    // on the installs not moved.
    assert_eq!(
        plans_of(&plans, &second).await,
        [
            ("b".into(), "web".into(), Some(PlanPhase::Failed)),
            ("d".into(), "web".into(), Some(PlanPhase::Succeeded)),
        ]
    );
    let d = installs.get("d").await.unwrap();
    assert_eq!(d.spec.release.as_deref(), Some(first.as_str()));
    assert_eq!(d.spec.component_releases.get("web"), Some(&second));
    assert_eq!(
        component_releases(&installs, "d").await,
        [
            ("cache".into(), Some(first.clone())),
            ("web".into(), Some(second.clone()))
        ],
        "web moved, cache held"
    );
    let held = d.status.unwrap().conditions;
    assert!(
        held.iter()
            .any(|c| c.type_ == "ComponentsHeld" && c.message.contains("sandbox, cache held")),
        "{held:?}"
    );
    for name in ["a", "c", "e", "f", "z"] {
        let install = installs.get(name).await.unwrap();
        assert!(
            install.spec.component_releases.is_empty(),
            "{name} not moved"
        );
    }

    // b is fixed and the rollout resumed: wave 2 starts, and holds on c's approval and
    // f's maintenance window.
    runner.fail("b", false);
    delete_failed_plans(&plans, "b").await;
    outpost(&cp, &["rollout", "resume", "web-2"]);
    let held = eventually(
        60,
        "wave 2 held by c's approval and f's window",
        async || {
            let status = rollouts.get("web-2").await.ok()?.status?;
            let wave = status.waves.get(1)?;
            wave.progress
                .iter()
                .all(|p| p.state == InstallProgressState::Held)
                .then_some(status)
        },
    )
    .await;
    let why: Vec<String> = held.waves[1]
        .progress
        .iter()
        .map(|p| p.message.clone().unwrap_or_default())
        .collect();
    assert!(
        why[0].starts_with("plan c-deploy-web-") && why[0].ends_with("awaits approval"),
        "{why:?}"
    );
    assert!(
        why[1].contains("waits for the install's next maintenance window"),
        "{why:?}"
    );
    assert_eq!(held.waves[0].succeeded, 2, "b moved once fixed");
    assert!(
        held.waves[1].completed_at.is_none(),
        "a held wave is not complete"
    );
    assert!(
        held.waves[2].started_at.is_none(),
        "wave 3 waits for wave 2"
    );
    assert_eq!(held.phase, Some(RolloutPhase::Progressing));
    let f_plans: Vec<_> = plans_of(&plans, &second)
        .await
        .into_iter()
        .filter(|p| p.0 == "f")
        .collect();
    assert!(
        f_plans.is_empty(),
        "outside its window f gets no Plan: {f_plans:?}"
    );
    let shown = outpost(&cp, &["rollout", "status", "web-2"]);
    assert!(
        shown.contains("component web only") && shown.contains("held: c: plan c-deploy-web-"),
        "{shown}"
    );

    // Paused, the approval and the open window complete wave 2, and no other starts.
    outpost(&cp, &["rollout", "pause", "web-2"]);
    let awaiting = plans_of(&plans, &second).await;
    assert!(
        awaiting.contains(&("c".into(), "web".into(), Some(PlanPhase::AwaitingApproval))),
        "{awaiting:?}"
    );
    let c_plan = plans
        .list(&ListParams::default().labels("outpost.dev/install=c"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.release.as_deref() == Some(second.as_str()))
        .unwrap();
    outpost(&cp, &["approve", &c_plan.name_any()]);
    installs
        .patch(
            "f",
            &params,
            &merge(json!({"spec": {"maintenanceWindows": null}})),
        )
        .await
        .unwrap();
    let paused = eventually(60, "wave 2 completed while paused", async || {
        let status = rollouts.get("web-2").await.ok()?.status?;
        status.waves[1].completed_at.as_ref()?;
        (status.phase == Some(RolloutPhase::Paused)).then_some(status)
    })
    .await;
    assert_eq!(
        progress(&paused, 1),
        [
            ("c", InstallProgressState::Done),
            ("f", InstallProgressState::Done)
        ]
    );
    assert!(paused.waves[2].started_at.is_none());

    // Aborted: wave 3 (a, e) is left as it was.
    outpost(&cp, &["rollout", "abort", "web-2"]);
    let aborted = in_phase(&rollouts, "web-2", RolloutPhase::Aborted, 30).await;
    assert_eq!((aborted.updated, aborted.total), (4, 6));
    let moved: Vec<(String, String, Option<PlanPhase>)> = ["b", "c", "d", "f"]
        .map(|i| (i.to_owned(), "web".to_owned(), Some(PlanPhase::Succeeded)))
        .to_vec();
    assert_eq!(
        plans_of(&plans, &second).await,
        moved,
        "one web Plan per moved install"
    );
    for name in ["a", "e"] {
        let install = installs.get(name).await.unwrap();
        assert!(
            install.spec.component_releases.is_empty(),
            "{name} untouched"
        );
        assert_eq!(deployed_release(&install).as_deref(), Some(first.as_str()));
    }
    for name in ["b", "c", "d", "f"] {
        assert_eq!(
            component_releases(&installs, name).await,
            [
                ("cache".into(), Some(first.clone())),
                ("web".into(), Some(second.clone()))
            ],
            "{name}: web moved, cache held"
        );
    }

    // A whole-release rollout moves everything else and clears the component pins: cache
    // gets its Plan everywhere, web only where it had not moved.
    installs
        .patch(
            "c",
            &params,
            &merge(json!({"spec": {"approvalMode": "approve-all"}})),
        )
        .await
        .unwrap();
    let rollout = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "all-2"},
        "spec": {"app": "shop", "selector": {"matchLabels": {"fleet": "yes"}}, "waveSize": "100%"},
    });
    create(&rollouts, rollout).await;
    let completed = in_phase(&rollouts, "all-2", RolloutPhase::Completed, 60).await;
    assert_eq!((completed.updated, completed.total), (6, 6));
    on_release(&installs, &["a", "b", "c", "d", "e", "f"], &second).await;
    for (name, _) in INSTALLS {
        let install = installs.get(name).await.unwrap();
        assert!(
            install.spec.component_releases.is_empty(),
            "{name}: pins cleared"
        );
    }
    let planned = plans_of(&plans, &second).await;
    let count = |install: &str, entity: &str| {
        planned
            .iter()
            .filter(|p| p.0 == install && p.1 == entity)
            .count()
    };
    for name in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(
            (count(name, "web"), count(name, "cache")),
            (1, 1),
            "{name}: {planned:?}"
        );
    }
    assert_eq!((count("z", "web"), count("z", "cache")), (0, 0));
}

/// Each install of wave `index` (0-based) and its state.
fn progress(
    status: &outpost_api::RolloutStatus,
    index: usize,
) -> Vec<(&str, InstallProgressState)> {
    status.waves[index]
        .progress
        .iter()
        .map(|p| (p.install.as_str(), p.state))
        .collect()
}
