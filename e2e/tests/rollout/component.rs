//! A component rollout: one component moved across installs in waves.

use super::*;

on_both_backends!(a_component_rollout_moves_one_component_in_waves);

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
