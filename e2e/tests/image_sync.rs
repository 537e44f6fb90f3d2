//! `container_image` components end to end, with real registries: two
//! `docker-registry` processes (the vendor's and the install's), the control plane and
//! controllers, the real `outpost-runner`, and a stand-in cluster for the component that
//! runs the image.
//!
//! App `shop` has a `web-image` component (a two-platform image in the vendor registry,
//! copied into the install's) and a `web` Deployment whose image is
//! `{{ components.web-image.outputs.reference }}`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use kube_client::api::{Api, ListParams};
use outpost_api::{DriftReport, Install, InstallPhase, Operation, Plan, PlanPhase};
use outpost_e2e::shop::runnable_app;
use outpost_e2e::{Backend, ControlPlane, Process, Registry, eventually, on_path, runner_binary};
use serde_json::{Value, json};

const INSTALL: &str = "acme";
/// The image's repository in the vendor registry.
const VENDOR_REPOSITORY: &str = "vendor/web";
/// Its repository in the install's registry.
const INSTALL_REPOSITORY: &str = "acme/web";

/// App `shop`'s inputs: where the image comes from and goes.
const INPUTS: &str = "  inputs:
    - name: vendor_registry
      type: string
      source: vendor
      required: true
    - name: image_registry
      type: string
      source: customer
      required: true
    - name: web_tag
      type: string
      source: vendor
      required: true
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
    installs: Api<Install>,
    state: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts the install's registry, the control plane, controllers and stand-in cluster,
