//! Helm 4 through helm-sdkpy, a Python binding that embeds Helm's Go library (`./x deps`
//! installs it into `.venv/`): lint a chart, and install one into a stand-in cluster
//! ([`ControlPlane::start_standin_cluster`]) to see what it renders and creates.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::ControlPlane;

/// What the Python side does with one request (JSON in `argv[1]`, JSON out on stdout).
const DRIVER: &str = r#"
import asyncio, json, sys
try:
    import helm_sdkpy as helm
except ImportError as err:
    print(json.dumps({"missing": str(err)}))
    sys.exit(0)

request = json.loads(sys.argv[1])

async def main():
    if request["action"] == "version":
        return {"version": helm.get_version()}
    if request["action"] == "package":
        archive = await helm.Package(helm.Configuration()).run(request["chart"], request["dest"])
        return {"archive": archive}
    if request["action"] == "push":
        auth = request["auth"]
        config = helm.Configuration(
            plain_http=True,
            registry_auth={request["host"]: auth} if auth else None,
        )
        archive = await helm.Package(config).run(request["chart"], request["dest"])
        await helm.Push(config).run(archive, request["remote"], plain_http=True)
        return {"archive": archive}
    if request["action"] == "lint":
        result = await helm.Lint(helm.Configuration()).run(request["chart"])
        return {
            "linted": result["TotalChartsLinted"],
            "messages": [
                {"severity": m["Severity"], "path": m["Path"]}
                for m in result["Messages"] or []
            ],
        }
    config = helm.Configuration(namespace=request["namespace"], kubeconfig=request["kubeconfig"])
    try:
        release = await helm.Install(config).run(
            request["release"], request["chart"], values=request["values"], wait=False, timeout=60
        )
    except helm.HelmError as err:
        return {"error": str(err)}
    return {"manifest": release["manifest"], "notes": release["info"].get("notes", "")}

print(json.dumps(asyncio.run(main())))
"#;

/// Helm's lint severities (`pkg/lint/support`): info, warning, error.
pub const LINT_INFO: u64 = 1;
/// A lint warning: `helm lint --strict` fails on it.
pub const LINT_WARNING: u64 = 2;
/// A lint error.
pub const LINT_ERROR: u64 = 3;

/// One message of `helm lint`. helm-sdkpy keeps Helm's severity and the file it is
/// about; the message's text does not survive its JSON encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LintMessage {
    /// [`LINT_INFO`], [`LINT_WARNING`] or [`LINT_ERROR`].
    pub severity: u64,
    /// The file or directory, relative to the chart (`values.yaml`, `templates/`).
    pub path: String,
}

/// A release Helm installed: what it rendered.
#[derive(Clone, Debug)]
pub struct Release {
    /// Every rendered object, as one multi-document YAML stream.
    pub manifest: String,
    /// The rendered `NOTES.txt`.
    pub notes: String,
}

/// Helm 4, run through the Python that has helm-sdkpy.
pub struct Helm {
    python: PathBuf,
}

/// The small chart the `helm_chart` executor's tests deploy, `testing/helm/shop/`.
pub fn shop_chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("helm/shop")
}

/// Copies `testing/helm/shop` to `dir` (its templates, values and Chart.yaml), with
/// `extra` templates (file name, content) added.
pub fn copy_shop_chart(dir: &Path, extra: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("templates")).expect("the chart directory is created");
    for file in [
        "Chart.yaml",
        "values.yaml",
        "templates/web.yaml",
        "templates/extra.yaml",
    ] {
        std::fs::copy(shop_chart().join(file), dir.join(file)).expect("the chart is copied");
    }
    for (file, content) in extra {
        std::fs::write(dir.join("templates").join(file), content).expect("a template is written");
    }
}

/// Copies the chart `testing/helm/NAME` to `dir`: every file, `crds/` included.
pub fn copy_test_chart(name: &str, dir: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("the chart directory is created");
        for entry in std::fs::read_dir(from).expect("the chart is readable") {
            let entry = entry.expect("a chart entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("a file type").is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).expect("the chart is copied");
            }
        }
    }
    copy(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("helm")
            .join(name),
        dir,
    );
}

/// The repository's Helm chart, `charts/outpost/`.
pub fn outpost_chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/outpost")
}

