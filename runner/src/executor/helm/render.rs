//! Rendering a chart with Helm's own engine: `helm template`, run as a child process.
//!
//! The binary is the runner's `--helm` (default `helm`). Tests give a shim with the same
//! command line over helm-sdkpy, the Python binding that embeds Helm 4's Go SDK
//! (`testing/helm/helm_template.py`): either way Helm renders, nothing here reads a
//! template.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube_client::discovery::Discovery;
use serde_json::{Map, Value};
use tokio::process::Command;

use crate::executor::child::{self, OUTPUT_LIMIT};
use crate::executor::terraform::module_paths;

/// Runs `helm template` with `.Capabilities` from the install's cluster.
#[derive(Clone)]
pub struct Renderer {
    binary: PathBuf,
    client: kube_client::Client,
    kubeconfig: EngineKubeconfig,
}

/// What `helm template` gets as `KUBECONFIG` (which it does not contact the cluster
/// with: `.Capabilities` are passed as flags; the tests' engine reads discovery there).
#[derive(Clone)]
enum EngineKubeconfig {
    /// Nothing.
    None,
    /// The runner's `--kubeconfig`.
    File(PathBuf),
    /// A Plan's cluster under its role ([`crate::eks::Cluster::kubeconfig`], its token
    /// included), written into the Plan's work directory (0600, only the runner reads
    /// it) for each rendering and removed when it ends.
    PerRendering { kubeconfig: Value, dir: PathBuf },
}

/// The chart a Plan deploys, resolved: where it is, its namespace and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The chart: a directory under a chart root, or the archive pulled from the
    /// install's registry (empty until it is pulled).
    pub directory: PathBuf,
    /// The chart is in an OCI registry (`oci://`): it is pulled before it is rendered.
    pub from_registry: bool,
    /// The release namespace: `helm.namespace`, else `default`.
    pub namespace: String,
    /// The values tree, from `helm.values`' dotted paths.
    pub values: Value,
}

impl Chart {
    /// The chart `desired` (`helm`, or `component.helm`) names, checked: a local
    /// directory under one of `roots`, values without secret references.
    pub fn of(desired: &Value, roots: &[PathBuf]) -> anyhow::Result<Chart> {
        let source = desired
            .get("helm")
            .or_else(|| desired.pointer("/component/helm"))
            .context("the desired state has no `helm` (a helm_chart component)")?;
        let chart = source
            .get("chart")
            .and_then(Value::as_str)
            .context("the helm source has no `chart`")?;
        let from_registry = chart.starts_with(outpost_api::chart_source::OCI_SCHEME)
            || source.get("repository").is_some_and(|r| !r.is_null());
        let directory = if from_registry {
            PathBuf::new()
        } else {
            let path = Path::new(chart.strip_prefix("file://").unwrap_or(chart));
            if !path.is_absolute() {
                bail!("chart {chart}: a local chart is an absolute directory or a file:// URL");
            }
            module_paths::source(path, roots).map_err(|e| anyhow::anyhow!("chart {chart}: {e}"))?
        };
        let mut values = Value::Object(Map::new());
        let set: BTreeMap<String, String> = match source.get("values") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(values) => serde_json::from_value(values.clone())
                .context("helm.values is not a map of dotted paths to strings")?,
        };
        for (path, value) in &set {
            if value.contains("${outpost-secret:") {
                bail!(
                    "helm.values.{path} references a secret: rendered values are in the diff, \
                     so a chart's values cannot hold secrets"
                );
            }
            insert_value(&mut values, path, typed(value))?;
        }
        Ok(Chart {
            directory,
            from_registry,
            namespace: source
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned(),
            values,
        })
    }
}

/// `value` typed as `helm --set` types it: `true`/`false`, `null`, integers; anything
/// else a string.
fn typed(value: &str) -> Value {
    match value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        _ => match value.parse::<i64>() {
            Ok(n) if !value.starts_with('0') || value == "0" => Value::from(n),
            _ => Value::String(value.to_owned()),
        },
    }
}

/// Sets `path` (`a.b.c`, `\.` for a dot inside a key) in `tree`.
fn insert_value(tree: &mut Value, path: &str, value: Value) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    let mut key = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.clone().next() == Some('.') => {
                key.push('.');
                chars.next();
            }
            '.' => keys.push(std::mem::take(&mut key)),
            c => key.push(c),
        }
    }
    keys.push(key);
    if keys.iter().any(String::is_empty) {
        bail!("helm.values: `{path}` has an empty key");
    }
    let (last, parents) = keys.split_last().expect("split yields one key at least");
    let mut node = tree;
    for key in parents {
        let map = node
            .as_object_mut()
            .with_context(|| format!("helm.values: `{path}` goes through a value"))?;
        node = map
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    node.as_object_mut()
        .with_context(|| format!("helm.values: `{path}` goes through a value"))?
        .insert(last.clone(), value);
    Ok(())
}

impl Renderer {
    /// Renders with `binary`; `.Capabilities` are read with `client`. `kubeconfig` (the
    /// runner's) is passed as `KUBECONFIG`, which `helm template` does not contact the
    /// cluster with.
    pub fn new(binary: PathBuf, client: kube_client::Client, kubeconfig: Option<PathBuf>) -> Self {
        Renderer {
            binary,
            client,
            kubeconfig: kubeconfig.map_or(EngineKubeconfig::None, EngineKubeconfig::File),
        }
    }

    /// Renders with `binary` for a Plan's cluster reached under its role: `client` is
    /// [`crate::eks::client_of`] `kubeconfig`, which `helm template` gets as a file in
    /// `dir` (the Plan's work directory) that lives only while it runs.
    pub fn for_plan_cluster(
        binary: PathBuf,
        client: kube_client::Client,
        kubeconfig: Value,
        dir: PathBuf,
    ) -> Self {
        Renderer {
            binary,
            client,
            kubeconfig: EngineKubeconfig::PerRendering { kubeconfig, dir },
        }
    }

