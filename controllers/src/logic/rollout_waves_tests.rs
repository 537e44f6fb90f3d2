use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::Rollout;
use serde_json::{Value, json};

const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const NEW: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn install(name: &str, ring: Option<&str>) -> Install {
    let labels = ring.map_or(json!({}), |r| json!({"ring": r}));
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": name, "labels": labels, "generation": 2},
        "spec": {"app": "shop", "release": NEW,
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
    }))
    .expect("a valid Install")
}

fn with_status(mut install: Install, status: Value) -> Install {
    install.status = Some(serde_json::from_value(status).expect("a valid status"));
    install
}

fn plan(name: &str, release: &str, phase: &str) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": name},
        "spec": {"install": "a", "operation": "deploy", "entity": {"kind": "component", "name": "web"},
                 "release": release},
        "status": {"phase": phase, "message": "exit status 1"},
    }))
    .expect("a valid Plan")
}

fn spec(extra: Value) -> RolloutSpec {
    let mut spec = json!({"app": "shop"});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value::<Rollout>(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "r"}, "spec": spec,
    }))
    .expect("a valid Rollout")
    .spec
}

fn wave(
    installs: usize,
    counts: [u32; 4],
    started: Option<i64>,
    completed: Option<i64>,
) -> WaveStatus {
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
    WaveStatus {
        installs: (0..installs).map(|i| format!("i{i}")).collect(),
        succeeded: counts[0],
        failed: counts[1],
        denied: counts[2],
        pending: counts[3],
        failures: vec![],
        progress: vec![],
        started_at: started.map(at),
        completed_at: completed.map(at),
    }
}

#[test]
fn waves_follow_the_order_label_then_names() {
    let installs = [
        install("zeta", Some("0")),
        install("beta", Some("10")),
        install("alpha", Some("2")),
        install("gamma", None),
        install("delta", Some("canary")),
        install("acme", Some("0")),
    ];
    let refs: Vec<&Install> = installs.iter().collect();
    assert_eq!(
        form_waves(&refs, Some("ring"), 2),
        [
            vec!["acme", "zeta"],
            vec!["alpha", "beta"],
            vec!["delta", "gamma"]
        ],
        "numbers numerically (2 before 10), then text, then no label"
    );
    assert_eq!(
        form_waves(&refs, None, 4),
        [
            vec!["acme", "alpha", "beta", "delta"],
            vec!["gamma", "zeta"]
        ],
        "without an order label, by name"
    );
    assert_eq!(form_waves(&refs[..1], Some("ring"), 0), [vec!["zeta"]]);
    assert!(form_waves(&[], Some("ring"), 2).is_empty());
}

