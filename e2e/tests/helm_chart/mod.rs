//! The Helm chart `charts/outpost/`, through Helm 4 itself (helm-sdkpy): it lints clean,
//! its values schema refuses bad values naming the field, and `helm install` into the
//! stand-in cluster creates the objects it should, with the bundled etcd and with an
//! external one. Last, the containers it renders run: the API server and controllers
//! Deployments' args, env and Secret volumes, run here as processes on a real etcd that
//! takes only TLS clients with a certificate, serve `/readyz` and elect a leader.
//!
//! Here: lint and the values schema; `install`: helm install with the bundled and an
//! external etcd; `containers`: the rendered containers run as processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use outpost_testing::helm::{Helm, LINT_ERROR, LINT_WARNING, outpost_chart};
use outpost_testing::{ControlPlane, Process, TlsEtcd, eventually, outpost_binary};
use serde_json::{Value, json};

/// An object the release created, read back from the stand-in cluster.
fn get(cluster: &ControlPlane, kind: &str, namespace: &str, name: &str) -> Value {
    let text = cluster
        .kubectl()
        .ok(&["get", kind, name, "-n", namespace, "-o", "json"]);
    serde_json::from_str(&text).expect("kubectl printed JSON")
}

/// Names of the objects of `kind` in `namespace`.
fn names(cluster: &ControlPlane, kind: &str, namespace: &str) -> Vec<String> {
    let text = cluster.kubectl().ok(&[
        "get",
        kind,
        "-n",
        namespace,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    text.split_whitespace().map(str::to_owned).collect()
}

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

fn args(workload: &Value) -> Vec<String> {
    container(workload)["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().expect("string args").to_owned())
        .collect()
}

/// The value of `--NAME=VALUE` among `args`.
fn flag(args: &[String], name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    args.iter()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

fn secret_value(cluster: &ControlPlane, namespace: &str, name: &str, key: &str) -> Vec<u8> {
    let secret = get(cluster, "secret", namespace, name);
    let data = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("secret {name} has no key {key}"));
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("secret data is base64")
}

/// Pods run as a non-root user with a read-only root filesystem, no privilege
/// escalation and no capabilities.
fn assert_locked_down(workload: &Value) {
    let name = &workload["metadata"]["name"];
    let pod = &workload["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
    let context = &container(workload)["securityContext"];
    assert_eq!(context["runAsNonRoot"], true, "{name}");
    assert_eq!(context["readOnlyRootFilesystem"], true, "{name}");
    assert_eq!(context["allowPrivilegeEscalation"], false, "{name}");
    assert_eq!(context["capabilities"]["drop"], json!(["ALL"]), "{name}");
    let resources = &container(workload)["resources"];
    assert!(
        resources["requests"]["memory"].is_string() && resources["limits"]["memory"].is_string(),
        "{name} has requests and limits: {resources}"
    );
}

#[test]
fn the_chart_lints_clean_and_lint_sees_a_bad_default() {
    let helm = Helm::find();
    let messages = helm.lint(&outpost_chart());
    let problems: Vec<_> = messages
        .iter()
        .filter(|m| m.severity >= LINT_WARNING)
        .collect();
    assert!(
        problems.is_empty(),
        "helm lint --strict would fail (warnings or errors): {problems:?}"
    );

    // The same chart with a default the schema refuses: lint reports an error on values.yaml.
    let copy = tempfile::tempdir().unwrap();
    let chart = copy.path().join("outpost");
    copy_dir(&outpost_chart(), &chart);
    let values = std::fs::read_to_string(chart.join("values.yaml")).unwrap();
    let bad = values.replacen("  replicas: 2\n", "  replicas: two\n", 1);
    assert_ne!(bad, values, "values.yaml sets the API server's replicas");
    std::fs::write(chart.join("values.yaml"), bad).unwrap();
    let messages = helm.lint(&chart);
    assert!(
        messages
            .iter()
            .any(|m| m.severity == LINT_ERROR && m.path == "values.yaml"),
        "lint reports the bad default: {messages:?}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_refuses_bad_values_naming_the_field() {
    let helm = Helm::find();
    let cluster = ControlPlane::start_standin_cluster().await;
    let refused = |values: Value| {
        helm.install(&cluster, "bad", "outpost", &outpost_chart(), &values)
            .expect_err("the schema refuses the values")
    };

    let error = refused(json!({"apiserver": {"replicas": "two"}}));
    assert!(
        error.contains("at '/apiserver/replicas'") && error.contains("want integer"),
        "{error}"
    );
    let error = refused(json!({"apiserver": {"replica": 3}}));
    assert!(
        error.contains("at '/apiserver'") && error.contains("'replica' not allowed"),
        "{error}"
    );
    let error = refused(json!({"etcd": {"mode": "external"}}));
    assert!(error.contains("at '/etcd/external/endpoints'"), "{error}");
    let error = refused(
        json!({"etcd": {"mode": "external", "external": {"endpoints": ["etcd-a.db:2379"]}}}),
    );
    assert!(
        error.contains("etcd.tls.existingSecret: an external etcd with TLS needs your Secret"),
        "{error}"
    );
    let error = refused(json!({"etcd": {"bundled": {"replicas": 2}}}));
    assert!(error.contains("at '/etcd/bundled/replicas'"), "{error}");
    let error = refused(json!({"securityContext": {"readOnlyRootFilesystem": false}}));
    assert!(
        error.contains("at '/securityContext/readOnlyRootFilesystem'"),
        "{error}"
    );
    for url in [
        "http://plain.example.com",
        "https://a.example.com,http://plain.example.com",
        "https://a.example.com,",
    ] {
        let error = refused(json!({"controllers": {"publicUrl": url}}));
        assert!(
            error.contains("at '/controllers/publicUrl'"),
            "{url}: {error}"
        );
    }

    assert!(
        names(&cluster, "deployments", "outpost").is_empty(),
        "nothing is installed from refused values"
    );
}

mod containers;
mod install;
