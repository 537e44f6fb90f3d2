//! The Install controller, with the test playing the runner (which arrives with the
//! runner issue): it completes approved Plans and hands back outputs.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube_client::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use outpost_api::{Install, Plan};
use outpost_testing::{Backend, ControlPlane, eventually, manifests, on_both_backends, wait_for};
use serde_json::json;

on_both_backends!(
    installs_deploy_in_dependency_order_replan_on_input_change_and_tear_down,
    killing_the_controllers_mid_rollout_creates_no_duplicate_plans,
    cron_actions_run_on_schedule_once_per_firing,
);

fn outputs(plan: &Plan) -> serde_json::Value {
    match (plan.spec.operation.as_str(), plan.spec.entity.name.as_str()) {
        ("provision", _) => json!({"private_subnet_ids": ["subnet-a", "subnet-b"]}),
        ("deploy", "database") => json!({"endpoint": "db.internal:5432"}),
        ("deploy", "cache") => json!({"host": "cache.internal:6379"}),
        ("deploy", "web-image") => {
            json!({"reference": "registry.example/shopfront@sha256:abc"})
        }
        _ => json!({}),
    }
}

/// Completes approved Plans of `install` until `done` holds; returns them in completion order.
async fn play_runner(
    plans: &Api<Plan>,
    install: &str,
    done: impl AsyncFn() -> bool,
) -> Vec<(String, String)> {
    let mut completed = Vec::new();
    let converged = wait_for(Duration::from_secs(30), async || {
        let listed = plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={install}")))
            .await
            .unwrap();
        for plan in listed.items {
            let approved = plan
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map(|p| format!("{p:?}"))
                == Some("Ready".into());
            if !approved {
                continue;
            }
            let name = plan.metadata.name.clone().unwrap();
            let patch = json!({"status": {"phase": "Succeeded", "finishedAt": jiff::Timestamp::now().to_string(), "outputs": outputs(&plan)}});
            plans
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
            completed.push((
                plan.spec.operation.as_str().to_owned(),
                plan.spec.entity.name.clone(),
            ));
        }
        done().await.then_some(())
    })
    .await;
    if converged.is_none() {
        let phases: Vec<String> = plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={install}")))
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| {
                format!(
                    "{}={:?}",
                    p.metadata.name.clone().unwrap_or_default(),
                    p.status.as_ref().and_then(|s| s.phase)
                )
            })
            .collect();
        panic!("never converged; completed so far: {completed:?}; plans: {phases:?}");
    }
    completed
}

/// The names of every Plan in the namespace.
async fn plan_names(plans: &Api<Plan>) -> BTreeSet<String> {
    plans
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Whether the install reports phase Active.
async fn is_active(installs: &Api<Install>, name: &str) -> bool {
    installs
        .get(name)
        .await
        .ok()
        .and_then(|i| i.status)
        .and_then(|s| s.phase)
        == Some(outpost_api::InstallPhase::Active)
}

fn position(order: &[(String, String)], operation: &str, entity: &str) -> usize {
    order
        .iter()
        .position(|(o, e)| o == operation && e == entity)
        .unwrap_or_else(|| panic!("no {operation} of {entity} in {order:?}"))
}

async fn installs_deploy_in_dependency_order_replan_on_input_change_and_tear_down(
    backend: Backend,
) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let _controllers = cp.start_controllers("installs");
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let installs: Api<Install> = Api::namespaced(client.clone(), "default");
    let active = async || is_active(&installs, "globex").await;

    let order = play_runner(&plans, "globex", &active).await;
    assert_eq!(
        order[0],
        ("provision".to_owned(), "sandbox".to_owned()),
        "{order:?}"
    );
    for dependency in ["database", "cache", "web-image"] {
        assert!(
            position(&order, "deploy", dependency) < position(&order, "deploy", "web"),
            "{order:?}"
        );
    }
    assert!(
        position(&order, "deploy", "web") < position(&order, "deploy", "ingress"),
        "{order:?}"
    );
    // The migrate action's pre-deploy-component trigger on web runs after web's
    // dependencies and before web.
    assert!(
        position(&order, "deploy", "database") < position(&order, "trigger", "migrate"),
        "{order:?}"
    );
    assert!(
        position(&order, "trigger", "migrate") < position(&order, "deploy", "web"),
        "{order:?}"
    );
    let finalizers = installs
        .get("globex")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default();
    assert!(finalizers.contains(&"outpost.dev/install".to_owned()));
    let rendered = kubectl.ok(&[
        "get",
        "plans",
        "-l",
        "outpost.dev/install=globex",
        "-o",
        "jsonpath={.items[*].spec.desiredState}",
    ]);
    assert!(
        rendered.contains("db.internal:5432"),
        "web's manifest got the database's output"
    );
    assert!(
        rendered.contains("${outpost-secret:db_password}"),
        "secrets stay references"
    );

    // Changing the domain re-plans exactly the components that use it.
    let before: BTreeSet<String> = plan_names(&plans).await;
    installs
        .patch(
            "globex",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"inputs": {"domain": "shop.globex.example"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let replanned = play_runner(&plans, "globex", &active).await;
    let after: BTreeSet<String> = plan_names(&plans).await;
    let new: Vec<&String> = after.difference(&before).collect();
    assert_eq!(
        new.len(),
        3,
        "only web (with its pre-deploy migrate) and ingress re-planned: {new:?}"
    );
    assert!(new.iter().any(|n| n.ends_with("-pre-migrate")), "{new:?}");
    assert!(
        new.iter().any(|n| n.contains("-deploy-web-"))
            && new.iter().any(|n| n.contains("-deploy-ingress-")),
        "{new:?}"
    );
    assert_eq!(replanned.len(), 3, "{replanned:?}");

    // A change to a component (the app's release) rolls out to the install: only ingress.
    let components: Api<outpost_api::Component> = Api::namespaced(client.clone(), "default");
    components
        .patch(
            "ingress",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drift": {"intervalSeconds": 600}}})),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let rolled = play_runner(&plans, "globex", async || {
        active().await && started.elapsed() > Duration::from_millis(300)
    })
    .await;
    assert_eq!(
        rolled,
        [("deploy".to_owned(), "ingress".to_owned())],
        "the component change rolled out alone"
    );

    // A maintenance window that is closed now holds deploys: the change waits, visibly.
    let later = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC)
        + jiff::SignedDuration::from_hours(12);
    let window = json!({
        "days": [format!("{:?}", later.weekday())],
        "start": later.strftime("%H:%M").to_string(),
        "durationMinutes": 1,
    });
    installs
        .patch(
            "globex",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maintenanceWindows": [window], "inputs": {"domain": "held.globex.example"}}})),
        )
        .await
        .unwrap();
    eventually(30, "the install to report the held plan", async || {
        let install = installs.get("globex").await.unwrap();
        install
            .status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Held" && c.status == "True")
            .then_some(())
    })
    .await;
    let during: BTreeSet<String> = plan_names(&plans).await;
    let sneaked: Vec<&String> = during
        .difference(&after)
        .filter(|n| !n.contains("-deploy-ingress-"))
        .collect();
    assert!(
        sneaked.is_empty(),
        "nothing is planned outside the window: {sneaked:?}"
    );
    installs
        .patch(
            "globex",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "remove", "path": "/spec/maintenanceWindows"}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let released = play_runner(&plans, "globex", async || {
        active().await
            && installs
                .get("globex")
                .await
                .unwrap()
                .status
                .is_some_and(|s| !s.conditions.iter().any(|c| c.type_ == "Held"))
    })
    .await;
    assert!(
        released.iter().any(|(o, e)| o == "deploy" && e == "web"),
        "the held change went out once the window was gone: {released:?}"
    );

    // Deleting the install tears down in reverse order, then deprovisions, then it goes.
    installs
        .delete("globex", &DeleteParams::default())
        .await
        .unwrap();
    let gone = async || installs.get_opt("globex").await.unwrap().is_none();
    let teardown = play_runner(&plans, "globex", &gone).await;
    assert!(
        position(&teardown, "teardown", "ingress") < position(&teardown, "teardown", "web"),
        "{teardown:?}"
    );
    for dependency in ["database", "cache", "web-image"] {
        assert!(
            position(&teardown, "teardown", "web") < position(&teardown, "teardown", dependency),
            "{teardown:?}"
        );
    }
    assert_eq!(
        teardown.last().unwrap(),
        &("deprovision".to_owned(), "sandbox".to_owned()),
        "{teardown:?}"
    );
}

