use serde_json::json;

use super::*;

fn install(name: &str, components: serde_json::Value) -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": name, "namespace": "default", "labels": {"tier": "gold"}},
        "spec": {"app": "shop", "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
        "status": {"phase": "Active", "components": components}
    }))
    .unwrap()
}

fn plan(
    name: &str,
    component: &str,
    created: &str,
    phase: &str,
    verdicts: serde_json::Value,
) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
        "spec": {"install": "acme", "operation": "deploy", "entity": {"kind": "component", "name": component}},
        "status": {"phase": phase, "verdicts": verdicts}
    }))
    .unwrap()
}

fn runner(beat: &str) -> Runner {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Runner",
        "metadata": {"name": "acme", "namespace": "default"},
        "spec": {"install": "acme", "version": "0.1.0", "publicKey": "k"},
        "status": {"lastHeartbeat": beat}
    }))
    .unwrap()
}

fn drift(component: &str, in_sync: bool) -> DriftReport {
    let diff = if in_sync {
        json!([])
    } else {
        json!([{"path": "Deployment/shop/web.spec.replicas", "op": "changed", "desired": 2, "live": 5}])
    };
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "DriftReport",
        "metadata": {"name": format!("acme-{component}"), "namespace": "default"},
        "spec": {"install": "acme", "entity": {"kind": "component", "name": component},
                 "inSync": in_sync, "observedAt": "2026-11-23T10:00:00Z", "diff": diff}
    }))
    .unwrap()
}

fn now() -> Time {
    Time("2026-11-23T10:00:30Z".parse().unwrap())
}

fn deployed(name: &str) -> serde_json::Value {
    json!({"name": name, "phase": "Deployed", "release": "sha256:ab"})
}

#[test]
fn cells_follow_plans_drift_and_the_runner() {
    let objects = FleetObjects {
        installs: vec![install(
            "acme",
            json!([deployed("web"), deployed("db"), deployed("cache"), deployed("queue"),
                   {"name": "api", "phase": "Failed"}, deployed("search")]),
        )],
        plans: vec![
            // An older plan of web awaiting approval is superseded by a newer success.
            plan(
                "web-1",
                "web",
                "2026-11-23T09:00:00Z",
                "AwaitingApproval",
                json!([]),
            ),
            plan(
                "web-2",
                "web",
                "2026-11-23T09:10:00Z",
                "Succeeded",
                json!([]),
            ),
            plan(
                "cache-1",
                "cache",
                "2026-11-23T09:00:00Z",
                "AwaitingApproval",
                json!([]),
            ),
            plan(
                "queue-1",
                "queue",
                "2026-11-23T09:00:00Z",
                "Denied",
                json!([{"policy": "no-latest", "enforcement": "deny", "denied": true, "messages": ["latest tag"]}]),
            ),
            plan(
                "search-1",
                "search",
                "2026-11-23T09:00:00Z",
                "Applying",
                json!([]),
            ),
        ],
        runners: vec![runner("2026-11-23T10:00:00Z")],
        drift: vec![drift("web", false), drift("db", true)],
        ..FleetObjects::default()
    };
    let fleet = fleet(&objects, &now());
    let row = &fleet.rows[0];
    let state = |c: &str| row.cells[c].state;
    assert_eq!(state("web"), CellState::Drifted);
    assert_eq!(row.cells["web"].text, "drifted · 1 field");
    assert_eq!(row.cells["web"].plan.as_deref(), Some("web-2"));
    assert_eq!(state("db"), CellState::InSync);
    assert_eq!(state("cache"), CellState::AwaitingApproval);
    assert_eq!(state("queue"), CellState::Denied);
    assert_eq!(row.cells["queue"].text, "denied by policy");
    assert_eq!(state("api"), CellState::Failed);
    assert_eq!(state("search"), CellState::Deploying);
    assert!(row.runner_online);
    assert_eq!(
        fleet.columns,
        ["api", "cache", "db", "queue", "search", "web"]
    );
    let counts = fleet.counts();
    assert_eq!(counts[&CellState::InSync], 1);
    assert_eq!(counts[&CellState::Drifted], 1);
    assert!(!counts.contains_key(&CellState::RunnerOffline));
}

#[test]
fn a_silent_runner_turns_quiet_cells_offline() {
    let objects = FleetObjects {
        installs: vec![install(
            "acme",
            json!([deployed("web"), {"name": "api", "phase": "Failed"}]),
        )],
        // 30 s heartbeats by default: three missed is 90 s.
        runners: vec![runner("2026-11-23T09:58:00Z")],
        ..FleetObjects::default()
    };
    let row = &fleet(&objects, &now()).rows[0];
    assert!(!row.runner_online);
    assert_eq!(row.cells["web"].state, CellState::RunnerOffline);
    // What needs a person still shows as such.
    assert_eq!(row.cells["api"].state, CellState::Failed);
}

#[test]
fn components_of_the_app_without_status_are_not_deployed() {
    let component: Component = serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"app": "shop", "type": "kubernetes_manifest", "manifest": {"content": "{}"}}
    }))
    .unwrap();
    let objects = FleetObjects {
        installs: vec![install("acme", json!([]))],
        components: vec![component],
        runners: vec![runner("2026-11-23T10:00:00Z")],
        ..FleetObjects::default()
    };
    let row = &fleet(&objects, &now()).rows[0];
    assert_eq!(row.cells["web"].state, CellState::Pending);
    assert_eq!(
        CellState::from_slug("awaiting-approval"),
        Some(CellState::AwaitingApproval)
    );
    assert_eq!(CellState::from_slug("nope"), None);
}
