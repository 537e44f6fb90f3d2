//! Terraform state lives in the customer's bucket.

use super::*;

/// Terraform state lives in the customer's bucket, not on the runner's disk: once the
/// install is Active the bucket holds one versioned state object per terraform entity
/// (whose lock files were taken and released), and the runner's own role cannot read
/// them. The runner is killed, its state dir and work dirs wiped and a new runner started from the
/// same user data: the next Plan of every terraform entity (the `database` component,
/// the sandbox) finds the state in the bucket and reports no changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_state_dir_is_wiped_finds_terraform_state_in_the_bucket() {
    let mut flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    let bucket = flow.launch.state_bucket.clone();
    let keys = [
        "sandbox/terraform.tfstate",
        "components/database/terraform.tfstate",
    ];

    // The bucket is versioned and holds the two state objects and nothing else: the
    // lock files terraform took are deleted (delete markers of `.tflock` keys remain).
    let customer = &flow.customer;
    let (_, versioning) = customer.s3("GET", &format!("/{bucket}?versioning="), None);
    assert!(
        versioning.contains("<Status>Enabled</Status>"),
        "{versioning}"
    );
    let (code, listed) = customer.s3("GET", &format!("/{bucket}?list-type=2"), None);
    assert_eq!(code, 200, "{listed}");
    let current: Vec<&str> = listed
        .split("<Key>")
        .skip(1)
        .map(|rest| &rest[..rest.find("</Key>").unwrap()])
        .collect();
    assert_eq!(current.len(), 2, "{listed}");
    for key in keys {
        assert!(current.contains(&key), "{key} in {listed}");
    }
    let (_, versions) = customer.s3("GET", &format!("/{bucket}?versions="), None);
    for key in keys {
        assert!(
            versions.contains(&format!("<Key>{key}.tflock</Key>")),
            "{key} was locked: {versions}"
        );
    }
    let (code, state) = customer.s3("GET", &format!("/{bucket}/{}", keys[1]), None);
    assert_eq!(code, 200, "{state}");
    let state: Value = serde_json::from_str(&state).expect("the state object is JSON");
    assert_eq!(
        state["resources"][0]["type"], "terraform_data",
        "the database's state: {state}"
    );
    // Nothing of it on the runner's disk.
    let local =
        outpost_e2e::work_dirs(&flow.state).join("component-database/module/terraform.tfstate");
    assert!(!local.exists(), "{} exists", local.display());
    // The runner's own credentials (its instance role) cannot read the state: only the
    // install's lifecycle roles may (the emulator enforces the roles' identity policies;
    // the bucket policy denying every other principal is checked on the template).
    let (key, secret, token) = &flow.launch.credentials;
    let (code, answer) = customer.s3_as(
        (key.as_str(), secret.as_str(), Some(token.as_str())),
        "GET",
        &format!("/{bucket}/{}", keys[1]),
        None,
    );
    assert_eq!(code, 403, "the runner role read the state: {answer}");

    // The VM is lost: the runner is killed and its state dir wiped. A new one boots from
    // the same user data (it reads its token again, as a new VM's runner would).
    flow.runner.kill();
    std::fs::remove_dir_all(&flow.state).expect("the state dir is wiped");
    std::fs::remove_dir_all(outpost_e2e::work_dirs(&flow.state)).expect("the work dirs too");
    flow.customer
        .resource_star(
            &flow.runner_role,
            &[
                "cloudformation:DescribeStacks",
                "secretsmanager:GetSecretValue",
            ],
        )
        .await;
    flow.runner = Process::new(flow.launch.spawn());

    // The next Plan of the database component and of the sandbox: no changes.
    let printed = outpost(&["deploy", "database", "--install", INSTALL], &flow.cp);
    let deploy = printed
        .trim()
        .strip_prefix("plan/")
        .unwrap_or_else(|| panic!("outpost deploy prints the Plan: {printed}"))
        .to_owned();
    let provision = flow
        .all_plans()
        .await
        .into_iter()
        .find(|p| p.spec.entity.kind == outpost_api::EntityKind::Sandbox)
        .expect("the sandbox was provisioned");
    let mut spec = provision.spec.clone();
    spec.operation = Operation::Reprovision;
    spec.reason = Some("manual: after the runner's state dir was wiped".into());
    let reprovision = format!("{INSTALL}-reprovision-wiped");
    let plan: Plan = serde_json::from_value(serde_json::json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {"name": reprovision, "labels": {"outpost.dev/install": INSTALL}},
        "spec": spec,
    }))
    .unwrap();
    flow.plans
        .create(&Default::default(), &plan)
        .await
        .expect("the reprovision Plan is created");
    for name in [&deploy, &reprovision] {
        let plan = flow.finished(name).await;
        let status = plan.status.clone().unwrap_or_default();
        assert_eq!(
            phase(&plan),
            Some(PlanPhase::Succeeded),
            "{name}: {status:?}"
        );
        assert_eq!(
            status.reason.as_deref(),
            Some("NoChanges"),
            "{name} found the state: {status:?}"
        );
        assert_eq!(status.claimed_by.as_deref(), Some(INSTALL));
    }
    // Still the bucket's state, not a new one on the new runner's disk.
    assert!(!local.exists(), "{} exists", local.display());
}
