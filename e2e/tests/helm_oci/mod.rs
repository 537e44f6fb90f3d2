//! `helm_chart` components from an OCI registry, with the real runner and real
//! registries (seed 002: every artefact goes through the install's registry, lineage by
//! digest). The vendor's chart is packaged and pushed by Helm itself (helm-sdkpy's
//! `package` and `push`: Helm's media types) into a `docker-registry` that requires a
//! password; the install's registry is another one with a password of its own. The
//! runner reads both passwords from its secrets (`helm.sourceAuth`,
//! `helm.destinationAuth`).
//!
//! * without the vendor's credentials the Plan fails closed, "unauthorized", and
//!   nothing is copied or applied;
//! * a Plan copies the chart into the install's registry under the vendor's digest (no
//!   tag moved before approval), renders what it pulled from there, and waits;
//! * the vendor re-pushes different content under the same version: the approved Plan
//!   applies the rendering it planned (the first digest), its `chart` output names it;
//! * the next Plan takes the new digest, copies it, and applies its new object;
//! * the install's registry serving corrupted chart bytes (the vendor's are intact)
//!   fails the Plan, "digest mismatch": what is rendered is read from there, checked.
//! * a chart of an HTTP chart repository (Python's `http.server` requiring basic auth,
//!   serving Helm's package and an `index.yaml`): without `helm.sourceAuth` the Plan
//!   fails, "unauthorized"; with it the archive is checked against the index's digest,
//!   pushed into the install's registry as a Helm artefact and deployed from there by
//!   digest; an archive that no longer matches the index fails the Plan, and so does
//!   one (its digest right) with an entry climbing out of the chart (Helm's loader
//!   refuses it; nothing is unpacked onto the runner's disk).
//! * admission: a malformed `oci://` reference, version or destination is refused with
//!   422 naming the field, for admins (others are refused before validation), and
//!   nothing is stored.

use std::process::Stdio;

use kube_client::api::Api;
use outpost_api::{ChangeAction, Plan, PlanPhase};
use outpost_testing::approve::approve;
use outpost_testing::approve::diff_changes;
use outpost_testing::helm::{Helm, copy_shop_chart};
use outpost_testing::job_plans::{INSTALL, create_app, create_install, ready_plan};
use outpost_testing::{Backend, ControlPlane, Process, Registry, eventually};
use serde_json::{Value, json};

use crate::helm_component::helm_runner;

const VENDOR_USER: &str = "vendor-pull";
const VENDOR_PASSWORD: &str = "vendor-chart-secret";
const INSTALL_USER: &str = "acme-push";
const INSTALL_PASSWORD: &str = "acme-registry-secret";
/// Where Helm pushes the chart in the vendor's registry (`charts/shop`).
const VENDOR_NAMESPACE: &str = "charts";
/// The chart's repository in the install's registry.
const INSTALL_REPOSITORY: &str = "acme/shop";
/// The chart's version (`testing/helm/shop/Chart.yaml`): its tag.
const VERSION: &str = "0.1.0";

struct Stand {
    cluster: ControlPlane,
    plans: Api<Plan>,
    vendor: Registry,
    install: Registry,
    helm: Helm,
    _runner: Process,
    dir: tempfile::TempDir,
    _cp: ControlPlane,
}

async fn start() -> Stand {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    create_app(&cp).await;
    let token = create_install(&cp, INSTALL, "prompt").await;
    let vendor = Registry::start_with_htpasswd(VENDOR_USER, VENDOR_PASSWORD).await;
    let install = Registry::start_with_htpasswd(INSTALL_USER, INSTALL_PASSWORD).await;
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("vendor_pull_token"), VENDOR_PASSWORD).unwrap();
    std::fs::write(secrets.join("install_registry_password"), INSTALL_PASSWORD).unwrap();
    let helm = Helm::find();
    let shim = helm.template_binary(dir.path());
    let mut command = helm_runner(&cp, &cluster, &token, &dir.path().join("state"), &shim);
    command.arg("--secrets-dir").arg(&secrets);
    let runner = Process::new(command.spawn().expect("outpost runner starts"));
    Stand {
        plans: Api::namespaced(cp.client().await, "default"),
        _cp: cp,
        cluster,
        vendor,
        install,
        helm,
        _runner: runner,
        dir,
    }
}

