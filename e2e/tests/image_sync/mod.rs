//! `container_image` components end to end, with real registries: two
//! `docker-registry` processes (the vendor's and the install's), the control plane and
//! controllers, the real `outpost-runner`, and a stand-in cluster for the component that
//! runs the image.
//!
//! App `shop` has a `web-image` component (a two-platform image in the vendor registry,
//! copied into the install's) and a `web` Deployment whose image is
//! `{{ components.web-image.outputs.reference }}`. Private registries are
//! `docker-registry` with htpasswd auth; the component reaches them with credentials
//! from the runner's secrets (`image.sourceAuth`, `image.destinationAuth`), and ECR's
//! token exchange runs against the AWS emulator (`moto_server`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use kube_client::api::{Api, ListParams};
use outpost_api::{DriftReport, InstallPhase, Operation, Plan, PlanPhase};
use outpost_e2e::PushTestImage as _;
use outpost_testing::job_plans::{drift_report_in_sync, install_reaches};
use outpost_testing::phase;
use outpost_testing::shop::runnable_app;
use outpost_testing::{
    Backend, ControlPlane, Process, Registry, eventually, on_path, runner_binary,
};
use serde_json::{Value, json};

const INSTALL: &str = "acme";
/// The image's repository in the vendor registry.
const VENDOR_REPOSITORY: &str = "vendor/web";
/// Its repository in the install's registry.
const INSTALL_REPOSITORY: &str = "acme/web";

/// App `shop`'s inputs: where the image comes from and goes (both the vendor's here; in
/// the example App the install registry is the customer's, `install_inputs`).
const INPUTS: &str = "  inputs:
    - name: vendor_registry
      type: string
      source: vendor
      required: true
    - name: image_registry
      type: string
      source: vendor
      required: true
    - name: web_tag
      type: string
      source: vendor
      required: true
  secrets:
    - name: vendor_pull_token
    - name: image_registry_password
";

/// The App's components.
const COMPONENTS: &str = r#"apiVersion: outpost.dev/v1alpha1
kind: Component
metadata:
  name: web-image
spec:
  app: shop
  type: container_image
  image:
    repository: "{{ inputs.vendor_registry }}/vendor/web"
    tag: "{{ inputs.web_tag }}"
    destination: "{{ inputs.image_registry }}/acme/web"
  drift:
    intervalSeconds: 30
---
apiVersion: outpost.dev/v1alpha1
kind: Component
metadata:
  name: web
spec:
  app: shop
  type: kubernetes_manifest
  dependencies:
    - web-image
  manifest:
    namespace: shop
    content: |
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: web
      spec:
        replicas: 1
        selector:
          matchLabels:
            app: web
        template:
          metadata:
            labels:
              app: web
          spec:
            containers:
              - name: web
                image: "{{ components.web-image.outputs.reference }}"
"#;

/// Everything one test runs, stopped when dropped.
struct Sync {
    cp: ControlPlane,
    cluster: ControlPlane,
    vendor: Registry,
    install: Registry,
    _controllers: Process,
    _runner: Process,
    plans: Api<Plan>,
    state: PathBuf,
    _dir: tempfile::TempDir,
}

/// How a test's component reaches the registries, and the runner's secrets.
#[derive(Default)]
struct Credentials<'a> {
    /// More lines of the component's `image` block (`sourceAuth`, `destinationAuth`),
    /// indented by four spaces.
    image: &'a str,
    /// The runner's secrets (`--secrets-dir`): names and values.
    secrets: &'a [(&'a str, &'a str)],
}

/// [`start_with`] an anonymous install registry and no credentials.
async fn start(web_tag: &str, vendor: Registry) -> Sync {
    start_with(
        web_tag,
        vendor,
        Registry::start().await,
        Credentials::default(),
    )
    .await
}

