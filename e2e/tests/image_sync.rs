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
use outpost_api::{DriftReport, Install, InstallPhase, Operation, Plan, PlanPhase};
use outpost_e2e::shop::runnable_app;
use outpost_e2e::{Backend, ControlPlane, Process, Registry, eventually, on_path, runner_binary};
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
    installs: Api<Install>,
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
        self.set_input("web_tag", tag);
    }

    /// Sets the install's input `name` to `value`.
    fn set_input(&self, name: &str, value: &str) {
        self.cp.kubectl().ok(&[
            "patch",
            "install",
            INSTALL,
            "--type",
            "merge",
            "-p",
            &json!({"spec": {"inputs": {name: value}}}).to_string(),
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

/// Asserts that `registry` refuses anonymous pulls and pushes.
async fn refuses_anonymous(registry: &Registry) {
    use oci_client::client::{ClientConfig, ClientProtocol};
    use oci_client::secrets::RegistryAuth;
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let reference = registry.reference(VENDOR_REPOSITORY, "1.0");
    let pull = client
        .pull_manifest_raw(
            &reference,
            &RegistryAuth::Anonymous,
            &[oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE],
        )
        .await
        .expect_err("an anonymous pull is refused");
    assert!(
        matches!(
            pull,
            oci_client::errors::OciDistributionError::UnauthorizedError { .. }
        ),
        "{pull:?}"
    );
    let blob = b"anonymous".to_vec();
    let digest = outpost_e2e::sha256(&blob);
    client
        .push_blob(&reference, blob, &digest)
        .await
        .expect_err("an anonymous push is refused");
    assert!(!registry.has_blob(VENDOR_REPOSITORY, &digest).await);
}

/// A vendor registry with the test image at 1.0 and an install registry, each
/// requiring its user's password and refusing anonymous pulls and pushes.
async fn private_registries() -> (Registry, Registry, outpost_e2e::TestImage) {
    let vendor = Registry::start_with_htpasswd(VENDOR_USER, VENDOR_PASSWORD).await;
    let install = Registry::start_with_htpasswd(INSTALL_USER, INSTALL_PASSWORD).await;
    let image = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    refuses_anonymous(&vendor).await;
    refuses_anonymous(&install).await;
    (vendor, install, image)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_registries_are_reached_with_the_runners_secrets_which_appear_nowhere() {
    let (vendor, install, v1) = private_registries().await;
    let image = format!(
        "    sourceAuth:\n      username: {VENDOR_USER}\n      password: \"{{{{ secrets.vendor_pull_token }}}}\"\n{DESTINATION_AUTH}"
    );
    let sync = start_with(
        "1.0",
        vendor,
        install,
        Credentials {
            image: &image,
            secrets: &[
                ("vendor_pull_token", VENDOR_PASSWORD),
                ("image_registry_password", INSTALL_PASSWORD),
            ],
        },
    )
    .await;
    sync.reaches(InstallPhase::Active).await;
    let plan = sync.next_finished("web-image", &[]).await;
    assert_eq!(phase(&plan), Some(PlanPhase::Succeeded), "{plan:?}");
    let out = outputs(&plan);
    assert_eq!(out["sourceDigest"], v1.digest.as_str(), "{out}");
    assert_eq!(out["blobsCopied"], 5, "{out}");
    assert_eq!(
        sync.install
            .digest_of(INSTALL_REPOSITORY, "1.0")
            .await
            .as_deref(),
        Some(v1.digest.as_str())
    );

    // The Plans hold the references; no Plan (desired state, status, log) or audit
    // event the API serves, nor the runner's audit log, holds either credential.
    let plans =
        serde_json::to_string(&sync.plans.list(&ListParams::default()).await.unwrap().items)
            .unwrap();
    assert!(
        plans.contains("${outpost-secret:vendor_pull_token}"),
        "{plans}"
    );
    let events: Api<outpost_api::AuditEvent> = Api::namespaced(sync.cp.client().await, "default");
    let events =
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap();
    let audit = std::fs::read_to_string(sync.state.join("audit.jsonl")).unwrap();
    for secret in [VENDOR_PASSWORD, INSTALL_PASSWORD] {
        assert!(!plans.contains(secret), "a Plan holds {secret}");
        assert!(!events.contains(secret), "an AuditEvent holds {secret}");
        assert!(!audit.contains(secret), "the audit log holds {secret}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_or_with_wrong_credentials_the_sync_fails_closed() {
    let (vendor, install, v1) = private_registries().await;
    // No sourceAuth, and a wrong password for the install's registry.
    let sync = start_with(
        "1.0",
        vendor,
        install,
        Credentials {
            image: DESTINATION_AUTH,
            secrets: &[("image_registry_password", "not-the-password")],
        },
    )
    .await;
    let first = sync.next_finished("web-image", &[]).await;
    let status = first.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    let vendor_host = &sync.vendor.host;
    assert!(
        message.starts_with(&format!(
            "plan failed: cannot read {vendor_host}/{VENDOR_REPOSITORY}:1.0 from the vendor \
             registry {vendor_host} anonymously (image.sourceAuth is not set): unauthorized: "
        )),
        "{message}"
    );

    // The image now comes from an open registry: the install's refuses the wrong password.
    let open = Registry::start().await;
    open.push_test_image(VENDOR_REPOSITORY, "1.0", "1.0").await;
    sync.set_input("vendor_registry", &open.host);
    let second = sync
        .next_finished("web-image", std::slice::from_ref(&first))
        .await;
    let status = second.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    let install_host = &sync.install.host;
    assert!(
        message.starts_with(&format!(
            "plan failed: cannot read the install's registry {install_host} as \
             \"{INSTALL_USER}\" (image.destinationAuth): unauthorized: "
        )),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");

    // Nothing was copied, tagged or deployed.
    for plan in [&first, &second] {
        assert!(
            !sync.audit_of(plan).iter().any(|e| e["type"] == "outputs"),
            "{:#?}",
            sync.audit_of(plan)
        );
    }
    assert_eq!(
        sync.install.digest_of(INSTALL_REPOSITORY, "1.0").await,
        None
    );
    for blob in &v1.blobs {
        assert!(!sync.install.has_blob(INSTALL_REPOSITORY, blob).await);
    }
    assert!(sync.plans_of("web").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ecr_registry_is_reached_with_a_token_for_the_plans_role() {
    use outpost_runner::executor::image::auth::{Access, ecr_token};
    use std::collections::BTreeMap;
    let moto = outpost_e2e::Moto::start();
    let registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
    // An ECR destination without destinationAuth is reached with ECR's token.
    assert_eq!(
        Access::from_desired(None, "image.destinationAuth", registry, true).unwrap(),
        Access::Ecr
    );
    let role = BTreeMap::from(
        [
            ("AWS_ACCESS_KEY_ID", "ASIAPLANROLE"),
            ("AWS_SECRET_ACCESS_KEY", "plan-role-secret"),
            ("AWS_SESSION_TOKEN", "plan-role-session"),
            ("AWS_ENDPOINT_URL", moto.endpoint().as_str()),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let auth = ecr_token(registry, &role)
        .await
        .unwrap_or_else(|e| panic!("{e:#}: {}", moto.log()));
    // moto's token for the account: base64 of `AWS:<account>-auth-token`.
    assert_eq!(
        auth,
        oci_client::secrets::RegistryAuth::Basic(
            "AWS".to_owned(),
            "123456789012-auth-token".to_owned()
        )
    );
    // Without the Plan's role credentials there is no token, and no fallback.
    let no_role = BTreeMap::from([("AWS_ENDPOINT_URL".to_owned(), moto.endpoint())]);
    let err = ecr_token(registry, &no_role).await.unwrap_err().to_string();
    assert!(
        err.contains("the Plan has no AWS role credentials"),
        "{err}"
    );
    // A token is asked for an ECR registry only.
    let err = ecr_token("ghcr.io", &role).await.unwrap_err().to_string();
    assert!(err.contains("ghcr.io is not an ECR registry"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_credential_in_plain_text_is_refused_and_nothing_is_stored() {
    const COMPONENTS_PATH: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/components";
    const JSON: (&str, &str) = ("content-type", "application/json");
    let cp = ControlPlane::start(Backend::Embedded).await;
    let component = |password: &str| {
        json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
            "metadata": {"name": "web-image"},
            "spec": {"app": "shop", "type": "container_image", "image": {
                "repository": "ghcr.io/vendor/web", "tag": "1.0",
                "destination": "registry.acme.example/acme/web",
                "sourceAuth": {"username": VENDOR_USER, "password": password}}}})
    };
    let plain = component(VENDOR_PASSWORD).to_string();
    let path = format!("{COMPONENTS_PATH}/web-image");
    // Each actor that may write Components (admins) gets 422 naming the field, without
    // the value; the others are refused before validation. Nothing is stored.
    cp.post_refused_as_invalid(
        COMPONENTS_PATH,
        &plain,
        "spec.image.sourceAuth.password",
        VENDOR_PASSWORD,
    )
    .await;
    let install = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": INSTALL},
        "spec": {"app": "shop", "approvalMode": "prompt",
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}}});
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            "/apis/outpost.dev/v1alpha1/namespaces/default/installs",
            &[JSON],
            install.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let runner = cp.mint_runner_token(&format!("default/{INSTALL}"));
    let reply = cp
        .raw(
            Some(&runner),
            "POST",
            COMPONENTS_PATH,
            &[JSON],
            plain.clone(),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    let got = cp.raw(Some(&cp.admin_token), "GET", &path, &[], "").await;
    assert_eq!(got.status, 404, "{}", got.text);

    // A Component with a reference is stored; changing it to plain text is refused and
    // leaves the reference.
    let reference = component("{{ secrets.vendor_pull_token }}").to_string();
    let created = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            COMPONENTS_PATH,
            &[JSON],
            reference,
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let patch = json!({"spec": {"image": {"sourceAuth": {"password": VENDOR_PASSWORD}}}});
    let patched = cp
        .raw(
            Some(&cp.admin_token),
            "PATCH",
            &path,
            &[("content-type", "application/merge-patch+json")],
            patch.to_string(),
        )
        .await;
    assert_eq!(patched.status, 422, "{}", patched.text);
    assert!(!patched.text.contains(VENDOR_PASSWORD), "{}", patched.text);
    let got = cp.raw(Some(&cp.admin_token), "GET", &path, &[], "").await;
    assert_eq!(
        got.json["spec"]["image"]["sourceAuth"]["password"], "{{ secrets.vendor_pull_token }}",
        "{}",
        got.text
    );
    assert_eq!(
        got.json["metadata"]["resourceVersion"],
        created.json["metadata"]["resourceVersion"]
    );
}
