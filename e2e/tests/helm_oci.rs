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
use outpost_e2e::approve::approve;
use outpost_e2e::approve::diff_changes;
use outpost_e2e::helm::{Helm, copy_shop_chart};
use outpost_e2e::job_plans::{INSTALL, create_app, create_install, ready_plan, runner_command};
use outpost_e2e::{Backend, ControlPlane, Process, Registry, eventually};
use serde_json::{Value, json};

const VENDOR_USER: &str = "vendor-pull";
const VENDOR_PASSWORD: &str = "vendor-chart-secret";
const INSTALL_USER: &str = "acme-push";
const INSTALL_PASSWORD: &str = "acme-registry-secret";
/// Where Helm pushes the chart in the vendor's registry (`charts/shop`).
const VENDOR_NAMESPACE: &str = "charts";
/// The chart's repository in the install's registry.
const INSTALL_REPOSITORY: &str = "acme/shop";
/// The chart's version (`e2e/helm/shop/Chart.yaml`): its tag.
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
    let mut command = runner_command(&cp.url, &cp.tls.ca, &token, &dir.path().join("state"));
    command
        .arg("--helm")
        .arg(shim)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .arg("--secrets-dir")
        .arg(&secrets)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
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
    /// Packages `e2e/helm/shop` (with `extra` templates) and pushes it to the vendor's
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_chart_is_pulled_from_the_install_registry_by_the_digest_planned() {
    let stand = start().await;
    let first = stand.push_chart("v1", &[]).await;
    let vendor_repository = format!("{VENDOR_NAMESPACE}/shop");

    // Without the vendor's credentials: fails closed, nothing copied, nothing applied.
    let anonymous = stand.component(json!({"destinationAuth": credentials()["destinationAuth"]}));
    ready_plan(&stand.plans, INSTALL, "oci-0", "shop", anonymous, json!([])).await;
    let message = stand.fails("oci-0").await;
    assert!(
        message.contains(&format!(
            "the vendor registry {} anonymously (helm.sourceAuth is not set)",
            stand.vendor.host
        )) && message.contains("unauthorized"),
        "{message}"
    );
    assert!(!stand.install.has_manifest(INSTALL_REPOSITORY, &first).await);
    assert_eq!(stand.config_maps(), Vec::<String>::new());

    // Planned: copied under the vendor's digest (no tag moved), rendered from the
    // install's registry, waiting for a person.
    ready_plan(
        &stand.plans,
        INSTALL,
        "oci-1",
        "shop",
        stand.component(credentials()),
        json!([]),
    )
    .await;
    let waiting = stand.reaches("oci-1", PlanPhase::AwaitingApproval).await;
    assert!(
        diff_changes(&waiting)
            .contains(&("ConfigMap/shop/shop-web".to_owned(), ChangeAction::Create)),
        "{:?}",
        diff_changes(&waiting)
    );
    let planned_from = format!("{}/{INSTALL_REPOSITORY}@{first}", stand.install.host);
    assert_eq!(source(&waiting), Some(planned_from.clone()));
    assert!(stand.install.has_manifest(INSTALL_REPOSITORY, &first).await);
    assert_eq!(
        stand.install.digest_of(INSTALL_REPOSITORY, VERSION).await,
        None
    );
    assert_eq!(
        stand.config_maps(),
        Vec::<String>::new(),
        "nothing applied yet"
    );

    // The vendor moves the version to other content before the approval.
    let second = stand
        .push_chart(
            "v2",
            &[(
                "v2.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-v2\ndata: {}\n",
            )],
        )
        .await;
    assert_ne!(first, second);
    assert_eq!(
        stand
            .vendor
            .digest_of(&vendor_repository, VERSION)
            .await
            .as_deref(),
        Some(second.as_str())
    );

    // Approved: the planned rendering (the first digest) is applied, and named.
    approve(&stand.plans, &waiting).await.unwrap();
    let applied = stand.reaches("oci-1", PlanPhase::Succeeded).await;
    let outputs = json!(applied.status.clone().unwrap_or_default().outputs);
    assert_eq!(outputs["chart"], json!(planned_from), "{outputs}");
    assert_eq!(
        outputs["chartSource"],
        json!(format!("{}/{vendor_repository}@{first}", stand.vendor.host))
    );
    assert_eq!(source(&applied), Some(planned_from.clone()));
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-web"]);
    let greeting = stand.greeting();
    assert_eq!(greeting, "from-the-registry");

    // The next Plan takes the version's new digest, through the install's registry.
    ready_plan(
        &stand.plans,
        INSTALL,
        "oci-2",
        "shop",
        stand.component(credentials()),
        json!([]),
    )
    .await;
    let waiting = stand.reaches("oci-2", PlanPhase::AwaitingApproval).await;
    assert_eq!(
        diff_changes(&waiting),
        [("ConfigMap/shop/shop-v2".to_owned(), ChangeAction::Create)]
    );
    assert!(
        stand
            .install
            .has_manifest(INSTALL_REPOSITORY, &second)
            .await
    );
    assert_eq!(
        source(&waiting),
        Some(format!(
            "{}/{INSTALL_REPOSITORY}@{second}",
            stand.install.host
        ))
    );
    approve(&stand.plans, &waiting).await.unwrap();
    let applied = stand.reaches("oci-2", PlanPhase::Succeeded).await;
    let outputs = json!(applied.status.clone().unwrap_or_default().outputs);
    assert_eq!(
        outputs["chart"],
        json!(format!(
            "{}/{INSTALL_REPOSITORY}@{second}",
            stand.install.host
        ))
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-v2", "shop-web"]);

    // The install's registry serves corrupted bytes for the chart (the vendor's copy is
    // intact): what is rendered comes from the install's registry, checked, so the Plan
    // fails and nothing changes.
    let reference = oci_client::Reference::with_digest(
        stand.install.host.clone(),
        INSTALL_REPOSITORY.to_owned(),
        second.clone(),
    );
    let (manifest, _) = stand
        .install
        .client()
        .await
        .pull_image_manifest(&reference, &stand.install.auth())
        .await
        .unwrap();
    let layer = &manifest.layers[0];
    assert_eq!(
        layer.media_type,
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    );
    let file = stand.install.blob_file(&layer.digest);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    ready_plan(
        &stand.plans,
        INSTALL,
        "oci-3",
        "shop",
        stand.component(credentials()),
        json!([]),
    )
    .await;
    let message = stand.fails("oci-3").await;
    assert!(
        message.contains(&format!(
            "cannot pull chart {}/{INSTALL_REPOSITORY}@{second}",
            stand.install.host
        )) && message.contains("digest mismatch"),
        "{message}"
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-v2", "shop-web"]);
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

/// [`REPOSITORY_SERVER`] serving `dir`: the process and its `host:port`.
fn serve(dir: &std::path::Path) -> (Process, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let child = std::process::Command::new(outpost_e2e::on_path("python3"))
        .args(["-c", REPOSITORY_SERVER, &port.to_string()])
        .arg(dir)
        .args([VENDOR_USER, VENDOR_PASSWORD])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the chart repository starts");
    (Process::new(child), format!("127.0.0.1:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_repository_chart_is_checked_against_its_index_and_deployed_from_the_install_registry()
 {
    let stand = start().await;
    let repo = stand.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let chart = stand.dir.path().join("http").join("shop");
    copy_shop_chart(&chart, &[]);
    let archive = stand.helm.package(&chart, &repo);
    let digest = outpost_runner::example_image::sha256(&std::fs::read(&archive).unwrap());
    let index = format!(
        "apiVersion: v1\nentries:\n  shop:\n    - apiVersion: v2\n      name: shop\n      version: {VERSION}\n      appVersion: \"1.0\"\n      type: application\n      digest: {}\n      urls:\n        - shop-{VERSION}.tgz\ngenerated: \"2026-01-01T00:00:00Z\"\n",
        digest.trim_start_matches("sha256:")
    );
    std::fs::write(repo.join("index.yaml"), index).unwrap();
    let (_server, host) = serve(&repo);
    eventually(30, "the chart repository to answer", async || {
        tokio::net::TcpStream::connect(&host).await.ok().map(|_| ())
    })
    .await;
    let component = |source_auth: bool| {
        let mut component = json!({"app": "shop", "type": "helm_chart", "helm": {
            "chart": "shop", "repository": format!("http://{host}"), "version": VERSION,
            "destination": format!("{}/acme/shop-http", stand.install.host),
            "destinationAuth": credentials()["destinationAuth"],
            "namespace": "shop", "values": {"greeting": "from-the-repository"}}});
        if source_auth {
            component["helm"]["sourceAuth"] = credentials()["sourceAuth"].clone();
        }
        component
    };

    // Without the repository's credentials: fails closed, nothing applied.
    ready_plan(
        &stand.plans,
        INSTALL,
        "http-0",
        "shop",
        component(false),
        json!([]),
    )
    .await;
    let message = stand.fails("http-0").await;
    assert!(
        message.contains(&format!(
            "cannot read http://{host}/index.yaml from the chart repository http://{host} \
             anonymously (helm.sourceAuth is not set): unauthorized: HTTP 401"
        )),
        "{message}"
    );
    assert_eq!(stand.config_maps(), Vec::<String>::new());

    ready_plan(
        &stand.plans,
        INSTALL,
        "http-1",
        "shop",
        component(true),
        json!([]),
    )
    .await;
    let waiting = stand.reaches("http-1", PlanPhase::AwaitingApproval).await;
    let planned_from = source(&waiting).expect("the diff names the chart");
    let prefix = format!("{}/acme/shop-http@sha256:", stand.install.host);
    assert!(planned_from.starts_with(&prefix), "{planned_from}");
    let manifest = planned_from.trim_start_matches(&format!("{}/", stand.install.host));
    let (repository, manifest_digest) = manifest.split_once('@').unwrap();
    assert!(
        stand
            .install
            .has_manifest(repository, manifest_digest)
            .await
    );
    assert_eq!(
        stand.config_maps(),
        Vec::<String>::new(),
        "nothing applied yet"
    );
    approve(&stand.plans, &waiting).await.unwrap();
    let applied = stand.reaches("http-1", PlanPhase::Succeeded).await;
    let outputs = json!(applied.status.clone().unwrap_or_default().outputs);
    assert_eq!(outputs["chart"], json!(planned_from), "{outputs}");
    assert_eq!(
        outputs["chartSource"],
        json!(format!("http://{host}/shop-{VERSION}.tgz@{digest}"))
    );
    let greeting = stand.greeting();
    assert_eq!(greeting, "from-the-repository");

    // The archive no longer matches the index's digest: refused, nothing copied or applied.
    copy_shop_chart(
        &chart,
        &[(
            "v2.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-v2\ndata: {}\n",
        )],
    );
    stand.helm.package(&chart, &repo);
    ready_plan(
        &stand.plans,
        INSTALL,
        "http-2",
        "shop",
        component(true),
        json!([]),
    )
    .await;
    let message = stand.fails("http-2").await;
    assert!(
        message.contains(&format!(
            "digest mismatch: http://{host}/shop-{VERSION}.tgz has sha256:"
        )) && message.contains(&format!("the index says {digest}")),
        "{message}"
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-web"]);

    // An archive (its digest right) with an entry outside the chart: nothing is
    // unpacked onto the runner's disk, and Helm's loader refuses it.
    let evil = repo.join("evil-0.1.0.tgz");
    let made = std::process::Command::new(outpost_e2e::on_path("python3"))
        .args(["-c", EVIL_ARCHIVE])
        .arg(&evil)
        .status()
        .unwrap();
    assert!(made.success());
    let evil_digest = outpost_runner::example_image::sha256(&std::fs::read(&evil).unwrap());
    let index = std::fs::read_to_string(repo.join("index.yaml")).unwrap();
    let index = index.replacen(
        "entries:\n",
        &format!(
            "entries:\n  evil:\n    - apiVersion: v2\n      name: evil\n      version: 0.1.0\n      digest: {}\n      urls:\n        - evil-0.1.0.tgz\n",
            evil_digest.trim_start_matches("sha256:")
        ),
        1,
    );
    std::fs::write(repo.join("index.yaml"), index).unwrap();
    let mut component = component(true);
    component["helm"]["chart"] = json!("evil");
    component["helm"]["version"] = json!("0.1.0");
    ready_plan(
        &stand.plans,
        INSTALL,
        "http-3",
        "shop",
        component,
        json!([]),
    )
    .await;
    let message = stand.fails("http-3").await;
    assert!(
        message.contains("helm template of ")
            && message.contains("failed to load chart: unable to load chart archive"),
        "{message}"
    );
    assert!(
        !stand.dir.path().join("escaped.yaml").exists()
            && !stand.dir.path().join("state/escaped.yaml").exists()
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-web"]);
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_oci_chart_is_refused_naming_the_field_and_nothing_is_stored() {
    const COMPONENTS: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/components";
    const JSON: (&str, &str) = ("content-type", "application/json");
    let cp = ControlPlane::start(Backend::Embedded).await;
    let component = |helm: Value| {
        let mut block = json!({"chart": "oci://registry.vendor.example/charts/shop",
            "version": "1.2.0", "destination": "registry.acme.example/acme/shop"});
        for (key, value) in helm.as_object().unwrap() {
            block[key] = value.clone();
        }
        json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
            "metadata": {"name": "shop"},
            "spec": {"app": "shop", "type": "helm_chart", "helm": block}})
    };
    for (helm, field) in [
        (
            json!({"chart": "oci://registry.vendor.example/charts/shop:1.2.0"}),
            "spec.helm.chart",
        ),
        (
            json!({"chart": "oci://registry.vendor.example"}),
            "spec.helm.chart",
        ),
        (json!({"version": "1.2.0@sha256:abc"}), "spec.helm.version"),
        (json!({"version": null}), "spec.helm.version"),
        (json!({"destination": "acme-shop"}), "spec.helm.destination"),
        (json!({"destination": null}), "spec.helm.destination"),
        (
            json!({"chart": "shop", "repository": "ftp://charts.vendor.example"}),
            "spec.helm.repository",
        ),
        (
            json!({"chart": "stable/shop", "repository": "https://charts.vendor.example"}),
            "spec.helm.chart",
        ),
        (
            json!({"sourceAuth": {"username": VENDOR_USER, "password": VENDOR_PASSWORD}}),
            "spec.helm.sourceAuth.password",
        ),
    ] {
        let body = component(helm).to_string();
        cp.post_refused_as_invalid(COMPONENTS, &body, field, VENDOR_PASSWORD)
            .await;
    }
    let runner = create_install(&cp, INSTALL, "prompt").await;
    let reply = cp
        .raw(
            Some(&runner),
            "POST",
            COMPONENTS,
            &[JSON],
            component(json!({})).to_string(),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    let listed = cp
        .raw(Some(&cp.admin_token), "GET", COMPONENTS, &[], "")
        .await;
    assert_eq!(listed.json["items"], json!([]), "{}", listed.text);
    // The well-formed one is stored.
    let created = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            COMPONENTS,
            &[JSON],
            component(json!({})).to_string(),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
}