#[test]
fn outcome_of_an_install() {
    let active_on = |release: &str| {
        with_status(
            install("a", None),
            json!({"phase": "Active", "observedGeneration": 2,
                   "components": [{"name": "web", "release": release, "phase": "Deployed"}]}),
        )
    };
    assert_eq!(outcome(None, &[], NEW, None), Outcome::Gone);
    let mut not_moved = active_on(OLD);
    not_moved.spec.release = Some(OLD.into());
    assert_eq!(outcome(Some(&not_moved), &[], NEW, None), Outcome::Waiting);
    assert_eq!(
        outcome(Some(&active_on(NEW)), &[], NEW, None),
        Outcome::Succeeded
    );
    // Moved but still showing the old release: converging.
    assert_eq!(
        outcome(Some(&active_on(OLD)), &[], NEW, None),
        Outcome::Pending
    );
    // A status from before the move (older generation) does not count.
    let mut stale = active_on(NEW);
    stale.status.as_mut().unwrap().observed_generation = Some(1);
    assert_eq!(outcome(Some(&stale), &[], NEW, None), Outcome::Pending);

    let degraded = with_status(
        install("a", None),
        json!({"phase": "Degraded", "observedGeneration": 2}),
    );
    assert_eq!(
        outcome(
            Some(&degraded),
            &[plan("a-deploy-web-1", NEW, "Failed")],
            NEW,
            None
        ),
        Outcome::Failed("a: plan a-deploy-web-1: exit status 1".into())
    );
    assert!(matches!(
        outcome(
            Some(&degraded),
            &[plan("a-deploy-web-1", NEW, "Denied")],
            NEW,
            None
        ),
        Outcome::Denied(_)
    ));
    // A Plan of another release failing is not this rollout's failure.
    assert_eq!(
        outcome(
            Some(&degraded),
            &[plan("a-deploy-web-0", OLD, "Failed")],
            NEW,
            None
        ),
        Outcome::Pending
    );
    // Awaiting approval, or outside the maintenance window: held, and counted pending.
    assert_eq!(
        outcome(
            Some(&degraded),
            &[plan("a-deploy-web-1", NEW, "AwaitingApproval")],
            NEW,
            None
        ),
        Outcome::Held("a: plan a-deploy-web-1 awaits approval".into())
    );
    let outside_window = with_status(
        install("a", None),
        json!({"phase": "Deploying", "observedGeneration": 2, "conditions": [{
            "type": "Held", "status": "True", "reason": "OutsideMaintenanceWindow",
            "message": "plan a-deploy-web-1 waits for the install's next maintenance window",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    );
    let held = outcome(Some(&outside_window), &[], NEW, None);
    assert_eq!(
        held,
        Outcome::Held(
            "a: plan a-deploy-web-1 waits for the install's next maintenance window".into()
        )
    );
    assert!(held.needs_plans(), "a failed Plan would still count first");
}

#[test]
fn outcome_of_a_component_rollout() {
    // Pinned to the old release as a whole, web moved to the new one.
    let moved = |web: &str, cache: &str| {
        let mut install = with_status(
            install("a", None),
            json!({"phase": "Active", "observedGeneration": 2, "components": [
                {"name": "cache", "release": cache, "phase": "Deployed"},
                {"name": "web", "release": web, "phase": "Deployed"}]}),
        );
        install.spec.release = Some(OLD.into());
        install.spec.component_releases = [("web".to_owned(), NEW.to_owned())].into();
        install
    };
    let web = Some("web");
    assert_eq!(
        outcome(Some(&moved(NEW, OLD)), &[], NEW, web),
        Outcome::Succeeded,
        "web at the release is enough; cache stays"
    );
    assert_eq!(
        outcome(Some(&moved(NEW, OLD)), &[], NEW, None),
        Outcome::Waiting,
        "the whole release has not moved"
    );
    assert_eq!(
        outcome(Some(&moved(OLD, OLD)), &[], NEW, web),
        Outcome::Pending
    );
    assert_eq!(
        outcome(Some(&moved(NEW, OLD)), &[], NEW, Some("cache")),
        Outcome::Waiting
    );
    let failed = outcome(
        Some(&moved(OLD, OLD)),
        &[plan("a-deploy-web-1", NEW, "Failed")],
        NEW,
        web,
    );
    assert!(matches!(failed, Outcome::Failed(_)), "{failed:?}");
    // An install moved as a whole to the release counts as moved for the component.
    let mut whole = moved(NEW, NEW);
    whole.spec.release = Some(NEW.into());
    whole.spec.component_releases.clear();
    assert_eq!(outcome(Some(&whole), &[], NEW, web), Outcome::Succeeded);
}

#[test]
fn tally_counts_and_lists_failures() {
    let counted = tally(
        &wave(5, [0; 4], Some(1), None),
        &[
            Outcome::Succeeded,
            Outcome::Failed("i1: plan p: boom".into()),
            Outcome::Denied("i2: plan q: denied by policy".into()),
            Outcome::Pending,
            Outcome::Gone,
        ],
    );
    assert_eq!(
        (
            counted.succeeded,
            counted.failed,
            counted.denied,
            counted.pending
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(counted.failures.len(), 2);
    assert_eq!(counted.installs.len(), 5);
    let states: Vec<InstallProgressState> = counted.progress.iter().map(|p| p.state).collect();
    assert_eq!(
        states,
        [
            InstallProgressState::Done,
            InstallProgressState::Failed,
            InstallProgressState::Denied,
            InstallProgressState::Moving,
            InstallProgressState::Gone,
        ]
    );
    assert_eq!(counted.progress[1].install, "i1");
    assert_eq!(
        counted.progress[1].message.as_deref(),
        Some("plan p: boom"),
        "the install's name is in its own field"
    );
    let not_started = tally(
        &wave(2, [0; 4], None, None),
        &[
            Outcome::Waiting,
            Outcome::Held("i1: plan p awaits approval".into()),
        ],
    );
    assert_eq!(not_started.pending, 2, "held installs are pending");
    assert_eq!(not_started.progress[0].state, InstallProgressState::Pending);
    assert_eq!(not_started.progress[1].state, InstallProgressState::Held);
}

#[test]
fn a_failure_over_the_threshold_halts_before_the_next_wave() {
    let now = jiff::Timestamp::from_second(1000).unwrap();
    let waves = [
        wave(2, [1, 1, 0, 0], Some(1), Some(2)),
        wave(2, [0, 0, 0, 2], None, None),
    ];
    assert_eq!(next_step(&spec(json!({})), &waves, now), Next::Halt(0));
    assert_eq!(
        next_step(&spec(json!({"maxFailures": 1})), &waves, now),
        Next::Start(1),
        "one failure is allowed"
    );
    assert_eq!(
        next_step(&spec(json!({"maxFailures": "50%"})), &waves, now),
        Next::Start(1),
        "50% of two installs"
    );
    // A halt is found even while the wave still has installs converging.
    let converging = [
        wave(3, [0, 0, 1, 2], Some(1), None),
        wave(1, [0; 4], None, None),
    ];
    assert_eq!(next_step(&spec(json!({})), &converging, now), Next::Halt(0));
}

#[test]
fn waves_wait_for_their_installs_then_the_pause() {
    let now = jiff::Timestamp::from_second(1000).unwrap();
    let pause = spec(json!({"pauseSeconds": 60}));
    let in_progress = [
        wave(2, [2, 0, 0, 0], Some(1), Some(2)),
        wave(2, [1, 0, 0, 1], Some(3), None),
        wave(2, [0; 4], None, None),
    ];
    assert_eq!(next_step(&pause, &in_progress, now), Next::InProgress(1));
    let pausing = [
        wave(2, [2, 0, 0, 0], Some(1), Some(990)),
        wave(2, [0; 4], None, None),
    ];
    assert_eq!(
        next_step(&pause, &pausing, now),
        Next::PauseBefore(1, Duration::from_secs(50))
    );
    let paused_long_enough = [
        wave(2, [2, 0, 0, 0], Some(1), Some(900)),
        wave(2, [0; 4], None, None),
    ];
    assert_eq!(next_step(&pause, &paused_long_enough, now), Next::Start(1));
    let done = [
        wave(2, [2, 0, 0, 0], Some(1), Some(2)),
        wave(1, [1, 0, 0, 0], Some(3), Some(4)),
    ];
    assert_eq!(next_step(&pause, &done, now), Next::Completed);
    assert_eq!(next_step(&pause, &[], now), Next::Completed);
    assert_eq!(
        next_step(&pause, &[wave(1, [0; 4], None, None)], now),
        Next::Start(0),
        "the first wave waits for no pause"
    );
}
