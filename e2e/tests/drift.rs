//! Drift, end to end with real processes: the control plane (`outpost server`) with
//! `outpost controllers`, a stand-in cluster (`outpost server --standin-cluster`), and
//! `outpost runner` with a minted runner token, `--kubeconfig` to the stand-in, real
//! terraform for the sandbox and a local drift policy. An App with one
//! `kubernetes_manifest` component (a Deployment) is installed; then `kubectl edit`
//! changes the Deployment behind the runner's back.
//!
//! * remediation `report`: a DriftReport naming `spec.replicas` appears (the latency
//!   from the edit is printed against the 5 s goal), with the verdicts of the local and
//!   the vendor policy that take the `drift` input; the Install status shows the
//!   component drifted; the object stays edited; after a kill -9 and restart the runner
//!   still detects (its baseline is in the state dir); undoing the edit brings the
//!   report back in sync. The App's secret is also the Secret the Deployment reads
//!   (written by the runner from `--secrets-dir`): changing its value out of band is not
//!   drift, and no report holds a value.
//! * remediation `auto`: the control plane makes a `deploy` Plan with reason `drift`, it
//!   succeeds, and the Deployment is restored in the stand-in.

use std::path::Path;
use std::time::{Duration, Instant};

use kube_client::api::{Api, ListParams};
use outpost_api::{
    AuditEvent, AuditEventType, DriftReport, DriftState, Install, InstallPhase, Plan, PlanPhase,
};
use outpost_testing::job_plans::{drift_report_in_sync, install_reaches};
use outpost_testing::{Backend, ControlPlane, Process, eventually};

const INSTALL: &str = "acme";
const REPORT: &str = "acme-web";

/// The test App, its component and install (`approve-all`), and a vendor policy on drift.
fn objects(sandbox: &Path, component_drift: &str) -> String {
    format!(
        r#"{app}---
apiVersion: outpost.dev/v1alpha1
kind: Install
metadata:
  name: {INSTALL}
spec:
  app: drift-app
  approvalMode: approve-all
  cloud:
    provider: aws
    accountId: "111122223333"
    region: eu-west-1
"#,
        app = drift_app(sandbox, true, component_drift)
    )
}

/// App `drift-app` (three lifecycle roles, the terraform sandbox at `sandbox`), its
/// component `web` (a Deployment of two nginx replicas in namespace `shop`) and the
/// vendor policy `replicas-pinned` that warns when web's replicas drift. With
/// `password`, the App declares secret `db_password` (the Secret `shop/database`) and
/// web reads it. `component_drift` is a line of web's spec (`drift: ...`) or empty.
pub(crate) fn drift_app(sandbox: &Path, password: bool, component_drift: &str) -> String {
    let secrets = if password {
        "  secrets:
    - name: db_password
      kubernetesSecret:
        namespace: shop
        name: database
        key: password
"
    } else {
        ""
    };
    let env = if password {
        "                env:
                  - name: DATABASE_PASSWORD
                    valueFrom:
                      secretKeyRef:
                        name: database
                        key: password
"
    } else {
        ""
    };
    format!(
        r#"apiVersion: outpost.dev/v1alpha1
kind: App
metadata:
  name: drift-app
spec:
{secrets}  permissions:
    roles:
      - name: drift-provision
        type: provision
      - name: drift-maintenance
        type: maintenance
      - name: drift-deprovision
        type: deprovision
  sandbox:
    type: terraform_module
    source: {sandbox}
---
apiVersion: outpost.dev/v1alpha1
kind: Component
metadata:
  name: web
spec:
  app: drift-app
  type: kubernetes_manifest
  {component_drift}
  manifest:
    namespace: shop
    content: |
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: web
        labels:
          app.kubernetes.io/name: web
      spec:
        replicas: 2
        selector:
          matchLabels:
            app.kubernetes.io/name: web
        template:
          metadata:
            labels:
              app.kubernetes.io/name: web
          spec:
            containers:
              - name: web
                image: nginx:1.27
{env}---
apiVersion: outpost.dev/v1alpha1
kind: Policy
metadata:
  name: replicas-pinned
spec:
  app: drift-app
  inputs:
    - drift
  enforcement: warn
  module: |
    package outpost.replicas_pinned

    deny contains msg if {{
      some d in input.diff
      endswith(d.path, ".spec.replicas")
      msg := sprintf("replicas changed from %v to %v", [d.desired, d.live])
    }}
"#,
        sandbox = sandbox.display()
    )
}

