//! Local policies denying what the control plane approved; the vendor's policies on the real diff.

use super::*;

/// The block scalar `module: |` of a Policy manifest, dedented: the Rego module.
fn policy_module(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|l| l.trim_end() != "  module: |");
    lines.next().expect("the manifest has `module: |`");
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.get(4..).unwrap_or(""))
        .collect();
    body.join("\n").trim_end().to_owned() + "\n"
}

/// Once the install is Active, asks for a new database name, which forces a new
/// instance (`triggers_replace`); returns the database stand-in's state before, and the
/// database's new deploy Plan once it finished.
async fn replace_database(flow: &Flow) -> (Value, Plan) {
    flow.install_reaches(InstallPhase::Active, 300).await;
    let before = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    let first = flow.succeeded(Operation::Deploy, "database").await;

    // A new database name forces a new instance (`triggers_replace`).
    flow.cp.kubectl().merge_patch(
        &["install", INSTALL],
        r#"{"spec":{"inputs":{"db_name":"shop_v2"}}}"#,
    );
    let replan = eventually(
        120,
        "the database's new deploy Plan to finish",
        async || {
            flow.plans_of(Operation::Deploy, "database")
                .await
                .into_iter()
                .find(|p| {
                    p.metadata.name != first.metadata.name
                        && phase(p).is_some_and(PlanPhase::is_terminal)
                })
        },
    )
    .await;
    (before, replan)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_policy_denies_replacing_the_database_the_control_plane_approved() {
    // The customer keeps the example's no-database-recreate policy in the runner's
    // local configuration: the vendor cannot switch it off.
    let manifest =
        std::fs::read_to_string(manifests().join("policies/no-database-recreate.yaml")).unwrap();
    let module = format!("# outpost:inputs terraform\n{}", policy_module(&manifest));
    let flow = start(&[("no-database-recreate.rego", module)]).await;
    let (before, replan) = replace_database(&flow).await;
    let name = replan.metadata.name.clone().unwrap();
    let status = replan.status.clone().unwrap();

    // The control plane passed it to the runner (approve-all: no person asked; no vendor
    // policy denied) ...
    assert!(
        status.role.is_some() && status.approval.is_none(),
        "the control plane passed {name}: {status:?}"
    );
    assert!(
        status.verdicts.iter().all(|v| !v.denied),
        "no control-plane verdict denied it: {:?}",
        status.verdicts
    );
    // ... and the runner's local policy denied the real diff: the Plan failed with the
    // policy's message, nothing was applied.
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "denied by local policy local/no-database-recreate: terraform_data.database \
             would be replaced (delete and create); database data would be lost"
        )
    );
    let after = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    assert_eq!(after, before, "the database stand-in was not replaced");
    assert_eq!(after["input"]["value"]["db_name"], "shop");
    flow.install_reaches(InstallPhase::Degraded, 30).await;

    // The audit log records the local deny and the refusal, and verifies.
    flow.audit_verifies().await;
    let events: Api<AuditEvent> = Api::namespaced(flow.cp.client().await, "default");
    let of_plan: Vec<AuditEvent> = events
        .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.spec.plan.as_deref() == Some(name.as_str()))
        .collect();
    let details = |type_: AuditEventType| -> Vec<Value> {
        of_plan
            .iter()
            .filter(|e| e.spec.type_ == type_)
            .filter_map(|e| e.spec.details.clone())
            .collect()
    };
    let verdicts = details(AuditEventType::Verdict);
    assert!(
        verdicts.iter().any(|d| d["local"] == true
            && d["verdicts"].as_array().is_some_and(|vs| vs
                .iter()
                .any(|v| { v["policy"] == "local/no-database-recreate" && v["denied"] == true }))),
        "a local deny verdict is audited: {verdicts:#?}"
    );
    let refusals = details(AuditEventType::Refuse);
    assert!(
        refusals
            .iter()
            .any(|d| d["failed"].as_str() == status.message.as_deref()),
        "the refusal is audited: {refusals:#?}"
    );
    assert!(
        details(AuditEventType::Apply).is_empty(),
        "no apply of {name} was audited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vendors_policies_are_evaluated_on_the_real_diff_too() {
    // The vendor's own no-database-recreate Policy: at the gate it has no terraform plan
    // to look at (the desired state holds none); the runner evaluates it on the plan
    // terraform computed against live state.
    let flow = start(&[]).await;
    flow.cp.kubectl().ok(&[
        "apply",
        "-f",
        manifests()
            .join("policies/no-database-recreate.yaml")
            .to_str()
            .unwrap(),
    ]);
    let (before, replan) = replace_database(&flow).await;
    let status = replan.status.clone().unwrap();
    assert!(
        status.verdicts.iter().all(|v| !v.denied),
        "no verdict at the gate denied it: {:?}",
        status.verdicts
    );
    assert!(status.role.is_some(), "passed by the gate: {status:?}");
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "denied by vendor policy on the real diff no-database-recreate: \
             terraform_data.database would be replaced (delete and create); database data \
             would be lost"
        )
    );
    let after = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    assert_eq!(after, before, "the database stand-in was not replaced");
    flow.audit_verifies().await;
}
