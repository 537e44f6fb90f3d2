//! `deploy`, `trigger` and `drift`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_asks_the_install_controller_for_a_plan_like_its_own() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let plans = fleet.plans().await;
    let deployed = fleet.ok(&["deploy", "cache", "--install", "globex", "--wait"]);
    let name = deployed
        .stdout
        .trim()
        .strip_prefix("plan/")
        .unwrap_or_else(|| panic!("{deployed:?}"))
        .to_owned();
    assert!(name.starts_with("globex-deploy-cache-"), "{name}");
    // Progress: the phase changes it saw on standard error (polled, so a short-lived
    // phase may pass unseen), in lifecycle order, ending with Succeeded.
    let order = ["Pending", "Ready", "Claimed", "Applying", "Succeeded"];
    let seen: Vec<usize> = deployed
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("plan {name}: ")))
        .map(|rest| {
            let phase = rest.split([' ', ':']).next().unwrap();
            order
                .iter()
                .position(|p| *p == phase)
                .unwrap_or_else(|| panic!("{rest}"))
        })
        .collect();
    assert!(seen.is_sorted(), "{deployed:?}");
    assert_eq!(seen.last(), Some(&(order.len() - 1)), "{deployed:?}");
    let plan = plans.get(&name).await.unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Succeeded));
    assert_eq!(plan.spec.operation.as_str(), "deploy");
    assert_eq!(
        plan.spec.reason.as_deref(),
        Some("manual: requested by alice")
    );
    assert_eq!(
        plan.metadata.labels.as_ref().unwrap()["outpost.dev/install"],
        "globex"
    );
    let install = Api::<Install>::namespaced(fleet.cp.client().await, "default")
        .get("globex")
        .await
        .unwrap();
    let owner = &plan.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Install", install.metadata.uid.as_deref().unwrap())
    );
    // The desired state is the one the controller rendered for its own deploy of cache.
    let converge = plans
        .list(&ListParams::default().labels("outpost.dev/install=globex"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.entity.name == "cache" && p.spec.reason.as_deref() == Some("converge"))
        .unwrap();
    assert_eq!(plan.spec.desired_state, converge.spec.desired_state);
    assert_eq!(
        plan.spec.content_hash,
        Some(outpost_api::content_hash(
            plan.spec.desired_state.as_ref().unwrap()
        ))
    );

    // acme's components wait for its sandbox (awaiting approval): no Plan can be made yet.
    let waits = fleet.fails(&["deploy", "web", "--install", "acme", "--timeout", "2"]);
    assert!(
        waits.contains("the install controller did not make plan default/acme-deploy-web-")
            && waits.contains("once its dependencies are deployed"),
        "{waits}"
    );

    assert!(waits.contains("the request was withdrawn"), "{waits}");
    // Served and withdrawn requests leave the Install: deleting a Plan never re-runs it.
    let installs = Api::<Install>::namespaced(fleet.cp.client().await, "default");
    for install in ["acme", "globex"] {
        let requests = installs.get(install).await.unwrap().spec.requests;
        assert!(requests.is_empty(), "{install}: {requests:?}");
    }

    // Errors name the object and what to do next.
    let install = fleet.fails(&["deploy", "cache", "--install", "nope"]);
    assert!(
        install.contains("install default/nope not found")
            && install.contains("outpost status -n default"),
        "{install}"
    );
    let component = fleet.fails(&["deploy", "nope", "--install", "globex"]);
    assert!(
        component.contains("component default/nope not found in app shopfront")
            && component.contains("kubectl get components"),
        "{component}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_runs_an_action_under_the_runtime_override() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let plans = fleet.plans().await;
    let uid = Api::<Install>::namespaced(fleet.cp.client().await, "default")
        .get("globex")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    // The override is the role's name template, as the App declares it.
    let template = "{{ install.id }}-break-glass";
    let role = format!("{uid}-break-glass");
    let ran = fleet.ok(&[
        "trigger",
        "migrate",
        "--install",
        "globex",
        "--role",
        template,
        "--wait",
        "-o",
        "json",
    ]);
    let plan: Plan = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Succeeded));
    assert_eq!(plan.spec.operation.as_str(), "trigger");
    assert_eq!(plan.spec.role_override.as_deref(), Some(template));
    let resolved = plan.status.unwrap().role.unwrap();
    assert_eq!(resolved.name, role);
    assert_eq!(serde_json::to_value(resolved.level).unwrap(), "override");

    // Without --role the chain picks the default role.
    let ran = fleet.ok(&[
        "trigger",
        "migrate",
        "--install",
        "globex",
        "--wait",
        "-o",
        "yaml",
    ]);
    assert!(
        ran.stdout.contains(&format!("name: {uid}-maintenance")),
        "{}",
        ran.stdout
    );

    // A role the App does not declare: the gate denies the Plan, --wait says why.
    let denied = fleet.fails(&[
        "trigger",
        "migrate",
        "--install",
        "globex",
        "--role",
        "made-up-role",
        "--wait",
    ]);
    assert!(
        denied.contains(": Denied") && denied.contains("made-up-role"),
        "{denied}"
    );
    let name = fleet.wait_plan_in("globex", PlanPhase::Denied).await;
    assert_eq!(
        plans
            .get(&name)
            .await
            .unwrap()
            .spec
            .role_override
            .as_deref(),
        Some("made-up-role")
    );

    // Errors name the object and what to do next.
    let unknown = fleet.fails(&["trigger", "nope", "--install", "globex"]);
    assert!(
        unknown.contains("action default/nope not found in app shopfront")
            && unknown.contains("kubectl get actions"),
        "{unknown}"
    );
    let cron_only = fleet.fails(&["trigger", "backup-check", "--install", "globex"]);
    assert!(
        cron_only.contains("action default/backup-check has no manual trigger")
            && cron_only.contains("type: manual"),
        "{cron_only}"
    );
    let install = fleet.fails(&["trigger", "migrate", "--install", "nope"]);
    assert!(
        install.contains("install default/nope not found"),
        "{install}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_lists_reports_with_their_field_diffs() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let reports = Api::<DriftReport>::namespaced(fleet.cp.client().await, "default");
    let report: DriftReport = serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "DriftReport",
        "metadata": {"name": "globex-web", "labels": {"outpost.dev/install": "globex", "outpost.dev/component": "web"}},
        "spec": {
            "install": "globex",
            "entity": {"kind": "component", "name": "web"},
            "inSync": false,
            "observedAt": jiff::Timestamp::now().to_string(),
            "diff": [{"path": "Deployment/shop/web.spec.replicas", "op": "changed", "desired": 2, "live": 5}],
        }
    }))
    .unwrap();
    reports
        .create(&PostParams::default(), &report)
        .await
        .unwrap();
    let table = fleet.ok(&["drift", "globex"]).stdout;
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..3] == ["globex", "web", "Drifted"]),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["Deployment/shop/web.spec.replicas", "changed", "2", "5"]),
        "{table}"
    );
    let json: Vec<DriftReport> =
        serde_json::from_str(&fleet.ok(&["drift", "-o", "json"]).stdout).unwrap();
    assert_eq!(json.len(), 1);
    assert_eq!(
        json[0].spec.diff[0].path,
        "Deployment/shop/web.spec.replicas"
    );
    // The install status counts it once the controller saw the report.
    eventually(30, "status to count the drift", async || {
        (fleet.wait_install("globex", "Active").await["drifted"] == 1).then_some(())
    })
    .await;
    let none = fleet.ok(&["drift", "acme"]);
    assert!(
        none.stdout.is_empty() && none.stderr.contains("no drift reports"),
        "{none:?}"
    );
    let unknown = fleet.fails(&["drift", "nope"]);
    assert!(
        unknown.contains("install default/nope not found") && unknown.contains("outpost status"),
        "{unknown}"
    );
    let waited = fleet.fails(&["drift", "acme", "--wait", "--timeout", "1"]);
    assert!(
        waited.contains("no drift reported in namespace default for install acme within 1 s"),
        "{waited}"
    );
    // --wait returns at once when a report already shows drift.
    let table = fleet.ok(&["drift", "globex", "--wait"]).stdout;
    assert!(table.contains("Drifted"), "{table}");
}