/// A runner for install acme on the stand-in `cluster`, with its state in `dir/state`
/// and the App's sandbox module in `dir/sandbox` (a local module directory).
pub(crate) fn drift_runner(
    cp: &ControlPlane,
    cluster: &ControlPlane,
    token: &str,
    dir: &Path,
) -> std::process::Command {
    let mut command = cp.runner(INSTALL, token, &dir.join("state"));
    command
        .arg("--module-root")
        .arg(dir.join("sandbox"))
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .args(["--terraform", "terraform"]);
    command
}

/// The value of the App's `db_password` in the runner's secret store, which the runner
/// also writes into the Secret `shop/database` web reads.
const PASSWORD: &str = "drift-password-value";

/// [`PASSWORD`] as the Secret's data holds it.
fn encoded(value: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(value)
}

/// The customer's local policy on drift.
const LOCAL_POLICY: &str = r#"# outpost:inputs drift
# outpost:enforcement warn
package outpost.drift_seen

warn contains msg if {
  not input.inSync
  msg := sprintf("%d fields drifted on %s", [count(input.diff), input.entity.name])
}
"#;

/// Everything one case runs.
struct Stand {
    cp: ControlPlane,
    cluster: ControlPlane,
    _controllers: Process,
    runner: Process,
    token: String,
    dir: tempfile::TempDir,
}

impl Stand {
    async fn start(component_drift: &str) -> Stand {
        let cp = ControlPlane::start(Backend::Embedded).await;
        let cluster = ControlPlane::start_standin_cluster().await;
        let dir = tempfile::tempdir().unwrap();
        let sandbox = outpost_testing::shop::ready_sandbox(dir.path());
        let policies = dir.path().join("policies");
        std::fs::create_dir_all(&policies).unwrap();
        std::fs::write(policies.join("drift_seen.rego"), LOCAL_POLICY).unwrap();
        let secrets = dir.path().join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(secrets.join("db_password"), PASSWORD).unwrap();
        let file = dir.path().join("app.yaml");
        std::fs::write(&file, objects(&sandbox, component_drift)).unwrap();
        cp.kubectl().ok(&["apply", "-f", file.to_str().unwrap()]);
        let controllers = cp.start_controllers("drift");
        let token = cp.mint_runner_token(&format!("default/{INSTALL}"));
        let runner = start_runner(&cp, &cluster, &token, dir.path());
        Stand {
            cp,
            cluster,
            _controllers: controllers,
            runner,
            token,
            dir,
        }
    }

    fn restart_runner(&mut self) {
        self.runner.kill();
        self.runner = start_runner(&self.cp, &self.cluster, &self.token, self.dir.path());
    }

    /// `.spec.replicas` of the Deployment in the stand-in cluster.
    fn replicas(&self) -> String {
        self.cluster
            .kubectl()
            .jsonpath(&["deployment", "web", "-n", "shop"], "{.spec.replicas}")
    }

    /// `kubectl edit` of the Deployment with a sed script as the editor.
    fn edit(&self, sed: &str) {
        self.cluster
            .kubectl()
            .edit(sed, &["deployment", "web", "-n", "shop"]);
    }
}

