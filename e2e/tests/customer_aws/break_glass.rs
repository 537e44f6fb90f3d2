//! Break-glass runs only while the customer enables the role.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_glass_runs_only_while_the_customer_enables_the_role() {
    let flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    // The cluster the sandbox names (`cluster_name`): the example's sandbox only stands
    // in for it, so the customer creates it in the emulator, logs off.
    let cluster = format!("{}-eks", flow.uid);
    let (status, created) = flow.customer.eks(
        "/clusters",
        Some(&serde_json::json!({
            "name": cluster,
            "version": "1.29",
            "roleArn": format!("arn:aws:iam::{ACCOUNT}:role/{}-provision", flow.uid),
            "resourcesVpcConfig": {"subnetIds": [flow.customer.subnet]},
        })),
    );
    assert_eq!(status, 200, "CreateCluster: {created}");
    let logging = |flow: &Flow| {
        let (status, described) = flow.customer.eks(&format!("/clusters/{cluster}"), None);
        assert_eq!(status, 200, "DescribeCluster: {described}");
        described["cluster"]["logging"]["clusterLogging"].clone()
    };
    let audit_logs_on = |logging: &Value| {
        logging.as_array().is_some_and(|groups| {
            groups.iter().any(|g| {
                g["enabled"] == true
                    && g["types"]
                        .as_array()
                        .is_some_and(|t| t.contains(&"audit".into()))
            })
        })
    };
    assert!(!audit_logs_on(&logging(&flow)), "{}", logging(&flow));

    let role = format!("{}-eks-upgrade-role", flow.uid);
    let refused = format!("role {role} is disabled or not assumable in the customer account");
    // Disabled by default: the role is absent, the operator's trigger fails closed.
    let first = flow.trigger("eks-audit-logs", Some(&role)).await;
    let plan = flow.finished(&first).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some(refused.as_str()),
        "{status:?}"
    );
    assert_eq!(status.role.unwrap().name, role);
    // The maintenance role may describe the cluster, not change it: moto says 403.
    let maintenance = format!("{}-maintenance", flow.uid);
    let denied = flow.trigger("eks-audit-logs", Some(&maintenance)).await;
    let plan = flow.finished(&denied).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(status.role.unwrap().name, maintenance);
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("HTTP 403") && message.contains("eks:UpdateClusterConfig"),
        "{message}"
    );
    assert!(!audit_logs_on(&logging(&flow)));

    // The customer switches it on for the incident.
    flow.customer
        .update_parameter("EnableEksUpgradeRole", "true")
        .await;
    // moto re-evaluates the role's condition on update and creates it; it gets the
    // emulator bridges the stack's other roles got.
    let iam = flow.customer.iam();
    iam.get_role()
        .role_name(&role)
        .send()
        .await
        .expect("the stack update created the role");
    flow.customer.set_trust(&role, &flow.role_trust).await;
    flow.customer.reput_inline_policies(&role).await;
    flow.customer
        .resource_star(&role, &["secretsmanager:GetSecretValue"])
        .await;
    let second = flow.trigger("eks-audit-logs", Some(&role)).await;
    let plan = flow.finished(&second).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Succeeded), "{status:?}");
    assert_eq!(status.role.clone().unwrap().name, role);
    // The step ran as the break-glass role's session for this Plan, and the cluster's
    // configuration really changed: the customer sees the logs on.
    let log = status.log.clone().unwrap_or_default();
    assert!(
        log.contains(&format!(
            "changing the cluster as arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{}",
            plan.metadata.uid.clone().unwrap()
        )) && log.contains(&format!(
            "eks UpdateClusterConfig {cluster} (api, audit, authenticator logs on): HTTP 200"
        )),
        "{status:?}"
    );
    assert!(audit_logs_on(&logging(&flow)), "{}", logging(&flow));

    // The customer switches it off again; the next trigger fails closed.
    flow.customer
        .update_parameter("EnableEksUpgradeRole", "false")
        .await;
    // moto keeps a role whose condition the update switched off: the customer deletes
    // it as CloudFormation would.
    let names = iam
        .list_role_policies()
        .role_name(&role)
        .send()
        .await
        .unwrap();
    for name in names.policy_names() {
        iam.delete_role_policy()
            .role_name(&role)
            .policy_name(name)
            .send()
            .await
            .expect("DeleteRolePolicy");
    }
    iam.delete_role()
        .role_name(&role)
        .send()
        .await
        .expect("DeleteRole");
    let third = flow.trigger("eks-audit-logs", Some(&role)).await;
    let plan = flow.finished(&third).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some(refused.as_str()),
        "{status:?}"
    );

    // Every step is in the signed audit log with the role it used (or could not).
    let events = flow.audit_verifies().await;
    let roles = |plan: &str| Flow::role_events(&events, plan);
    assert_eq!(roles(&first).len(), 1);
    assert_eq!(roles(&first)[0]["assumable"], false);
    assert!(
        roles(&first)[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not enabled")),
        "{:?}",
        roles(&first)
    );
    let used = roles(&second);
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0]["level"], "override");
    let uid = plan_uid(&flow, &second).await;
    assert_eq!(
        used[0]["assumedRole"],
        format!("arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{uid}")
    );
    let applied = events.iter().any(|e| {
        e.spec.plan.as_deref() == Some(second.as_str()) && e.spec.type_ == AuditEventType::Apply
    });
    assert!(applied, "the break-glass run is audited");
    assert_eq!(roles(&third)[0]["assumable"], false);
    for plan in [&first, &third] {
        assert!(
            events
                .iter()
                .any(|e| e.spec.plan.as_deref() == Some(plan.as_str())
                    && e.spec.type_ == AuditEventType::Refuse),
            "the refusal of {plan} is audited"
        );
    }
}