    /// `--kube-version` and `--api-versions` of the cluster: its version, and each
    /// group/version and group/version/kind it serves.
    async fn capabilities(&self) -> anyhow::Result<(String, Vec<String>)> {
        let version = self
            .client
            .apiserver_version()
            .await
            .context("cannot read the cluster's version for .Capabilities")?;
        let discovery = Discovery::new(self.client.clone())
            .run()
            .await
            .context("cannot discover the cluster's APIs for .Capabilities")?;
        let mut api_versions = Vec::new();
        for group in discovery.groups() {
            for version in group.versions() {
                let group_version = match group.name() {
                    "" => version.to_owned(),
                    name => format!("{name}/{version}"),
                };
                for (resource, _) in group.versioned_resources(version) {
                    api_versions.push(format!("{group_version}/{}", resource.kind));
                }
                api_versions.push(group_version);
            }
        }
        api_versions.sort();
        api_versions.dedup();
        Ok((version.git_version, api_versions))
    }

    /// `helm template RELEASE CHART`: the rendered objects, CRDs included, tests left
    /// out, as one multi-document YAML stream.
    pub async fn template(
        &self,
        release: &str,
        chart: &Chart,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let (kube_version, api_versions) = self.capabilities().await?;
        let values = tempfile::Builder::new()
            .prefix("helm-values")
            .suffix(".json")
            .tempfile()
            .context("cannot create the values file")?;
        std::fs::write(values.path(), serde_json::to_vec(&chart.values)?)
            .context("cannot write the values file")?;
        let mut command = Command::new(&self.binary);
        command
            .arg("template")
            .arg(release)
            .arg(&chart.directory)
            .arg("--namespace")
            .arg(&chart.namespace)
            .arg("--values")
            .arg(values.path())
            .args(["--include-crds", "--skip-tests", "--kube-version"])
            .arg(&kube_version)
            .arg("--api-versions")
            .arg(api_versions.join(","));
        // Removed when dropped, after the rendering.
        let _written = match &self.kubeconfig {
            EngineKubeconfig::None => None,
            EngineKubeconfig::File(path) => {
                command.env("KUBECONFIG", path);
                None
            }
            EngineKubeconfig::PerRendering { kubeconfig, dir } => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                // tempfile creates it 0600.
                let file = tempfile::Builder::new()
                    .prefix("kubeconfig")
                    .suffix(".json")
                    .tempfile_in(dir)
                    .context("cannot create the engine's kubeconfig")?;
                std::fs::write(file.path(), serde_json::to_vec(kubeconfig)?)
                    .context("cannot write the engine's kubeconfig")?;
                command.env("KUBECONFIG", file.path());
                Some(file)
            }
        };
        let done = child::run(command, timeout, OUTPUT_LIMIT, true)
            .await
            .with_context(|| format!("helm template of {} failed", chart.directory.display()))?;
        if !done.status.success() {
            bail!(
                "helm template of {} failed (exit {}):\n{}",
                chart.directory.display(),
                done.exit_code(),
                done.output.trim_end()
            );
        }
        String::from_utf8(done.stdout).context("helm template printed something not UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_dotted_paths_typed_as_helm_set_types_them() {
        let mut tree = json!({});
        for (path, value) in [
            ("web.replicas", "3"),
            ("web.enabled", "false"),
            ("web.image.tag", "1.2"),
            ("web.zip", "0123"),
            ("annotations.example\\.com/team", "shop"),
        ] {
            insert_value(&mut tree, path, typed(value)).unwrap();
        }
        assert_eq!(
            tree,
            json!({"web": {"replicas": 3, "enabled": false, "image": {"tag": "1.2"}, "zip": "0123"},
                   "annotations": {"example.com/team": "shop"}})
        );
        let err = insert_value(&mut tree, "web.replicas.x", json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "helm.values: `web.replicas.x` goes through a value"
        );
        assert!(insert_value(&mut tree, "web..x", json!(1)).is_err());
    }

    #[test]
    fn charts_from_registries_and_secret_values_are_refused() {
        let refused = |helm: Value| {
            Chart::of(&json!({"helm": helm}), &[PathBuf::from("/")])
                .unwrap_err()
                .to_string()
        };
        let oci = Chart::of(
            &json!({"helm": {"chart": "oci://registry.example/charts/shop"}}),
            &[],
        )
        .unwrap();
        assert!(oci.from_registry);
        let http = Chart::of(
            &json!({"helm": {"chart": "shop", "repository": "https://charts.example"}}),
            &[],
        )
        .unwrap();
        assert!(http.from_registry);
        assert!(refused(json!({"chart": "shop"})).contains("absolute directory"));
        let dir = tempfile::tempdir().unwrap();
        let chart = dir.path().to_str().unwrap();
        assert!(
            refused(json!({"chart": chart, "values": {"db.password": "${outpost-secret:db}"}}))
                .starts_with("helm.values.db.password references a secret")
        );
        let outside = Chart::of(&json!({"helm": {"chart": chart}}), &[]).unwrap_err();
        assert!(outside.to_string().contains("--module-root"), "{outside}");
        let ok = Chart::of(
            &json!({"helm": {"chart": chart, "namespace": "shop", "values": {"a": "1"}}}),
            &[dir.path().to_owned()],
        )
        .unwrap();
        assert_eq!(
            (ok.namespace.as_str(), &ok.values),
            ("shop", &json!({"a": 1}))
        );
    }
}
