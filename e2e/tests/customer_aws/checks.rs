//! What the tests ask of a running [`Flow`]: its Plans, the install's phase, the audit
//! log and triggered actions.

use super::*;
use outpost_testing::job_plans::{audit_log_verifies, install_reaches};

impl Flow {
    pub(crate) async fn all_plans(&self) -> Vec<Plan> {
        self.plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items
    }

    /// Waits until the install reports `phase`; panics with every Plan's phase and
    /// moto's log if not.
    pub(crate) async fn install_reaches(&self, phase: InstallPhase, secs: u64) {
        let moto = || format!("moto:\n{}", self.customer.moto.log());
        install_reaches(&self.cp, INSTALL, phase, secs, moto).await;
    }

    /// Waits until every local audit event is shipped and `outpost audit verify` passes.
    pub(crate) async fn audit_verifies(&self) -> Vec<AuditEvent> {
        audit_log_verifies(&self.cp, INSTALL, &self.state).await;
        let events: Api<AuditEvent> = Api::namespaced(self.cp.client().await, "default");
        let mut events = events
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items;
        events.sort_by_key(|e| e.spec.sequence);
        events
    }

    /// Waits until `outpost audit verify --stack` (the customer's admin credentials)
    /// verifies the log against the key and checkpoint the runner published.
    pub(crate) async fn audit_verifies_with_stack(&self) {
        let (key, secret) = &self.customer.admin_key;
        let mut said = String::new();
        eventually(
            60,
            "the audit log to verify against the stack",
            async || {
                let output = Command::new(outpost_binary())
                    .args([
                        "audit",
                        "verify",
                        &format!("default/{INSTALL}"),
                        "--stack",
                        STACK,
                    ])
                    .args([
                        "--region",
                        REGION,
                        "--aws-endpoint",
                        &self.customer.moto.endpoint(),
                    ])
                    .arg("--kubeconfig")
                    .arg(self.cp.kubeconfig(&self.cp.admin_token))
                    .env("AWS_ACCESS_KEY_ID", key)
                    .env("AWS_SECRET_ACCESS_KEY", secret)
                    .env("AWS_EC2_METADATA_DISABLED", "true")
                    .output()
                    .expect("outpost audit verify runs");
                said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                (output.status.success() && said.contains(" events verified\n")).then_some(())
            },
        )
        .await;
        assert!(said.contains("the runner's first key"), "{said}");
    }

    /// Triggers `action` as an operator does (`outpost trigger ACTION --install I
    /// [--role R]`: the Install controller renders the Plan), with an optional runtime
    /// role override; returns the Plan's name.
    pub(crate) async fn trigger(&self, action: &str, role: Option<&str>) -> String {
        let mut args = vec!["trigger", action, "--install", INSTALL];
        if let Some(role) = role {
            args.extend(["--role", role]);
        }
        let printed = outpost(&args, &self.cp);
        printed
            .trim()
            .strip_prefix("plan/")
            .unwrap_or_else(|| panic!("outpost trigger prints the Plan: {printed}"))
            .to_owned()
    }

    /// The Plan a cron trigger of `action` makes (`outpost trigger` runs only actions
    /// with a manual trigger), with its spec rendered for the install (the example's
    /// templates: `install.id`, `sandbox.outputs.cluster_name`, `inputs.eks_version`);
    /// returns the Plan's name.
    pub(crate) async fn scheduled(&self, action: &str) -> String {
        let client = self.cp.client().await;
        let actions: Api<outpost_api::Action> = Api::namespaced(client, "default");
        let spec = serde_json::to_string(&actions.get(action).await.unwrap().spec).unwrap();
        let rendered = spec
            .replace("{{ install.id }}", &self.uid)
            .replace(
                "{{ sandbox.outputs.cluster_name }}",
                &format!("{}-eks", self.uid),
            )
            .replace("{{ inputs.eks_version }}", "1.30");
        let desired: Value = serde_json::from_str(&rendered).unwrap();
        let name = format!("{INSTALL}-cron-{action}-{:08x}", rand::random::<u32>());
        let spec = serde_json::json!({
            "install": INSTALL,
            "operation": "trigger",
            "entity": {"kind": "action", "name": action},
            "reason": "cron",
            "desiredState": desired,
            "contentHash": outpost_api::content_hash(&desired),
        });
        let plan: Plan = serde_json::from_value(serde_json::json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Plan",
            "metadata": {"name": name, "labels": {"outpost.dev/install": INSTALL}},
            "spec": spec,
        }))
        .unwrap();
        self.plans
            .create(&Default::default(), &plan)
            .await
            .expect("the trigger Plan is created");
        name
    }

    /// Plan `name` once it finished.
    pub(crate) async fn finished(&self, name: &str) -> Plan {
        eventually(120, &format!("Plan {name} to finish"), async || {
            let plan = self.plans.get(name).await.ok()?;
            phase(&plan)
                .is_some_and(PlanPhase::is_terminal)
                .then_some(plan)
        })
        .await
    }

    /// The `role` audit events of Plan `plan`.
    pub(crate) fn role_events(events: &[AuditEvent], plan: &str) -> Vec<Value> {
        events
            .iter()
            .filter(|e| {
                e.spec.plan.as_deref() == Some(plan) && e.spec.type_ == AuditEventType::Role
            })
            .filter_map(|e| e.spec.details.clone())
            .collect()
    }
}

pub(crate) async fn plan_uid(flow: &Flow, name: &str) -> String {
    flow.plans.get(name).await.unwrap().metadata.uid.unwrap()
}
