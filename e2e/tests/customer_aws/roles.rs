//! Every Plan runs under its resolved role in the customer's account; a revoked role
//! fails closed.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_runs_each_plan_under_its_role_in_the_customer_account() {
    let flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;

    // Every Plan ran under its resolved role, assumed for it alone: the signed audit
    // log names the assumed-role identity, whose session is the Plan's uid.
    let events = flow.audit_verifies().await;
    // The runner booted from the stack's user data published its key and checkpoints
    // into the stack's SSM parameters: the customer verifies against them.
    flow.audit_verifies_with_stack().await;
    let plans = flow.all_plans().await;
    assert!(plans.len() >= 5, "{plans:?}");
    for plan in &plans {
        let name = plan.metadata.name.clone().unwrap();
        assert_eq!(
            phase(plan),
            Some(PlanPhase::Succeeded),
            "{name}: {:?}",
            plan.status
        );
        let role = plan.status.clone().unwrap().role.unwrap().name;
        let roles = Flow::role_events(&events, &name);
        assert_eq!(roles.len(), 1, "one role event of {name}: {roles:?}");
        assert_eq!(
            roles[0]["assumedRole"],
            format!(
                "arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{}",
                plan.metadata.uid.clone().unwrap()
            ),
            "{name}"
        );
        assert_eq!(
            roles[0]["roleArn"],
            format!("arn:aws:iam::{ACCOUNT}:role/{role}")
        );
        let text = roles[0].to_string();
        assert!(
            !text.contains("ASIA") && !text.contains("SecretAccessKey"),
            "no credentials in the audit log: {text}"
        );
    }
    // The database is deployed with the provision role (matrix rule), web with the
    // maintenance role (default).
    let role_of = |entity: &str| {
        plans
            .iter()
            .find(|p| p.spec.entity.name == entity && p.spec.operation == Operation::Deploy)
            .and_then(|p| p.status.clone()?.role)
            .map(|r| r.name)
            .unwrap_or_default()
    };
    assert_eq!(role_of("database"), format!("{}-provision", flow.uid));
    assert_eq!(role_of("web"), format!("{}-maintenance", flow.uid));

    // The migrate action got the database password from the customer's Secrets Manager.
    let migrate = plans
        .iter()
        .find(|p| p.spec.entity.name == "migrate")
        .expect("a migrate Plan");
    assert_eq!(
        migrate.status.clone().unwrap().outputs["steps"][0]["exitCode"],
        0,
        "{:?}",
        migrate.status
    );

    // The enabled roles of the stack are reported on the Runner and the InstallStack.
    let client = flow.cp.client().await;
    let enabled: Vec<String> = ["deprovision", "maintenance", "provision"]
        .iter()
        .map(|r| format!("{}-{r}", flow.uid))
        .collect();
    let runners: Api<Runner> = Api::namespaced(client.clone(), "default");
    let stacks: Api<InstallStack> = Api::namespaced(client, "default");
    eventually(30, "the enabled roles to be reported", async || {
        let runner = runners.get(INSTALL).await.ok()?.status?.enabled_roles;
        let stack = stacks.get(INSTALL).await.ok()?.status?.enabled_roles;
        (runner == enabled && stack == enabled).then_some(())
    })
    .await;
    let table = flow.cp.kubectl().ok(&["get", "installstacks"]);
    assert!(
        table.contains("ENABLED ROLES") && table.contains(&enabled[0]),
        "{table}"
    );

    // A maintenance action whose role lacks a permission: backup-check may describe
    // snapshots but not take one, and the emulator says so with a 403.
    let name = flow.scheduled("backup-check").await;
    let plan = flow.finished(&name).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(
        status.role.clone().unwrap().name,
        format!("{}-maintenance", flow.uid)
    );
    assert_eq!(phase(&plan), Some(PlanPhase::Failed), "{status:?}");
    // A failed step's last output is in the Plan's message.
    let log = status.message.clone().unwrap_or_default();
    assert!(
        log.starts_with("apply failed: step check failed with exit code 1")
            && log.contains("rds DescribeDBSnapshots: HTTP 200")
            && log.contains("rds CreateDBSnapshot: HTTP 403")
            && log.contains("<Code>AccessDenied</Code>")
            && log.contains(&format!(
                "assumed-role/{}-maintenance/{}",
                flow.uid,
                plan.metadata.uid.clone().unwrap()
            ))
            && log.contains("rds:CreateDBSnapshot"),
        "the step got the emulator's 403 under the maintenance role: {log}\n{:?}",
        plan.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_the_customer_revokes_fails_the_plan_closed_until_restored() {
    let flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    let maintenance = format!("{}-maintenance", flow.uid);

    // The customer revokes the maintenance role's trust of the runner.
    let trusted = flow.customer.trust(&maintenance).await;
    let mut revoked = trusted.clone();
    revoked["Statement"][0]["Principal"]["AWS"] =
        serde_json::json!(format!("arn:aws:iam::{ACCOUNT}:root"));
    flow.customer.set_trust(&maintenance, &revoked).await;

    // The next deploy of web (maintenance role) fails closed.
    let before: Vec<String> = flow
        .all_plans()
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    flow.cp.kubectl().merge_patch(
        &["install", INSTALL],
        r#"{"spec":{"inputs":{"domain":"shop.globex.example"}}}"#,
    );
    let failed = eventually(120, "a new maintenance Plan to fail", async || {
        flow.all_plans().await.into_iter().find(|p| {
            !before.contains(p.metadata.name.as_ref().unwrap())
                && phase(p) == Some(PlanPhase::Failed)
        })
    })
    .await;
    let status = failed.status.clone().unwrap();
    assert_eq!(status.role.clone().unwrap().name, maintenance);
    assert_eq!(
        status.message.as_deref(),
        Some(
            format!("role {maintenance} is disabled or not assumable in the customer account")
                .as_str()
        ),
        "{status:?}"
    );
    // Nothing ran: no plan or apply of it, and the refusal names the role.
    let name = failed.metadata.name.clone().unwrap();
    let events = flow.audit_verifies().await;
    let of_plan: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.spec.plan.as_deref() == Some(name.as_str()))
        .collect();
    assert!(
        of_plan
            .iter()
            .all(|e| !matches!(e.spec.type_, AuditEventType::Plan | AuditEventType::Apply)),
        "{of_plan:?}"
    );
    let roles = Flow::role_events(&events, &name);
    assert_eq!(roles.len(), 1, "{roles:?}");
    assert_eq!(roles[0]["assumable"], false);
    assert!(
        roles[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("does not trust")),
        "{roles:?}"
    );

    // The customer restores the trust; the operator retries the Plan (deleting it lets
    // the controller make it again) and it succeeds.
    flow.customer.set_trust(&maintenance, &trusted).await;
    flow.plans
        .delete(&name, &DeleteParams::default())
        .await
        .expect("the failed Plan can be deleted");
    let entity = failed.spec.entity.name.clone();
    let operation = failed.spec.operation;
    eventually(180, "the retried Plan to succeed", async || {
        flow.all_plans().await.into_iter().find(|p| {
            p.spec.entity.name == entity
                && p.spec.operation == operation
                && !before.contains(p.metadata.name.as_ref().unwrap())
                && phase(p) == Some(PlanPhase::Succeeded)
        })
    })
    .await;
    flow.install_reaches(InstallPhase::Active, 300).await;
}
