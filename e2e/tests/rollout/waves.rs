//! A release rollout in waves: halted by a failing wave, resumed, aborted.

use super::*;

on_both_backends!(a_rollout_halts_on_a_failing_wave_resumes_and_aborts);

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