/// applies App `shop` and Install `acme` (its image at `web_tag` in `vendor`), and
/// starts the install's runner.
async fn start(web_tag: &str, vendor: Registry) -> Sync {
    let install_registry = Registry::start().await;
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
    std::fs::write(&manifest, format!("{app}---\n{COMPONENTS}---\n{install}\n")).unwrap();
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
        .args(["--heartbeat-seconds", "1"])
        .env("OUTPOST_RUNNER_TOKEN", token)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost-runner starts");
    let client = cp.client().await;
    Sync {
        plans: Api::namespaced(client.clone(), "default"),
        installs: Api::namespaced(client, "default"),
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

fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
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

    async fn install_phase(&self) -> Option<InstallPhase> {
        self.installs
            .get(INSTALL)
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase)
    }

    async fn reaches(&self, wanted: InstallPhase) {
        eventually(
            180,
            &format!("install {INSTALL} to be {wanted:?}"),
            async || (self.install_phase().await == Some(wanted)).then_some(()),
        )
        .await;
    }

    fn set_tag(&self, tag: &str) {
        self.cp.kubectl().ok(&[
            "patch",
            "install",
            INSTALL,
            "--type",
            "merge",
            "-p",
            &json!({"spec": {"inputs": {"web_tag": tag}}}).to_string(),
        ]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_copied_by_digest_and_the_dependent_runs_the_copy() {
    let vendor = Registry::start().await;
    let v1 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    let v2 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.1", "1.1")
        .await;
    let sync = start("1.0", vendor).await;
    sync.reaches(InstallPhase::Active).await;

    // The index, both platform manifests, both configs and all three layers were copied,
    // and the install's registry serves the image under the source digest.
    let first = sync.next_finished("web-image", &[]).await;
    assert_eq!(phase(&first), Some(PlanPhase::Succeeded), "{first:?}");
    let out = outputs(&first);
    let reference = format!("{}/{INSTALL_REPOSITORY}@{}", sync.install.host, v1.digest);
    assert_eq!(out["sourceDigest"], v1.digest.as_str(), "{out}");
    assert_eq!(out["destinationDigest"], v1.digest.as_str(), "{out}");
    assert_eq!(out["reference"], reference.as_str());
    assert_eq!(out["manifestsCopied"], 3, "{out}");
    assert_eq!(out["blobsCopied"], 5, "{out}");
    assert_eq!(out["blobsSkipped"], 0, "{out}");
    assert_eq!(
        sync.install
            .digest_of(INSTALL_REPOSITORY, "1.0")
            .await
            .as_deref(),
        Some(v1.digest.as_str())
    );
    for blob in &v1.blobs {
        assert!(
            sync.install.has_blob(INSTALL_REPOSITORY, blob).await,
            "{blob}"
        );
    }
    // The runner signed the digests into its audit log.
    let audited = sync.audit_of(&first);
    let outputs_event = audited
        .iter()
        .find(|e| e["type"] == "outputs")
        .unwrap_or_else(|| panic!("no outputs event: {audited:#?}"));
    assert_eq!(
        outputs_event["details"]["outputs"]["sourceDigest"],
        v1.digest.as_str()
    );
    assert_eq!(
        outputs_event["details"]["outputs"]["destinationDigest"],
        v1.digest.as_str()
    );
    // The dependent runs the copy, by digest.
    let web = sync.web().expect("web is deployed");
    assert_eq!(image_of(&web), reference);

    // Version 1.1 shares its base layer with 1.0: that blob is skipped, the rest copied.
    sync.set_tag("1.1");
    let second = sync.next_finished("web-image", &[first]).await;
    assert_eq!(phase(&second), Some(PlanPhase::Succeeded), "{second:?}");
    let out = outputs(&second);
    assert_eq!(out["sourceDigest"], v2.digest.as_str(), "{out}");
    assert_eq!(out["blobsCopied"], 4, "{out}");
    assert_eq!(out["blobsSkipped"], 1, "the shared layer: {out}");
    assert_eq!(v1.shared_layer, v2.shared_layer);
    let reference = format!("{}/{INSTALL_REPOSITORY}@{}", sync.install.host, v2.digest);
    eventually(120, "web to run 1.1's copy", async || {
        sync.web().filter(|w| image_of(w) == reference).map(drop)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vendor_registry_that_is_down_fails_the_sync_and_leaves_the_install_running() {
    let vendor = Registry::start().await;
    let v1 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    vendor
        .push_test_image(VENDOR_REPOSITORY, "1.1", "1.1")
        .await;
    let mut sync = start("1.0", vendor).await;
    sync.reaches(InstallPhase::Active).await;
    let first = sync.next_finished("web-image", &[]).await;
    let web_plans = sync.plans_of("web").await;
    let before = sync.web().expect("web is deployed");

    sync.vendor.stop();
    sync.set_tag("1.1");
    let failed = sync.next_finished("web-image", &[first]).await;
    let status = failed.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "cannot read {}/{VENDOR_REPOSITORY}:1.1 from the vendor registry",
            sync.vendor.host
        )),
        "{message}"
    );
    sync.reaches(InstallPhase::Degraded).await;
    // Nothing was applied: no outputs of the failed sync, no new deploy of web, and the
    // running Deployment still runs 1.0's copy, unchanged.
    assert!(
        !sync
            .audit_of(&failed)
            .iter()
            .any(|e| e["type"] == "outputs"),
        "{:#?}",
        sync.audit_of(&failed)
    );
    assert_eq!(sync.plans_of("web").await.len(), web_plans.len());
    let after = sync.web().expect("web is still deployed");
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        image_of(&after),
        format!("{}/{INSTALL_REPOSITORY}@{}", sync.install.host, v1.digest)
    );
    assert_eq!(
        sync.install.digest_of(INSTALL_REPOSITORY, "1.1").await,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_mismatch_fails_the_sync() {
    let vendor = Registry::start().await;
    let v1 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    let v2 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.1", "1.1")
        .await;
    // The component pins 1.0 to 1.1's digest: the tag resolves to something else.
    let pinned = format!("1.0@{}", v2.digest);
    let sync = start(&pinned, vendor).await;
    let first = sync.next_finished("web-image", &[]).await;
    let status = first.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            format!(
                "plan failed: digest mismatch: {}/{VENDOR_REPOSITORY}:{pinned} resolves to {}, \
                 not the pinned {}",
                sync.vendor.host, v1.digest, v2.digest
            )
            .as_str()
        )
    );

    // The registry serves corrupted bytes for the layer both versions share: the bytes
    // fetched do not hash to the digest the manifest promised.
    let file = sync.vendor.blob_file(&v1.shared_layer);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[600] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    sync.set_tag("1.0");
    let second = sync.next_finished("web-image", &[first]).await;
    let status = second.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "digest mismatch: cannot copy blob {}",
            v1.shared_layer
        )),
        "{message}"
    );
    // Neither attempt deployed web or tagged anything in the install's registry.
    assert!(sync.plans_of("web").await.is_empty());
    assert!(sync.web().is_none());
    assert_eq!(
        sync.install.digest_of(INSTALL_REPOSITORY, "1.0").await,
        None
    );
    assert!(
        !sync
            .install
            .has_blob(INSTALL_REPOSITORY, &v1.shared_layer)
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_moved_in_the_install_registry_is_drift() {
    let vendor = Registry::start().await;
    let v1 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    let sync = start("1.0", vendor).await;
    sync.reaches(InstallPhase::Active).await;
    let reports: Api<DriftReport> = Api::namespaced(sync.cp.client().await, "default");
    let report = format!("{INSTALL}-web-image");
    eventually(60, "a first, in-sync report", async || {
        reports
            .get_opt(&report)
            .await
            .ok()??
            .spec
            .in_sync
            .then_some(())
    })
    .await;

    // Someone points the install registry's 1.0 at another image.
    let other = sync
        .install
        .push_test_image(INSTALL_REPOSITORY, "1.0", "other")
        .await;
    assert_ne!(other.digest, v1.digest);
    // Observed on the component's schedule (30 s).
    let drifted = eventually(90, "a DriftReport naming the digest", async || {
        let found = reports.get_opt(&report).await.ok()??;
        found
            .spec
            .diff
            .iter()
            .any(|d| d.path.ends_with("digest") && d.live == Some(json!(other.digest)))
            .then_some(found)
    })
    .await;
    assert!(!drifted.spec.in_sync);
    let entry = drifted
        .spec
        .diff
        .iter()
        .find(|d| d.path.ends_with("digest"))
        .unwrap();
    assert_eq!(entry.desired, Some(json!(v1.digest)), "{entry:?}");
}
