//! The Plan lifecycle with the real runner (`outpost runner`, real terraform, a stand-in
//! cluster): plan first, show the real diff, a person approves that diff, the runner
//! applies exactly it.
//!
//! * terraform on a `prompt` install: the Plan stops at `AwaitingApproval` with the diff
//!   (`1 to add, 0 to change, 0 to destroy`, the resource's address) and nothing in the
//!   state; approving applies the saved plan. A deploy that changes nothing ends
//!   `Succeeded` with reason `NoChanges` without asking. A change of the state between
//!   planning and approval (an out-of-band `terraform apply`) makes the saved plan stale:
//!   the runner plans again and asks again (`Replanned`, a new diff hash) instead of
//!   applying; the second approval applies.
//! * Kubernetes: the diff shows `Deployment/shop/web spec.replicas 2 → 3`; an
//!   out-of-band edit of the Deployment before the approval makes the runner ask again.
//! * An `approve`-enforced vendor policy (on the diff) or gate verdict makes a Plan of an
//!   `approve-all` install wait for a person.
//! * The customer's hold on vendor code ([`outpost_testing::providers`] has providers that
//!   leave a marker when they run): a local policy on the `static` input denies a module
//!   using a provider not on the customer's list, and a provider not on the runner's
//!   `--terraform-providers` is refused: both Plans end `Failed` with the reason before
//!   `terraform init` (no `.terraform`, no marker); an allowed provider plans and applies
//!   in the sandbox; without the policy the same module's provider does run. A policy
//!   added after a deploy stops its drift checks' refresh-only plans before the provider
//!   runs (audited `verdict` events, no new report).
//!
//! Plans are made `Ready` by the test (as the gate would pass them), so each test runs
//! the runner alone.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{ChangeAction, DriftReport, Install, Plan, PlanPhase};
use outpost_testing::approve::approve;
use outpost_testing::browser::Browser;
use outpost_testing::job_plans::{
    INSTALL, install_with_token, pending_plan, ready_plan, runner_command,
};
use outpost_testing::providers::{
    EVIL_MODULE, aws_module, aws_plugins, marker_lines, marker_mirror, provider_policy,
};
use outpost_testing::{Backend, ControlPlane, Process, eventually, on_path};
use serde_json::{Value, json};

/// The control plane, the install's real runner, and where its state is.
struct Runner {
    cp: ControlPlane,
    cluster: Option<ControlPlane>,
    plans: Api<Plan>,
    state: PathBuf,
    _runner: Process,
    dir: tempfile::TempDir,
}

async fn start(with_cluster: bool) -> Runner {
    start_with(with_cluster, |_| Vec::new()).await
}

/// Starts the runner with more arguments, made from the test's temporary directory.
async fn start_with(with_cluster: bool, args: impl FnOnce(&Path) -> Vec<OsString>) -> Runner {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = match with_cluster {
        true => Some(ControlPlane::start_standin_cluster().await),
        false => None,
    };
    let token = install_with_token(&cp).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut command = runner_command(&cp.url, &cp.tls.ca, &token, &state);
    command
        .args(args(dir.path()))
        .arg("--terraform")
        .arg(on_path("terraform"))
        // The module directory `module` lays out; the runner accepts no other.
        .arg("--module-root")
        .arg(dir.path().join("module-src"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(cluster) = &cluster {
        command
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig(&cluster.admin_token));
    }
    let runner = Process::new(command.spawn().expect("outpost runner starts"));
    Runner {
        plans: Api::namespaced(cp.client().await, "default"),
        cp,
        cluster,
        state,
        _runner: runner,
        dir,
    }
}

impl Runner {
    async fn approval_mode(&self, mode: &str) {
        Api::<Install>::namespaced(self.cp.client().await, "default")
            .patch(
                INSTALL,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"approvalMode": mode}})),
            )
            .await
            .unwrap();
    }

    /// Creates Plan `name` deploying component `entity` with `desired`, and passes it
    /// as the gate would: `Ready`, its role, and `verdicts`.
    async fn ready(&self, name: &str, entity: &str, desired: Value, verdicts: Value) {
        ready_plan(&self.plans, INSTALL, name, entity, desired, verdicts).await;
    }

    /// [`Self::ready`], then Plan `name` once it is in `phase` ([`Self::reaches`]).
    async fn ready_until(
        &self,
        name: &str,
        entity: &str,
        desired: Value,
        verdicts: Value,
        phase: PlanPhase,
    ) -> Plan {
        self.ready(name, entity, desired, verdicts).await;
        self.reaches(name, phase, |_| true).await
    }

    /// Creates Plan `name` for component `entity` and leaves it `Pending` (no gate runs
    /// in these tests, so the runner never sees it).
    async fn pending(&self, name: &str, entity: &str, desired: Value) {
        pending_plan(&self.plans, INSTALL, name, entity, desired).await;
    }

    /// Plan `name` once it is in `phase` and `check` holds (120 s at most); a Plan that
    /// ends elsewhere fails the test at once.
    async fn reaches(&self, name: &str, phase: PlanPhase, check: impl Fn(&Plan) -> bool) -> Plan {
        eventually(120, &format!("plan {name} to be {phase:?}"), async || {
            let plan = self.plans.get(name).await.ok()?;
            let now = plan.status.as_ref().and_then(|s| s.phase);
            if now != Some(phase) && now.is_some_and(PlanPhase::is_terminal) {
                panic!("plan {name} ended {now:?}: {:?}", plan.status);
            }
            (now == Some(phase) && check(&plan)).then_some(plan)
        })
        .await
    }

    fn module_dir(&self, entity: &str) -> PathBuf {
        outpost_e2e::work_dirs(&self.state).join(format!("component-{entity}/module"))
    }
}

fn diff(plan: &Plan) -> outpost_api::PlanDiff {
    plan.status
        .as_ref()
        .and_then(|s| s.diff.clone())
        .expect("the Plan shows its diff")
}

fn reason(plan: &Plan) -> Option<String> {
    plan.status.as_ref().and_then(|s| s.reason.clone())
}

/// A module with one `terraform_data` resource whose input is variable `note`.
fn module(dir: &Path) -> PathBuf {
    let module = dir.join("module-src");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("main.tf"),
        "variable \"note\" {\n  default = \"one\"\n}\n\nresource \"terraform_data\" \"thing\" {\n  input = var.note\n}\n",
    )
    .unwrap();
    module
}

fn terraform_component(module: &Path, note: Option<&str>) -> Value {
    let mut terraform = json!({"source": module.display().to_string()});
    if let Some(note) = note {
        terraform["variables"] = json!({"note": note});
    }
    json!({"app": "shop", "type": "terraform_module", "terraform": terraform})
}

/// The `input` of `terraform_data.thing` in the state, if it exists.
fn thing_input(module_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(module_dir.join("terraform.tfstate")).ok()?;
    let state: Value = serde_json::from_str(&text).ok()?;
    let resource = state["resources"]
        .as_array()?
        .iter()
        .find(|r| r["type"] == "terraform_data" && r["name"] == "thing")?;
    // A dynamic attribute: `{"value": ..., "type": ...}` in the state.
    let input = &resource["instances"][0]["attributes"]["input"];
    input
        .get("value")
        .unwrap_or(input)
        .as_str()
        .map(str::to_owned)
}

fn state_serial(module_dir: &Path) -> u64 {
    let text = std::fs::read_to_string(module_dir.join("terraform.tfstate")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["serial"]
        .as_u64()
        .unwrap()
}

mod kubernetes;
mod policies;
mod terraform;
