//! `helm_chart` components with the real runner: Helm renders the chart (`--helm`: the
//! `helm template` shim over helm-sdkpy, Helm 4's engine), the runner server-side applies
//! the rendered objects into a stand-in cluster and keeps an inventory of them.
//!
//! * deploy: the chart's objects are created with the values of the component (typed as
//!   `helm --set` types them) and `.Capabilities` of the cluster; no release Secret.
//! * an out-of-band edit of a chart object is reported as drift (DriftReport naming the
//!   field, with the live value).
//! * an upgrade whose rendering drops an object prunes it (the diff lists its delete)
//!   and restores the edited field.
//! * teardown removes every object of the chart.
//! * a chart rendering a hook fails the Plan naming the hook, and nothing is applied.

use std::path::Path;
use std::process::{Command, Stdio};

use kube_client::api::{Api, Patch, PatchParams, PostParams};
use outpost_api::{ChangeAction, DriftReport, Plan, PlanPhase};
use outpost_testing::approve::diff_changes;
use outpost_testing::helm::{Helm, copy_shop_chart};
use outpost_testing::job_plans::{INSTALL, deploy_plan, install_with_token, runner_command};
use outpost_testing::{Backend, ControlPlane, Process, eventually};
use serde_json::{Value, json};

/// The control plane, the stand-in cluster, the install's runner with the helm shim.
struct Stand {
    cp: ControlPlane,
    cluster: ControlPlane,
    plans: Api<Plan>,
    _runner: Process,
    charts: tempfile::TempDir,
}