impl Helm {
    /// The Python in `OUTPOST_HELM_PYTHON` (set by `./x`), else the repository's
    /// `.venv/bin/python`.
    ///
    /// # Panics
    /// If neither exists or it cannot import helm_sdkpy: run `./x deps`.
    pub fn find() -> Helm {
        let python = std::env::var_os("OUTPOST_HELM_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
            });
        assert!(
            python.exists(),
            "{} not found: the Helm tests need helm-sdkpy; run `./x deps` (or set OUTPOST_HELM_PYTHON)",
            python.display()
        );
        let helm = Helm { python };
        let version = helm.call(&json!({"action": "version"}));
        if let Some(missing) = version.get("missing") {
            panic!(
                "{} cannot import helm_sdkpy ({missing}): run `./x deps`",
                helm.python.display()
            );
        }
        helm
    }

    /// Writes `helm` into `dir`: the `helm template` shim over helm-sdkpy
    /// (`testing/helm/helm_template.py`) run by this Python, for a runner's `--helm`.
    pub fn template_binary(&self, dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("helm");
        let script = format!(
            "#!{}\n{}",
            self.python.display(),
            include_str!("../helm/helm_template.py")
        );
        std::fs::write(&path, script).expect("the helm shim is written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("the helm shim is made executable");
        path
    }

    /// `helm lint CHART`: Helm's messages (a clean chart has none above info).
    pub fn lint(&self, chart: &Path) -> Vec<LintMessage> {
        let reply = self.call(&json!({"action": "lint", "chart": chart}));
        assert_eq!(reply["linted"], 1, "one chart linted: {reply}");
        reply["messages"]
            .as_array()
            .expect("lint messages")
            .iter()
            .map(|m| LintMessage {
                severity: m["severity"].as_u64().expect("a severity"),
                path: m["path"].as_str().expect("a path").to_owned(),
            })
            .collect()
    }

    /// `helm install RELEASE CHART -n NAMESPACE --values VALUES` into `cluster` (a
    /// stand-in cluster), without waiting for readiness (nothing runs there). Release
    /// records stay in Helm's memory: the stand-in cluster does not decode the protobuf
    /// Helm writes Secrets in. `Err` is Helm's message (values refused by the schema,
    /// a template that fails).
    pub fn install(
        &self,
        cluster: &ControlPlane,
        release: &str,
        namespace: &str,
        chart: &Path,
        values: &Value,
    ) -> Result<Release, String> {
        let reply = self.call(&json!({
            "action": "install",
            "release": release,
            "namespace": namespace,
            "chart": chart,
            "values": values,
            "kubeconfig": cluster.kubeconfig(&cluster.admin_token),
        }));
        if let Some(error) = reply.get("error") {
            return Err(error.as_str().unwrap_or_default().to_owned());
        }
        Ok(Release {
            manifest: reply["manifest"].as_str().expect("a manifest").to_owned(),
            notes: reply["notes"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// `helm package CHART` then `helm push ARCHIVE oci://HOST/NAMESPACE` over plain
    /// HTTP (`host` is a loopback registry), with `credentials` (user, password) when
    /// it requires them: the chart lands at `HOST/NAMESPACE/CHART-NAME:VERSION` with
    /// Helm's own media types. Returns the archive's path (under `scratch`).
    pub fn push(
        &self,
        chart: &Path,
        host: &str,
        namespace: &str,
        credentials: Option<(&str, &str)>,
        scratch: &Path,
    ) -> PathBuf {
        let auth = credentials
            .map(|(username, password)| json!({"username": username, "password": password}));
        let reply = self.call(&json!({
            "action": "push",
            "chart": chart,
            "dest": scratch,
            "host": host,
            "remote": format!("oci://{host}/{namespace}"),
            "auth": auth,
        }));
        PathBuf::from(reply["archive"].as_str().expect("the packaged archive"))
    }

    /// `helm package CHART -d DEST`: the archive's path (`DEST/NAME-VERSION.tgz`).
    pub fn package(&self, chart: &Path, dest: &Path) -> PathBuf {
        let reply = self.call(&json!({"action": "package", "chart": chart, "dest": dest}));
        PathBuf::from(reply["archive"].as_str().expect("the packaged archive"))
    }

    fn call(&self, request: &Value) -> Value {
        let output = Command::new(&self.python)
            .arg("-c")
            .arg(DRIVER)
            .arg(request.to_string())
            .env("HELM_DRIVER", "memory")
            .output()
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "helm-sdkpy failed on {request}:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // The reply is the last line: Helm prints progress (`Pushed: …`) before it.
        let reply = stdout.trim().lines().last().unwrap_or_default();
        serde_json::from_str(reply)
            .unwrap_or_else(|e| panic!("helm-sdkpy printed no JSON ({e}):\n{stdout}"))
    }
}