/// Starts the control plane, controllers and stand-in cluster, applies App `shop` (its
/// component reaching the registries as `credentials` say) and Install `acme` (its
/// image at `web_tag` in `vendor`, copied into `install_registry`), and starts the
/// install's runner with `credentials.secrets`.
async fn start_with(
    web_tag: &str,
    vendor: Registry,
    install_registry: Registry,
    credentials: Credentials<'_>,
) -> Sync {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let controllers = cp.start_controllers("image-sync");
    let dir = tempfile::tempdir().unwrap();
    let install = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": INSTALL},
        "spec": {"app": "shop", "approvalMode": "approve-all",
                 "inputs": {"vendor_registry": vendor.host, "image_registry": install_registry.host,
                            "web_tag": web_tag},
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}}});
    let manifest = dir.path().join("shop.yaml");
    let app = runnable_app(INPUTS);
    let components =
        COMPONENTS.replacen("  drift:\n", &format!("{}  drift:\n", credentials.image), 1);
    std::fs::write(&manifest, format!("{app}---\n{components}---\n{install}\n")).unwrap();
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    for (name, value) in credentials.secrets {
        std::fs::write(secrets.join(name), value).unwrap();
    }
    cp.kubectl()
        .ok(&["apply", "-f", manifest.to_str().unwrap()]);

    let token = cp.mint_runner_token(&format!("default/{INSTALL}"));
    let state = dir.path().join("state");
    let runner = Command::new(runner_binary())
        .args(["--server", &cp.url, "--certificate-authority"])
        .arg(&cp.tls.ca)
        .args(["--install", &format!("default/{INSTALL}"), "--state-dir"])
        .arg(&state)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .arg("--terraform")
        .arg(on_path("terraform"))
        .arg("--secrets-dir")
        .arg(&secrets)
        .args(["--heartbeat-seconds", "1"])
        .env("OUTPOST_RUNNER_TOKEN", token)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost-runner starts");
    let client = cp.client().await;
    Sync {
        plans: Api::namespaced(client, "default"),
        cp,
        cluster,
        vendor,
        install: install_registry,
        _controllers: controllers,
        _runner: Process::new(runner),
        state,
        _dir: dir,
    }
}

fn outputs(plan: &Plan) -> Value {
    json!(plan.status.clone().unwrap_or_default().outputs)
}

impl Sync {
    /// The install's Plans of `operation` on `entity`, oldest first.
    async fn plans_of(&self, entity: &str) -> Vec<Plan> {
        let mut plans: Vec<Plan> = self
            .plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.spec.operation == Operation::Deploy && p.spec.entity.name == entity)
            .collect();
        plans.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        plans
    }

    /// Waits for a finished deploy Plan of `entity` not among `seen`.
    async fn next_finished(&self, entity: &str, seen: &[Plan]) -> Plan {
        eventually(
            180,
            &format!("a new deploy of {entity} to finish"),
            async || {
                self.plans_of(entity).await.into_iter().find(|p| {
                    phase(p).is_some_and(PlanPhase::is_terminal)
                        && !seen.iter().any(|s| s.metadata.name == p.metadata.name)
                })
            },
        )
        .await
    }

    /// The digest tag `tag` of the image has in the install's registry, if any.
    async fn installed(&self, tag: &str) -> Option<String> {
        self.install.digest_of(INSTALL_REPOSITORY, tag).await
    }

    async fn reaches(&self, wanted: InstallPhase) {
        install_reaches(&self.cp, INSTALL, wanted, 180, String::new).await;
    }

    fn set_tag(&self, tag: &str) {
        self.set_input("web_tag", tag);
    }

    /// Sets the install's input `name` to `value`.
    fn set_input(&self, name: &str, value: &str) {
        self.cp.kubectl().merge_patch(
            &["install", INSTALL],
            &json!({"spec": {"inputs": {name: value}}}).to_string(),
        );
    }

    /// The web Deployment in the stand-in cluster, `None` if it is not there.
    fn web(&self) -> Option<Value> {
        let out = self.cluster.kubectl().run(&[
            "get",
            "deployment",
            "web",
            "-n",
            "shop",
            "-o",
            "json",
            "--ignore-not-found",
        ]);
        let text = out.stdout.trim();
        (!text.is_empty()).then(|| serde_json::from_str(text).expect("kubectl prints JSON"))
    }

    /// The runner's local audit log events about `plan`.
    fn audit_of(&self, plan: &Plan) -> Vec<Value> {
        let name = plan.metadata.name.clone().unwrap();
        std::fs::read_to_string(self.state.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("audit lines are JSON"))
            .filter(|e| e["plan"] == name.as_str())
            .collect()
    }
}

fn image_of(deployment: &Value) -> &str {
    deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .expect("the container has an image")
}

/// The vendor registry's user and the pull credential the vendor gave the customer.
const VENDOR_USER: &str = "vendor-robot";
const VENDOR_PASSWORD: &str = "vendor-pull-5ecret";
/// The install registry's user and password.
const INSTALL_USER: &str = "acme-sync";
const INSTALL_PASSWORD: &str = "acme-registry-pa55word";

/// The component's credentials for the install's registry: the runner's secret
/// `image_registry_password`.
const DESTINATION_AUTH: &str = "    destinationAuth:
      username: acme-sync
      password: \"{{ secrets.image_registry_password }}\"
";

mod copy;
mod credentials;