/// The install's runner on the stand-in `cluster` with `helm` (a [`Helm::template_binary`]
/// shim), its state in `state`; the caller adds what its stand needs and spawns it.
pub(crate) fn helm_runner(
    cp: &ControlPlane,
    cluster: &ControlPlane,
    token: &str,
    state: &Path,
    helm: &Path,
) -> Command {
    let mut command = runner_command(&cp.url, &cp.tls.ca, token, state);
    command
        .arg("--helm")
        .arg(helm)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

async fn start() -> Stand {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let token = install_with_token(&cp).await;
    let charts = tempfile::tempdir().unwrap();
    let state = charts.path().join("state");
    let helm = Helm::find().template_binary(charts.path());
    let mut command = helm_runner(&cp, &cluster, &token, &state, &helm);
    command
        .arg("--module-root")
        .arg(charts.path().join("charts"));
    let runner = Process::new(command.spawn().expect("outpost runner starts"));
    Stand {
        plans: Api::namespaced(cp.client().await, "default"),
        cp,
        cluster,
        _runner: runner,
        charts,
    }
}

impl Stand {
    /// A copy of `testing/helm/shop` under the runner's module root, with `extra` templates.
    fn chart(&self, name: &str, extra: &[(&str, &str)]) -> String {
        let dir = self.charts.path().join("charts").join(name);
        copy_shop_chart(&dir, extra);
        dir.to_str().unwrap().to_owned()
    }

    /// Creates Plan `name` (`operation` of component `shop`) and passes it as the gate
    /// would (`Ready`, its role); returns it once it ended.
    async fn run(&self, name: &str, operation: &str, desired: Value) -> Plan {
        let mut plan = deploy_plan(name, INSTALL, "shop", desired);
        plan["spec"]["operation"] = json!(operation);
        self.plans
            .create(
                &PostParams::default(),
                &serde_json::from_value(plan).unwrap(),
            )
            .await
            .unwrap();
        let status = json!({"status": {"phase": "Ready",
            "role": {"name": "acme-maintenance", "level": "default"}, "verdicts": []}});
        self.plans
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
        eventually(120, &format!("plan {name} to end"), async || {
            let plan = self.plans.get(name).await.ok()?;
            let phase = plan.status.as_ref()?.phase?;
            phase.is_terminal().then_some(plan)
        })
        .await
    }

    /// Names of the objects of `kind` in namespace `shop`.
    fn names(&self, kind: &str) -> Vec<String> {
        let text = self.cluster.kubectl().ok(&[
            "get",
            kind,
            "-n",
            "shop",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        text.split_whitespace().map(str::to_owned).collect()
    }

    fn config(&self, name: &str, key: &str) -> String {
        self.cluster.kubectl().ok(&[
            "get",
            "configmap",
            name,
            "-n",
            "shop",
            "-o",
            &format!("jsonpath={{.data.{key}}}"),
        ])
    }
}

fn component(chart: &str, values: Value) -> Value {
    json!({"app": "shop", "type": "helm_chart",
           "helm": {"chart": chart, "namespace": "shop", "values": values}})
}

fn succeeded(plan: &Plan) -> &outpost_api::PlanStatus {
    let status = plan.status.as_ref().expect("a status");
    assert_eq!(status.phase, Some(PlanPhase::Succeeded), "{status:?}");
    status
}

/// Each changed resource of the Plan's diff, with its action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_chart_deploys_reports_drift_prunes_on_upgrade_and_tears_down() {
    let stand = start().await;
    let chart = stand.chart("shop", &[]);

    // Deploy: Helm renders with the component's values and the cluster's capabilities.
    let values = json!({"greeting": "hi", "replicas": "2"});
    let deployed = stand
        .run("shop-1", "deploy", component(&chart, values.clone()))
        .await;
    succeeded(&deployed);
    let created = diff_changes(&deployed);
    for address in [
        "ConfigMap/shop/shop-web",
        "ConfigMap/shop/shop-extra",
        "Deployment/shop/shop-web",
    ] {
        assert!(
            created.contains(&(address.to_owned(), ChangeAction::Create)),
            "{address} in {created:?}"
        );
    }
    assert_eq!(stand.config("shop-web", "greeting"), "hi");
    assert_eq!(stand.config("shop-web", "hasDeployments"), "true");
    let version = stand.cluster.kubectl().ok(&["version", "-o", "json"]);
    let version: Value = serde_json::from_str(&version).unwrap();
    assert_eq!(
        stand.config("shop-web", "kubeVersion"),
        version["serverVersion"]["gitVersion"].as_str().unwrap(),
        ".Capabilities.KubeVersion is the cluster's"
    );
    let replicas = stand.cluster.kubectl().ok(&[
        "get",
        "deployment",
        "shop-web",
        "-n",
        "shop",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(
        replicas, "2",
        "`2` is typed as a number, as helm --set does"
    );
    assert_eq!(
        stand.names("secrets"),
        Vec::<String>::new(),
        "no Helm release Secret"
    );

    // An out-of-band edit of a chart object is drift.
    stand.cluster.kubectl().merge_patch(
        &["configmap", "shop-web", "-n", "shop"],
        r#"{"data":{"greeting":"edited"}}"#,
    );
    let reports: Api<DriftReport> = Api::namespaced(stand.cp.client().await, "default");
    let report = eventually(60, "a DriftReport naming data.greeting", async || {
        let report = reports.get_opt(&format!("{INSTALL}-shop")).await.ok()??;
        report
            .spec
            .diff
            .iter()
            .any(|d| d.path.ends_with("greeting") && d.live == Some(json!("edited")))
            .then_some(report)
    })
    .await;
    assert!(!report.spec.in_sync);

    // An upgrade that no longer renders `shop-extra` prunes it, and restores the edit.
    let mut values = values;
    values["extra.enabled"] = json!("false");
    let upgraded = stand
        .run("shop-2", "deploy", component(&chart, values.clone()))
        .await;
    succeeded(&upgraded);
    let upgrade = diff_changes(&upgraded);
    assert!(
        upgrade.contains(&("ConfigMap/shop/shop-extra".to_owned(), ChangeAction::Delete)),
        "{upgrade:?}"
    );
    assert!(
        upgrade.contains(&("ConfigMap/shop/shop-web".to_owned(), ChangeAction::Update)),
        "{upgrade:?}"
    );
    assert_eq!(stand.names("configmaps"), ["shop-web"]);
    assert_eq!(stand.config("shop-web", "greeting"), "hi");

    // A chart with a hook is refused by name; nothing of it is applied.
    let hooked = stand.chart(
        "hooked",
        &[(
            "migrate.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-upgrade\ndata: {}\n",
        )],
    );
    let refused = stand
        .run("shop-3", "deploy", component(&hooked, values.clone()))
        .await;
    let status = refused.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "plan failed: the chart has Helm hooks, which the runner does not run: ConfigMap/migrate (pre-upgrade)"
        ),
    );
    assert_eq!(stand.names("configmaps"), ["shop-web"]);

    // Teardown removes everything the chart put there.
    let torn = stand
        .run("shop-4", "teardown", component(&chart, values))
        .await;
    succeeded(&torn);
    let deleted = diff_changes(&torn);
    assert!(
        deleted.contains(&("Deployment/shop/shop-web".to_owned(), ChangeAction::Delete)),
        "{deleted:?}"
    );
    assert_eq!(stand.names("configmaps"), Vec::<String>::new());
    assert_eq!(stand.names("deployments"), Vec::<String>::new());
}

/// The resource of the Plan's diff at `address`.
fn change<'a>(plan: &'a Plan, address: &str) -> &'a outpost_api::ResourceChange {
    let diff = plan.status.as_ref().and_then(|s| s.diff.as_ref());
    diff.expect("a diff")
        .resources
        .iter()
        .find(|r| r.address == address)
        .unwrap_or_else(|| panic!("{address} in the diff of {:?}", plan.metadata.name))
}

