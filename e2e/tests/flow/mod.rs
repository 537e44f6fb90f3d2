//! The example app from `manifests/` end to end, every part real: the control plane
//! and controllers, `kubectl apply` of the manifests, a runner (`outpost runner`, under
//! the install's minted token) driving real terraform, bubblewrap for the migrate
//! action, and a second `outpost server --standin-cluster` as the install's cluster.
//!
//! * The install reaches Active: the sandbox and the database (inline modules of
//!   `terraform_data` resources) applied by terraform, the cache and web objects in the
//!   stand-in cluster, the migrate action run in the sandbox before web is deployed.
//! * The web image is copied from a vendor registry into the install's (two real
//!   `docker-registry` processes; the install's `vendor_registry` input and the
//!   customer's `image_registry`, given to the runner with `--customer-inputs`, point at
//!   them) and web runs the copy, by digest.
//! * A customer-local policy (the runner's `--policies DIR`) denies the plan that would
//!   replace the database, though the control plane approved it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kube_client::api::{Api, ListParams};
use outpost_api::{
    AuditEvent, AuditEventType, EntityKind, Install, InstallPhase, Operation, Plan, PlanPhase,
};
use outpost_e2e::{PushTestImage as _, TestImage};
use outpost_testing::job_plans::{audit_log_verifies, install_reaches, local_audit};
use outpost_testing::phase;
use outpost_testing::{
    Backend, ControlPlane, Kubectl, Process, Registry, eventually, example_with_registries,
    manifests, on_path,
};
use serde_json::{Value, json};

/// The install the flow drives: `globex`, whose approval mode is `approve-all`.
const INSTALL: &str = "globex";
/// Where the example's Kubernetes components go in the cluster.
const NAMESPACE: &str = "shopfront";

/// Everything one flow runs, stopped when dropped.
struct Flow {
    cp: ControlPlane,
    cluster: ControlPlane,
    _controllers: Process,
    _runner: Process,
    /// The vendor's registry, holding the shop's image.
    _vendor: Registry,
    /// The install's registry, which the image is copied into.
    registry: Registry,
    /// The image the vendor published (`acme/shopfront:1.8.2`).
    image: TestImage,
    plans: Api<Plan>,
    installs: Api<Install>,
    /// The runner's state dir (journal, audit log, terraform work dirs).
    state: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts the control plane, controllers and stand-in cluster, applies the example with
/// kubectl, and starts the install's runner under its minted token, with the customer's
/// `local_policies` (file name to Rego module) in its `--policies` directory.
async fn start(local_policies: &[(&str, String)]) -> Flow {
    let vendor = Registry::start().await;
    let registry = Registry::start().await;
    let image = vendor
        .push_test_image("acme/shopfront", "1.8.2", "1.8.2")
        .await;
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let controllers = cp.start_controllers("flow");
    let kubectl = cp.kubectl();
    let dir = tempfile::tempdir().unwrap();
    let (example, _) = example_with_registries(dir.path(), &vendor, &registry);
    kubectl.ok(&["apply", "-f", example.to_str().unwrap()]);
    eventually(60, "App shopfront to be Ready", async || {
        let ready = kubectl.ok(&[
            "get",
            "app",
            "shopfront",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
        ]);
        (ready == "True").then_some(())
    })
    .await;

    let state = dir.path().join("state");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("db_password"), "correct-horse-battery\n").unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    for (file, module) in local_policies {
        std::fs::write(policies.join(file), module).unwrap();
    }
    let token = cp.mint_runner_token(&format!("default/{INSTALL}"));
    // The token through the environment, as the install stack hands it over.
    let child = cp
        .runner(INSTALL, &token, &state)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .arg("--terraform")
        .arg(on_path("terraform"))
        .arg("--bwrap")
        .arg(on_path("bwrap"))
        .arg("--secrets-dir")
        .arg(&secrets)
        .arg("--customer-inputs")
        .arg(dir.path().join("customer-inputs.yaml"))
        .arg("--policies")
        .arg(&policies)
        .spawn()
        .expect("outpost runner starts");
    let client = cp.client().await;
    Flow {
        plans: Api::namespaced(client.clone(), "default"),
        installs: Api::namespaced(client, "default"),
        cp,
        cluster,
        _controllers: controllers,
        _runner: Process::new(child),
        _vendor: vendor,
        registry,
        image,
        state,
        _dir: dir,
    }
}

impl Flow {
    /// Waits until the install reports `phase`; panics with every Plan's phase if not.
    async fn install_reaches(&self, phase: InstallPhase, secs: u64) {
        install_reaches(&self.cp, INSTALL, phase, secs, String::new).await;
    }

    /// Every Plan of the install.
    async fn all_plans(&self) -> Vec<Plan> {
        self.plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items
    }

    /// The install's Plans of `operation` on `entity`, oldest first.
    async fn plans_of(&self, operation: Operation, entity: &str) -> Vec<Plan> {
        let mut plans: Vec<Plan> = self
            .all_plans()
            .await
            .into_iter()
            .filter(|p| p.spec.operation == operation && p.spec.entity.name == entity)
            .collect();
        plans.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        plans
    }

    /// The one Succeeded Plan of `operation` on `entity`.
    async fn succeeded(&self, operation: Operation, entity: &str) -> Plan {
        let plans = self.plans_of(operation, entity).await;
        let done: Vec<&Plan> = plans
            .iter()
            .filter(|p| phase(p) == Some(PlanPhase::Succeeded))
            .collect();
        assert_eq!(
            done.len(),
            1,
            "one succeeded {operation} of {entity}: {plans:?}"
        );
        done[0].clone()
    }

    /// The local audit log, in order.
    fn local_audit(&self) -> Vec<Value> {
        local_audit(&self.state)
    }

    /// Waits until every local audit event is shipped and `outpost audit verify` passes;
    /// returns how many events verified.
    async fn audit_verifies(&self) -> usize {
        audit_log_verifies(&self.cp, INSTALL, &self.state).await
    }

    /// `kubectl` against the stand-in cluster.
    fn cluster_kubectl(&self) -> Kubectl {
        self.cluster.kubectl()
    }
}

/// The terraform state the runner keeps for an entity's work dir (`sandbox` or
/// `component-<name>`).
fn tfstate(state: &Path, work: &str) -> Value {
    let path = outpost_e2e::work_dirs(state)
        .join(work)
        .join("module/terraform.tfstate");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} is readable: {e}", path.display()));
    serde_json::from_str(&text).expect("terraform state is JSON")
}

/// The attributes of `terraform_data.<name>` in a terraform state.
fn terraform_data(state: &Value, name: &str) -> Value {
    state["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["type"] == "terraform_data" && r["name"] == name && r["mode"] == "managed")
        .map(|r| r["instances"][0]["attributes"].clone())
        .unwrap_or_else(|| panic!("no terraform_data.{name} in the state: {state}"))
}

/// The value of env var `name` of the first container of a workload.
fn container_env(workload: &Value, name: &str) -> Value {
    workload["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null)
}

mod example;
mod policies;
