//! Approve policies and the runner's local policies and provider allow-list.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_policies_make_an_approve_all_install_wait_for_a_person() {
    let runner = start(false).await;
    let source = module(runner.dir.path());
    // A vendor policy that asks a person for every terraform change, on the real diff.
    let policy = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "person-approves-terraform"},
        "spec": {"app": "shop", "inputs": ["terraform"], "enforcement": "approve",
                 "module": "package outpost.person_approves_terraform\n\ndeny contains \"a person approves every terraform change\" if {\n  count(input.resource_changes) > 0\n}\n"}});
    let reply = runner
        .cp
        .raw(
            Some(&runner.cp.admin_token),
            "POST",
            "/apis/outpost.dev/v1alpha1/namespaces/default/policies",
            &[("content-type", "application/json")],
            policy.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let waiting = runner
        .ready_until(
            "thing-1",
            "thing",
            terraform_component(&source, None),
            json!([]),
            PlanPhase::AwaitingApproval,
        )
        .await;
    let verdict = diff(&waiting)
        .verdicts
        .into_iter()
        .find(|v| v.policy == "person-approves-terraform")
        .expect("the policy's verdict is on the diff");
    assert!(
        verdict.approval_required && !verdict.denied && !verdict.local,
        "{verdict:?}"
    );
    assert_eq!(thing_input(&runner.module_dir("thing")), None);
    approve(&runner.plans, &waiting).await.unwrap();
    runner
        .reaches("thing-1", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(
        thing_input(&runner.module_dir("thing")).as_deref(),
        Some("one")
    );

    // The gate's verdict asks too (an approve policy on the rendered state), with no
    // policy on the diff.
    let reply = runner
        .cp
        .raw(
            Some(&runner.cp.admin_token),
            "DELETE",
            "/apis/outpost.dev/v1alpha1/namespaces/default/policies/person-approves-terraform",
            &[],
            String::new(),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let gate_verdict = json!([{"policy": "person-approves-deploys", "enforcement": "approve",
                                "denied": false, "approvalRequired": true,
                                "messages": ["a person approves every deploy"]}]);
    runner
        .ready_until(
            "other-1",
            "other",
            terraform_component(&source, None),
            gate_verdict,
            PlanPhase::AwaitingApproval,
        )
        .await;
    assert_eq!(thing_input(&runner.module_dir("other")), None);
}

/// A runner whose allow-list has `acme/evil` and `acme/marked` (from the test mirror and
/// the machine's aws mirror) and whose local policies are in `DIR/policies`, holding
/// `customer-providers.rego`, allowing `acme/marked` only.
async fn start_with_providers() -> (Runner, PathBuf) {
    let runner = start_with(false, |dir| {
        let policies = dir.join("policies");
        std::fs::create_dir_all(&policies).unwrap();
        let policy = provider_policy("customer_providers", &["registry.terraform.io/acme/marked"]);
        std::fs::write(policies.join("customer-providers.rego"), policy).unwrap();
        vec![
            "--terraform-providers".into(),
            "acme/evil,acme/marked".into(),
            "--terraform-provider-mirror".into(),
            marker_mirror(dir).into(),
            "--terraform-provider-mirror".into(),
            aws_plugins().into(),
            "--policies".into(),
            policies.into(),
        ]
    })
    .await;
    let policies = runner.dir.path().join("policies");
    (runner, policies)
}

fn inline_module(main_tf: &str, drift_seconds: Option<u32>) -> Value {
    let mut desired = json!({"app": "shop", "type": "terraform_module",
                             "terraform": {"files": {"main.tf": main_tf}}});
    if let Some(seconds) = drift_seconds {
        desired["drift"] = json!({"intervalSeconds": seconds});
    }
    desired
}

fn message(plan: &Plan) -> String {
    plan.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_policies_and_the_provider_allow_list_stop_a_plan_before_terraform_init() {
    let (runner, policies) = start_with_providers().await;

    // Denied by the customer's local policy on the static configuration: Failed with
    // the policy's message, and neither `terraform init` nor the provider ran.
    let denied = runner
        .ready_until(
            "evil-1",
            "evil",
            inline_module(EVIL_MODULE, None),
            json!([]),
            PlanPhase::Failed,
        )
        .await;
    assert!(
        message(&denied).contains(
            "denied by local policy local/customer-providers: provider \
             registry.terraform.io/acme/evil is not on the customer's list"
        ),
        "{:?}",
        denied.status
    );
    let evil = runner.module_dir("evil");
    assert!(!evil.join(".terraform").exists(), "terraform init ran");
    assert_eq!(marker_lines(&evil), 0, "the provider's code ran");

    // A provider the runner's allow-list does not name: refused the same way, by name.
    let unlisted = EVIL_MODULE.replace("acme/evil", "acme/unlisted");
    let refused = runner
        .ready_until(
            "other-1",
            "other",
            inline_module(&unlisted, None),
            json!([]),
            PlanPhase::Failed,
        )
        .await;
    assert!(
        message(&refused).contains(
            "needs provider registry.terraform.io/acme/unlisted which the runner's allow-list"
        ),
        "{:?}",
        refused.status
    );
    assert!(!runner.module_dir("other").join(".terraform").exists());

    // An allowed provider the policy accepts runs end to end in the sandbox.
    let done = runner
        .ready_until(
            "marked-1",
            "marked",
            inline_module(&aws_module("acme/marked"), None),
            json!([]),
            PlanPhase::Succeeded,
        )
        .await;
    let outputs = &done.status.as_ref().unwrap().outputs;
    assert_eq!(outputs.get("partition"), Some(&json!("aws")), "{outputs:?}");
    assert!(marker_lines(&runner.module_dir("marked")) > 0);

    // The control: without the policy, the same module's provider does run (and fails
    // the Plan, being no provider), writing the marker the first Plan did not.
    std::fs::remove_file(policies.join("customer-providers.rego")).unwrap();
    let ran = runner
        .ready_until(
            "evil-2",
            "evil",
            inline_module(EVIL_MODULE, None),
            json!([]),
            PlanPhase::Failed,
        )
        .await;
    assert!(message(&ran).contains("terraform plan"), "{:?}", ran.status);
    assert!(marker_lines(&evil) > 0, "the provider ran once allowed");
}

/// The drift checks of `entity` whose static configuration a local policy denied, from
/// the runner's local audit log.
fn denied_drift_checks(state: &Path, entity: &str) -> usize {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| {
            e["type"] == "verdict"
                && e["entity"]["name"] == entity
                && e["details"]["drift"] == true
                && e["details"]["input"] == "static"
                && e["details"]["verdicts"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v["denied"] == true))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_policy_stops_a_drift_refresh_before_its_provider_runs() {
    let (runner, policies) = start_with_providers().await;
    let reports = Api::<DriftReport>::namespaced(runner.cp.client().await, "default");
    let module = runner.module_dir("marked");
    runner
        .ready_until(
            "marked-1",
            "marked",
            inline_module(&aws_module("acme/marked"), Some(1)),
            json!([]),
            PlanPhase::Succeeded,
        )
        .await;

    // Drift checks run the provider (a refresh-only plan) and report.
    let deployed = marker_lines(&module);
    eventually(
        120,
        "a drift check to run the provider and report",
        async || {
            let report = reports.get_opt("acme-marked").await.ok()??;
            (marker_lines(&module) > deployed).then_some(report)
        },
    )
    .await;

    // The customer freezes the module: the next checks are denied before they run.
    std::fs::write(
        policies.join("frozen.rego"),
        "# outpost:inputs static\npackage outpost.frozen\n\ndeny contains \"frozen by the customer\" if {\n  some p in input.providers\n  p.source == \"registry.terraform.io/acme/marked\"\n}\n",
    )
    .unwrap();
    let denied_checks = async |at_least: usize| {
        eventually(60, &format!("{at_least} denied drift checks"), async || {
            (denied_drift_checks(&runner.state, "marked") >= at_least).then_some(())
        })
        .await;
    };
    // Two more after the first, so a report of a check before the policy is delivered.
    denied_checks(3).await;
    let ran = marker_lines(&module);
    let observed = reports.get("acme-marked").await.unwrap().spec.observed_at;
    denied_checks(5).await;
    assert_eq!(
        marker_lines(&module),
        ran,
        "the provider ran during a denied check"
    );
    assert_eq!(
        reports.get("acme-marked").await.unwrap().spec.observed_at,
        observed,
        "a denied check reported an observation"
    );
}