/// `metadata.resourceVersion` of an object of the stand-in cluster, as a number.
fn revision(cluster: &ControlPlane, args: &[&str]) -> u64 {
    let mut args = args.to_vec();
    args.extend(["-o", "jsonpath={.metadata.resourceVersion}"]);
    cluster
        .kubectl()
        .ok(&args)
        .parse()
        .expect("a resourceVersion")
}

/// CRDs first (issue 19): a chart whose `crds/` defines `Widget` and whose template
/// renders one. The first Plan cannot dry-run the Widget (its kind is not served yet):
/// the diff shows it as a create with a note; the apply creates the CRD, waits until it
/// is Established, then the Widget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_with_crds_applies_them_first_and_removes_them_last() {
    let stand = start().await;
    let dir = stand.charts.path().join("charts").join("widgets");
    outpost_testing::helm::copy_test_chart("widgets", &dir);
    let chart = dir.to_str().unwrap().to_owned();
    let crd = "CustomResourceDefinition/widgets.example.com";
    let widget = "Widget/shop/shop-widget";
    let kubectl = stand.cluster.kubectl();

    let deployed = stand
        .run("widgets-1", "deploy", component(&chart, json!({})))
        .await;
    succeeded(&deployed);
    assert_eq!(change(&deployed, crd).action, ChangeAction::Create);
    assert_eq!(
        change(&deployed, crd).note,
        None,
        "the CRD itself is dry-run"
    );
    let created = change(&deployed, widget);
    assert_eq!(created.action, ChangeAction::Create);
    assert_eq!(
        created.note.as_deref(),
        Some("its CRD widgets.example.com is created by this Plan; not dry-run")
    );
    // Both exist, the CRD written before the Widget.
    let names = kubectl.ok(&["get", "widgets", "-n", "shop", "-o", "name"]);
    assert_eq!(names.trim(), "widget.example.com/shop-widget");
    assert!(
        revision(&stand.cluster, &["get", "crd", "widgets.example.com"])
            < revision(
                &stand.cluster,
                &["get", "widget", "shop-widget", "-n", "shop"]
            )
    );

    // Nothing changed: the next Plan dry-runs both and reports no change.
    let again = stand
        .run("widgets-2", "deploy", component(&chart, json!({})))
        .await;
    let diff = succeeded(&again).diff.as_ref().expect("a diff");
    assert!(!diff.has_changes(), "{:?}", diff.resources);

    // An out-of-band edit of the Widget is drift.
    kubectl.merge_patch(
        &["widget", "shop-widget", "-n", "shop"],
        r#"{"spec":{"size":9}}"#,
    );
    let reports: Api<DriftReport> = Api::namespaced(stand.cp.client().await, "default");
    eventually(60, "a DriftReport naming spec.size", async || {
        let report = reports.get_opt(&format!("{INSTALL}-shop")).await.ok()??;
        report
            .spec
            .diff
            .iter()
            .any(|d| d.path.ends_with("size") && d.live == Some(json!(9)))
            .then_some(report)
    })
    .await;

    // An upgrade that no longer renders the Widget prunes it; the CRD stays.
    let dropped = stand
        .run(
            "widgets-3",
            "deploy",
            component(&chart, json!({"widget.enabled": "false"})),
        )
        .await;
    succeeded(&dropped);
    assert_eq!(change(&dropped, widget).action, ChangeAction::Delete);
    assert!(
        kubectl
            .ok(&["get", "widgets", "-n", "shop", "-o", "name"])
            .trim()
            .is_empty()
    );
    kubectl.ok(&["get", "crd", "widgets.example.com"]);

    // Back again (its CRD is served now: dry-run, no note), then torn down: the Widget
    // goes before its CRD.
    let back = stand
        .run("widgets-4", "deploy", component(&chart, json!({})))
        .await;
    succeeded(&back);
    assert_eq!(change(&back, widget).note, None);
    let torn = stand
        .run("widgets-5", "teardown", component(&chart, json!({})))
        .await;
    succeeded(&torn);
    let deleted = diff_changes(&torn);
    let position = |address: &str| {
        deleted
            .iter()
            .position(|(a, action)| a == address && *action == ChangeAction::Delete)
            .unwrap_or_else(|| panic!("{address} deleted in {deleted:?}"))
    };
    assert!(position(widget) < position(crd), "{deleted:?}");
    assert!(!kubectl.run(&["get", "crd", "widgets.example.com"]).ok);
    assert_eq!(stand.names("configmaps"), Vec::<String>::new());
}