impl Stand {
    /// Packages `testing/helm/shop` (with `extra` templates) and pushes it to the vendor's
    /// registry with Helm; returns the digest its version's tag resolves to there.
    async fn push_chart(&self, label: &str, extra: &[(&str, &str)]) -> String {
        let chart = self.dir.path().join(label).join("shop");
        copy_shop_chart(&chart, extra);
        self.helm.push(
            &chart,
            &self.vendor.host,
            VENDOR_NAMESPACE,
            Some((VENDOR_USER, VENDOR_PASSWORD)),
            &self.dir.path().join(label),
        );
        self.vendor
            .digest_of(&format!("{VENDOR_NAMESPACE}/shop"), VERSION)
            .await
            .expect("the pushed chart's tag resolves")
    }

    /// The `helm_chart` component of the vendor's chart, with `auth` (the registries'
    /// credentials) merged into its `helm` block.
    fn component(&self, auth: Value) -> Value {
        let mut helm = json!({
            "chart": format!("oci://{}/{VENDOR_NAMESPACE}/shop", self.vendor.host),
            "version": VERSION,
            "destination": format!("{}/{INSTALL_REPOSITORY}", self.install.host),
            "namespace": "shop",
            "values": {"greeting": "from-the-registry"},
        });
        for (key, value) in auth.as_object().unwrap() {
            helm[key] = value.clone();
        }
        json!({"app": "shop", "type": "helm_chart", "helm": helm})
    }

    /// Plan `name` once it is in `phase` (a Plan that ends elsewhere fails the test).
    async fn reaches(&self, name: &str, phase: PlanPhase) -> Plan {
        eventually(120, &format!("plan {name} to be {phase:?}"), async || {
            let plan = self.plans.get(name).await.ok()?;
            let now = plan.status.as_ref().and_then(|s| s.phase);
            if now != Some(phase) && now.is_some_and(PlanPhase::is_terminal) {
                panic!("plan {name} ended {now:?}: {:?}", plan.status);
            }
            (now == Some(phase)).then_some(plan)
        })
        .await
    }

    /// The message of Plan `name` once it failed.
    async fn fails(&self, name: &str) -> String {
        let plan = self.reaches(name, PlanPhase::Failed).await;
        plan.status.and_then(|s| s.message).unwrap_or_default()
    }

    /// The `greeting` of ConfigMap `shop-web` (the component's value).
    fn greeting(&self) -> String {
        self.cluster.kubectl().ok(&[
            "get",
            "configmap",
            "shop-web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.data.greeting}",
        ])
    }

    /// Names of the ConfigMaps in namespace `shop`.
    fn config_maps(&self) -> Vec<String> {
        let text = self.cluster.kubectl().ok(&[
            "get",
            "configmaps",
            "-n",
            "shop",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        text.split_whitespace().map(str::to_owned).collect()
    }
}

/// Both registries' credentials, as secret references.
fn credentials() -> Value {
    json!({
        "sourceAuth": {"username": VENDOR_USER, "password": "${outpost-secret:vendor_pull_token}"},
        "destinationAuth": {"username": INSTALL_USER,
                            "password": "${outpost-secret:install_registry_password}"},
    })
}

/// The chart the Plan's diff names, by digest (`status.diff.source`).
fn source(plan: &Plan) -> Option<String> {
    plan.status.as_ref()?.diff.as_ref()?.source.clone()
}

/// A chart repository: `dir` served on a free loopback port by Python's `http.server`,
/// answering 401 to any request without the vendor's user and password (HTTP basic).
const REPOSITORY_SERVER: &str = r#"
import base64, functools, http.server, sys
port, directory, user, password = sys.argv[1:5]
expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="charts"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()
handler = functools.partial(Handler, directory=directory)
http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), handler).serve_forever()
"#;

/// Writes a chart archive to `argv[1]` with an entry that climbs out of the chart.
const EVIL_ARCHIVE: &str = r#"
import io, sys, tarfile
entries = [
    ("evil/Chart.yaml", b"apiVersion: v2\nname: evil\nversion: 0.1.0\n"),
    ("evil/templates/cm.yaml", b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: evil\n"),
    ("evil/../../escaped.yaml", b"escaped: true\n"),
]
with tarfile.open(sys.argv[1], "w:gz") as archive:
    for name, data in entries:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
"#;

mod oci;
mod repository;
