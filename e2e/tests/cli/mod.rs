//! The `outpost` CLI verbs (`status`, `deploy`, `trigger`, `approve`, `deny`, `drift`,
//! `logs`, and `kubectl outpost`) against the real `outpost server` and `outpost
//! controllers`, the example app applied, and the test playing the runner: on a
//! `prompt` install it posts a diff for approval first; it moves Ready (approve-all) and
//! Approved Plans through Applying (a first log line) to Succeeded (a second one, and
//! the outputs later components' templates need).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kube_client::api::{Api, ListParams, Patch, PatchParams, PostParams};
use outpost_api::{DriftReport, Install, Plan, PlanPhase, Runner};
use outpost_testing::{
    Backend, ControlPlane, Process, eventually, manifests, outpost_binary, phase, wait_for,
};
use serde_json::{Value, json};

/// A control plane with controllers, the example app and a simulated runner.
struct Fleet {
    cp: ControlPlane,
    kubeconfig: PathBuf,
    _controllers: Process,
    runner: tokio::task::JoinHandle<()>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.runner.abort();
    }
}

impl Fleet {
    async fn start() -> Fleet {
        let cp = ControlPlane::start(Backend::Embedded).await;
        cp.kubectl()
            .ok(&["apply", "-f", manifests().to_str().unwrap()]);
        let controllers = cp.start_controllers("cli");
        let plans = Api::<Plan>::namespaced(cp.client().await, "default");
        let runner = tokio::spawn(play_runner(plans));
        Fleet {
            kubeconfig: cp.kubeconfig(&cp.admin_token),
            cp,
            _controllers: controllers,
            runner,
        }
    }

    /// `outpost ARGS...` as the admin (through `KUBECONFIG`), as operator alice.
    fn outpost(&self, args: &[&str]) -> Ran {
        let mut command = Command::new(outpost_binary());
        command.args(args);
        self.run(command)
    }

    fn run(&self, mut command: Command) -> Ran {
        let output: Output = command
            .env("KUBECONFIG", &self.kubeconfig)
            .env("OUTPOST_USER", "alice")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("outpost runs");
        Ran {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `outpost ARGS...`, which must succeed.
    fn ok(&self, args: &[&str]) -> Ran {
        let ran = self.outpost(args);
        assert!(ran.ok, "outpost {} failed: {ran:?}", args.join(" "));
        ran
    }

    /// `outpost ARGS...`, which must fail; its standard error.
    fn fails(&self, args: &[&str]) -> String {
        let ran = self.outpost(args);
        assert!(!ran.ok, "outpost {} succeeded: {ran:?}", args.join(" "));
        ran.stderr
    }

    async fn plans(&self) -> Api<Plan> {
        Api::namespaced(self.cp.client().await, "default")
    }

    /// Waits (30 s at most) until `status -o json` shows `install` in `phase`.
    async fn wait_install(&self, install: &str, phase: &str) -> Value {
        eventually(30, &format!("{install} to get {phase}"), async || {
            let ran = self.ok(&["status", "-o", "json"]);
            let rows: Vec<Value> = serde_json::from_str(&ran.stdout).expect("status -o json");
            rows.into_iter()
                .find(|r| r["name"] == install)
                .filter(|r| r["phase"] == phase)
        })
        .await
    }

    /// The name of the first Plan of `install` that reaches `wanted` (30 s at most).
    async fn wait_plan_in(&self, install: &str, wanted: PlanPhase) -> String {
        let plans = self.plans().await;
        let selector = ListParams::default().labels(&format!("outpost.dev/install={install}"));
        eventually(
            30,
            &format!("a plan of {install} to get {wanted:?}"),
            async || {
                let listed = plans.list(&selector).await.unwrap();
                let plan = listed.items.iter().find(|p| phase(p) == Some(wanted))?;
                plan.metadata.name.clone()
            },
        )
        .await
    }
}

#[derive(Debug)]
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn outputs(plan: &Plan) -> Value {
    match (plan.spec.operation.as_str(), plan.spec.entity.name.as_str()) {
        ("provision", _) => {
            json!({"private_subnet_ids": ["subnet-a"], "cluster_name": "acme-eks"})
        }
        ("deploy", "database") => json!({"endpoint": "db.internal:5432"}),
        ("deploy", "cache") => json!({"host": "cache.internal:6379"}),
        ("deploy", "web-image") => json!({"reference": "registry.example/web@sha256:abc"}),
        _ => json!({}),
    }
}

/// Plays the runner (as the admin: the server lets operators make the runner's moves):
/// Ready → Claimed → (a `prompt` install's: AwaitingApproval with a one-resource diff →
/// Approved by a person →) Applying (log `applying NAME`) → Succeeded (log
/// `applied NAME`, outputs), one step per pass.
async fn play_runner(plans: Api<Plan>) {
    let installs: Api<Install> = Api::namespaced(plans.clone().into_client(), "default");
    loop {
        let prompt: Vec<String> = match installs.list(&ListParams::default()).await {
            Ok(listed) => listed
                .items
                .into_iter()
                .filter(|i| i.spec.approval_mode() == outpost_api::ApprovalMode::Prompt)
                .filter_map(|i| i.metadata.name)
                .collect(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        if let Ok(listed) = plans.list(&ListParams::default()).await {
            for plan in listed.items {
                let name = plan.metadata.name.clone().unwrap();
                let status = match phase(&plan)
                    .map(|p| format!("{p:?}"))
                    .as_deref()
                    .unwrap_or_default()
                {
                    "Ready" => json!({"phase": "Claimed"}),
                    "Claimed" if prompt.contains(&plan.spec.install) => {
                        let diff = outpost_api::PlanDiff::new(
                            outpost_api::content_hash(&json!({"plan": name})),
                            1,
                            0,
                            0,
                        );
                        json!({"phase": "AwaitingApproval", "diff": diff})
                    }
                    "Claimed" | "Approved" => {
                        json!({"phase": "Applying", "log": format!("applying {name}\n")})
                    }
                    "Applying" => json!({
                        "phase": "Succeeded",
                        "finishedAt": jiff::Timestamp::now().to_string(),
                        "log": format!("applying {name}\napplied {name}\n"),
                        "outputs": outputs(&plan),
                    }),
                    _ => continue,
                };
                let _ = plans
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

mod approve;
mod deploy;
mod status;