async fn killing_the_controllers_mid_rollout_creates_no_duplicate_plans(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let installs: Api<Install> = Api::namespaced(client.clone(), "default");
    let active = async || is_active(&installs, "globex").await;
    // The same replica identity, killed (SIGKILL) and restarted while the rollout runs.
    let mut controllers = cp.start_controllers("flaky");
    let restarts = async {
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            controllers.kill();
            controllers = cp.start_controllers("flaky");
        }
    };
    let (order, ()) = tokio::join!(play_runner(&plans, "globex", &active), restarts);
    assert!(active().await);
    let all = plans
        .list(&ListParams::default().labels("outpost.dev/install=globex"))
        .await
        .unwrap()
        .items;
    let mut seen = BTreeSet::new();
    for plan in &all {
        let key = (plan.spec.operation.as_str(), plan.spec.entity.name.clone());
        assert!(
            seen.insert(key.clone()),
            "two plans for {key:?}: {:?}",
            all.iter()
                .map(|p| p.metadata.name.clone())
                .collect::<Vec<_>>()
        );
    }
    assert_eq!(
        all.len(),
        7,
        "sandbox, five components and the migrate trigger: {order:?}"
    );
}

async fn cron_actions_run_on_schedule_once_per_firing(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let heartbeat = cp.scratch().join("heartbeat.yaml");
    std::fs::write(
        &heartbeat,
        "apiVersion: outpost.dev/v1alpha1\nkind: Action\nmetadata:\n  name: heartbeat\nspec:\n  app: shopfront\n  triggers:\n    - type: cron\n      schedule: \"*/2 * * * * *\"\n  steps:\n    - name: ping\n      command: \"true\"\n",
    )
    .unwrap();
    kubectl.ok(&["apply", "-f", heartbeat.to_str().unwrap()]);
    let _controllers = cp.start_controllers("cron");
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let installs: Api<Install> = Api::namespaced(client.clone(), "default");
    // Bring globex up, then let the every-two-seconds action fire a few times.
    play_runner(&plans, "globex", async || {
        is_active(&installs, "globex").await
    })
    .await;
    let cron_plans = async || {
        plans
            .list(&ListParams::default().labels("outpost.dev/install=globex"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| n.starts_with("globex-cron-heartbeat-"))
            .collect::<Vec<_>>()
    };
    let fired = play_runner(&plans, "globex", async || cron_plans().await.len() >= 3).await;
    assert!(
        fired
            .iter()
            .all(|(o, e)| o == "trigger" && e == "heartbeat"),
        "{fired:?}"
    );
    let names = cron_plans().await;
    let times: BTreeSet<i64> = names
        .iter()
        .map(|n| {
            n.trim_start_matches("globex-cron-heartbeat-")
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(times.len(), names.len(), "one plan per firing: {names:?}");
    assert!(
        times.iter().all(|t| t % 2 == 0),
        "on the schedule: {times:?}"
    );
}