fn start_runner(cp: &ControlPlane, cluster: &ControlPlane, token: &str, dir: &Path) -> Process {
    let child = drift_runner(cp, cluster, token, dir)
        .arg("--policies")
        .arg(dir.join("policies"))
        .arg("--secrets-dir")
        .arg(dir.join("secrets"))
        .spawn()
        .expect("outpost runner starts");
    Process::new(child)
}

/// The report, once it names a field ending in `field` with live value `live`.
async fn report_naming(
    reports: &Api<DriftReport>,
    field: &str,
    live: serde_json::Value,
) -> Option<DriftReport> {
    let report = reports.get_opt(REPORT).await.ok()??;
    let named = report
        .spec
        .diff
        .iter()
        .any(|d| d.path.ends_with(field) && d.live.as_ref() == Some(&live));
    named.then_some(report)
}

/// How many Plans the control plane made for drift (reason `drift`).
async fn drift_plans(plans: &Api<Plan>) -> usize {
    let listed = plans.list(&ListParams::default()).await.unwrap();
    listed
        .items
        .iter()
        .filter(|p| p.spec.reason.as_deref() == Some("drift"))
        .count()
}

/// Waits until the Install's status shows component web in drift state `state` with
/// `fields` drifted fields.
async fn web_shows(installs: &Api<Install>, state: DriftState, fields: u32) {
    let what = format!("the Install status to show web {state:?} with {fields} drifted fields");
    eventually(30, &what, async || {
        let install = installs.get(INSTALL).await.ok()?;
        let web = install
            .status?
            .components
            .into_iter()
            .find(|c| c.name == "web")?;
        (web.drift == Some(state) && web.drifted_fields == Some(fields)).then_some(())
    })
    .await;
}

/// Waits for the install to be Active with the Deployment applied in the stand-in and
/// a first (in sync) report.
async fn deployed(stand: &Stand) {
    install_reaches(&stand.cp, INSTALL, InstallPhase::Active, 120, String::new).await;
    assert_eq!(stand.replicas(), "2");
    drift_report_in_sync(&stand.cp, REPORT, 30).await;
}

/// Edits `spec.replicas` to `to` and returns the report naming it, printing the latency.
async fn edit_replicas(stand: &Stand, from: u32, to: u32) -> DriftReport {
    let reports: Api<DriftReport> = Api::namespaced(stand.cp.client().await, "default");
    let started = Instant::now();
    stand.edit(&format!("s/replicas: {from}$/replicas: {to}/"));
    let report = eventually(60, "a DriftReport naming spec.replicas", async || {
        report_naming(&reports, "spec.replicas", to.into()).await
    })
    .await;
    let latency = started.elapsed();
    println!(
        "drift: kubectl edit → DriftReport naming spec.replicas in {} ms (goal 5000 ms: {:.2} of the goal)",
        latency.as_millis(),
        latency.as_secs_f64() / 5.0
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_remediation_reports_drift_with_verdicts_and_leaves_the_object_edited() {
    let mut stand = Stand::start("").await;
    deployed(&stand).await;
    let client = stand.cp.client().await;
    let reports: Api<DriftReport> = Api::namespaced(client.clone(), "default");
    let installs: Api<Install> = Api::namespaced(client.clone(), "default");
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");

    // The Secret the runner wrote from its secret store is not part of what drift
    // compares: changing its value out of band is reported as nothing, and no report
    // ever holds a value.
    let secret = |field: &str| {
        stand.cluster.kubectl().ok(&[
            "get",
            "secret",
            "database",
            "-n",
            "shop",
            "-o",
            &format!("jsonpath={{.data.{field}}}"),
        ])
    };
    assert_eq!(secret("password"), encoded(PASSWORD));
    let other = "changed-out-of-band";
    stand.cluster.kubectl().merge_patch(
        &["secret", "database", "-n", "shop"],
        &format!(r#"{{"data":{{"password":"{}"}}}}"#, encoded(other)),
    );
    assert_eq!(secret("password"), encoded(other));

    let report = edit_replicas(&stand, 2, 5).await;
    let text = serde_json::to_string(&report).unwrap();
    for value in [PASSWORD, other] {
        assert!(
            !text.contains(value) && !text.contains(&encoded(value)),
            "{text}"
        );
    }
    let labels = report.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["outpost.dev/install"], INSTALL);
    assert_eq!(labels["outpost.dev/component"], "web");
    assert!(!report.spec.in_sync);
    assert!(report.spec.drifted_since.is_some());
    let entry = &report.spec.diff[0];
    assert_eq!(entry.path, "Deployment/shop/web.spec.replicas");
    assert_eq!(
        (entry.desired.clone(), entry.live.clone()),
        (Some(2.into()), Some(5.into()))
    );
    assert_eq!(report.spec.diff.len(), 1, "{:?}", report.spec.diff);
    // Both policies on the drift input were evaluated on the report.
    let verdict = |name: &str| {
        report
            .spec
            .verdicts
            .iter()
            .find(|v| v.policy == name)
            .unwrap_or_else(|| panic!("no verdict of {name}: {:?}", report.spec.verdicts))
    };
    assert_eq!(
        verdict("replicas-pinned").messages,
        ["replicas changed from 2 to 5"]
    );
    assert_eq!(
        verdict("local/drift_seen").messages,
        ["1 fields drifted on web"]
    );

    // The Install shows it; the object stays edited; no Plan is made for it.
    web_shows(&installs, DriftState::Drifted, 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stand.replicas(), "5", "report only: the edit stays");
    assert_eq!(drift_plans(&plans).await, 0);

    // The drift was audited.
    let events: Api<AuditEvent> = Api::namespaced(client.clone(), "default");
    eventually(30, "an audit event of type drift", async || {
        let listed = events
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .ok()?;
        listed
            .items
            .iter()
            .any(|e| e.spec.type_ == AuditEventType::Drift)
            .then_some(())
    })
    .await;

    // A restarted runner goes on detecting from the baseline in its state dir.
    stand.restart_runner();
    edit_replicas(&stand, 5, 4).await;
    // Undoing the edit brings the report back in sync.
    stand.edit("s/replicas: 4$/replicas: 2/");
    eventually(60, "the report back in sync", async || {
        let report = reports.get_opt(REPORT).await.ok()??;
        (report.spec.in_sync && report.spec.diff.is_empty()).then_some(())
    })
    .await;
    web_shows(&installs, DriftState::InSync, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_remediation_restores_the_edited_object_through_a_drift_plan() {
    let stand = Stand::start("drift:\n    remediation: auto").await;
    deployed(&stand).await;
    let client = stand.cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let reports: Api<DriftReport> = Api::namespaced(client.clone(), "default");

    let started = Instant::now();
    edit_replicas(&stand, 2, 7).await;
    let plan = eventually(60, "a succeeded Plan with reason drift", async || {
        let listed = plans.list(&ListParams::default()).await.ok()?;
        listed.items.into_iter().find(|p| {
            p.spec.reason.as_deref() == Some("drift")
                && p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Succeeded)
        })
    })
    .await;
    assert_eq!(plan.spec.entity.name, "web");
    assert_eq!(plan.spec.operation.as_str(), "deploy");
    eventually(30, "the Deployment restored", async || {
        (stand.replicas() == "2").then_some(())
    })
    .await;
    println!(
        "drift: kubectl edit → object restored by auto remediation in {} ms",
        started.elapsed().as_millis()
    );
    eventually(30, "the report back in sync", async || {
        let report = reports.get_opt(REPORT).await.ok()??;
        (report.spec.in_sync && report.spec.plan.as_deref() == plan.metadata.name.as_deref())
            .then_some(())
    })
    .await;
    // One drift, one Plan: reconciles of the same report make no second one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(drift_plans(&plans).await, 1);
    assert_eq!(stand.replicas(), "2");
}
