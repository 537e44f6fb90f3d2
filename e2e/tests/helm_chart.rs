//! The Helm chart `charts/outpost/`, through Helm 4 itself (helm-sdkpy): it lints clean,
//! its values schema refuses bad values naming the field, and `helm install` into the
//! stand-in cluster creates the objects it should, with the bundled etcd and with an
//! external one. Last, the containers it renders run: the API server and controllers
//! Deployments' args, env and Secret volumes, run here as processes on a real etcd that
//! takes only TLS clients with a certificate, serve `/readyz` and elect a leader.
//!
//! Just over 600 lines and kept whole for now: issue 19's CRD tests are landing in it;
//! split it by topic (lint and schema, install, rendered containers) once they have.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_with_the_bundled_etcd() {
    let helm = Helm::find();
    let cluster = ControlPlane::start_standin_cluster().await;
    let ns = "outpost";
    let release = helm
        .install(&cluster, "op", ns, &outpost_chart(), &json!({}))
        .expect("the defaults install");

    let apiserver = get(&cluster, "deployment", ns, "op-outpost");
    assert_eq!(apiserver["spec"]["replicas"], 2);
    assert_locked_down(&apiserver);
    let server = container(&apiserver);
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
        let get = &server[probe]["httpGet"];
        assert_eq!(
            (&get["path"], &get["scheme"], &get["port"]),
            (&json!(path), &json!("HTTPS"), &json!("https")),
            "{probe}"
        );
    }
    let server_args = args(&apiserver);
    assert_eq!(server_args[0], "server");
    let members: Vec<String> = (0..3)
        .map(|i| format!("op-outpost-etcd-{i}.op-outpost-etcd-headless.outpost.svc.cluster.local"))
        .collect();
    let endpoints: Vec<String> = members.iter().map(|m| format!("{m}:2379")).collect();
    assert_eq!(
        flag(&server_args, "store"),
        Some(format!("etcd://{}", endpoints.join(",")))
    );

    let controllers = get(&cluster, "deployment", ns, "op-outpost-controllers");
    assert_eq!(controllers["spec"]["replicas"], 2);
    assert_locked_down(&controllers);
    let controller_args = args(&controllers);
    assert_eq!(controller_args[0], "controllers");
    assert_eq!(
        flag(&controller_args, "server").as_deref(),
        Some("https://op-outpost.outpost.svc:443")
    );
    assert_eq!(
        flag(&controller_args, "identity").as_deref(),
        Some("$(POD_NAME)")
    );

    let etcd = get(&cluster, "statefulset", ns, "op-outpost-etcd");
    assert_eq!(etcd["spec"]["replicas"], 3);
    assert_eq!(etcd["spec"]["serviceName"], "op-outpost-etcd-headless");
    assert_locked_down(&etcd);
    let initial: Vec<String> = (0..3)
        .map(|i| format!("op-outpost-etcd-{i}=https://{}:2380", members[i]))
        .collect();
    let etcd_args = args(&etcd);
    assert_eq!(flag(&etcd_args, "initial-cluster"), Some(initial.join(",")));

    // etcd speaks TLS to clients and peers and takes only certificates of its CA; the
    // API server brings one.
    assert_eq!(
        flag(&etcd_args, "listen-client-urls").as_deref(),
        Some("https://0.0.0.0:2379")
    );
    for (name, value) in [
        ("cert-file", "/etc/etcd/tls/server.crt"),
        ("key-file", "/etc/etcd/tls/server.key"),
        ("trusted-ca-file", "/etc/etcd/tls/ca.crt"),
        ("peer-cert-file", "/etc/etcd/tls/server.crt"),
        ("peer-trusted-ca-file", "/etc/etcd/tls/ca.crt"),
    ] {
        assert_eq!(flag(&etcd_args, name).as_deref(), Some(value), "{name}");
    }
    for switch in ["--client-cert-auth", "--peer-client-cert-auth"] {
        assert!(
            etcd_args.iter().any(|a| a == switch),
            "{switch}: {etcd_args:?}"
        );
    }
    for (name, value) in [
        ("etcd-cafile", "/etc/outpost/etcd-tls/ca.crt"),
        ("etcd-certfile", "/etc/outpost/etcd-tls/client.crt"),
        ("etcd-keyfile", "/etc/outpost/etcd-tls/client.key"),
    ] {
        assert_eq!(flag(&server_args, name).as_deref(), Some(value), "{name}");
    }
    for key in [
        "ca.crt",
        "server.crt",
        "server.key",
        "client.crt",
        "client.key",
    ] {
        let pem =
            String::from_utf8(secret_value(&cluster, ns, "op-outpost-etcd-tls", key)).expect("PEM");
        assert!(pem.starts_with("-----BEGIN "), "{key}: {pem}");
    }
    // Only the API server's pods reach etcd's client port, only members its peer port.
    let policy = get(&cluster, "networkpolicy", ns, "op-outpost-etcd");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        etcd["spec"]["selector"]["matchLabels"]
    );
    let ingress = policy["spec"]["ingress"].as_array().expect("ingress rules");
    let from = |port: &str| {
        ingress
            .iter()
            .find(|rule| rule["ports"][0]["port"] == port)
            .map(|rule| rule["from"].clone())
            .unwrap_or_else(|| panic!("no rule for port {port}: {policy}"))
    };
    assert_eq!(
        from("client"),
        json!([{"podSelector": {"matchLabels": apiserver["spec"]["selector"]["matchLabels"]}}])
    );
    assert_eq!(
        from("peer"),
        json!([{"podSelector": {"matchLabels": etcd["spec"]["selector"]["matchLabels"]}}])
    );
    let headless = get(&cluster, "service", ns, "op-outpost-etcd-headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");

    let pdb = get(&cluster, "poddisruptionbudget", ns, "op-outpost");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        apiserver["spec"]["selector"]["matchLabels"]
    );
    let service = get(&cluster, "service", ns, "op-outpost");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "https");

    // Generated credentials: the controllers' token is an admin's in the token file.
    let tokens =
        String::from_utf8(secret_value(&cluster, ns, "op-outpost-auth", "tokens.csv")).unwrap();
    let token = String::from_utf8(secret_value(
        &cluster,
        ns,
        "op-outpost-auth",
        "controllers-token",
    ))
    .unwrap();
    assert!(
        tokens
            .lines()
            .any(|l| l.starts_with(&format!("{token},")) && l.ends_with(",\"outpost:admins\"")),
        "{tokens}"
    );
    let tls = get(&cluster, "secret", ns, "op-outpost-tls");
    assert_eq!(tls["type"], "kubernetes.io/tls");

    assert!(
        release
            .notes
            .contains("kubectl -n outpost port-forward service/op-outpost 8443:443"),
        "{}",
        release.notes
    );
    assert!(
        release.notes.contains(
            "\n\nRunners dial https://op-outpost.outpost.svc:443 (written into every install stack).\n\nWARNING: controllers.publicUrl is not set"
        ),
        "{}",
        release.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_with_an_external_etcd() {
    let helm = Helm::find();
    let cluster = ControlPlane::start_standin_cluster().await;
    let ns = "outpost";
    let values = json!({
        "etcd": {
            "mode": "external",
            "external": {"endpoints": ["etcd-a.db:2379", "etcd-b.db:2379"]},
            "tls": {"existingSecret": "my-etcd-client"},
        },
        // Each replica's URL: the runner fails over between them.
        "controllers": {"publicUrl": "https://outpost-0.example.com,https://outpost-1.example.com:6443"},
        "serviceMonitor": {"enabled": true},
    });
    let release = helm
        .install(&cluster, "op", ns, &outpost_chart(), &values)
        .expect("installs");

    let apiserver = get(&cluster, "deployment", ns, "op-outpost");
    assert_eq!(
        flag(&args(&apiserver), "store").as_deref(),
        Some("etcd://etcd-a.db:2379,etcd-b.db:2379")
    );
    assert!(names(&cluster, "statefulsets", ns).is_empty());
    assert!(names(&cluster, "networkpolicies", ns).is_empty());
    // The client certificate comes from the user's Secret; none is generated.
    let etcd_tls = apiserver["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "etcd-tls")
        .expect("the etcd-tls volume");
    assert_eq!(etcd_tls["secret"]["secretName"], "my-etcd-client");
    assert!(!names(&cluster, "secrets", ns).contains(&"op-outpost-etcd-tls".to_owned()));
    assert_eq!(names(&cluster, "services", ns), ["op-outpost"]);
    let controllers = get(&cluster, "deployment", ns, "op-outpost-controllers");
    let public_url = container(&controllers)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "OUTPOST_PUBLIC_URL")
        .map(|e| e["value"].clone());
    assert_eq!(
        public_url,
        Some(json!(
            "https://outpost-0.example.com,https://outpost-1.example.com:6443"
        ))
    );

    // The stand-in cluster serves no ServiceMonitor kind: none is rendered, and the
    // notes say so.
    assert!(!release.manifest.contains("kind: ServiceMonitor"));
    assert!(
        release
            .notes
            .contains("WARNING: serviceMonitor.enabled is set"),
        "{}",
        release.notes
    );
    assert!(!release.notes.contains("controllers.publicUrl is not set"));
    assert!(
        release.notes.contains(
            "\n\nRunners dial one of https://outpost-0.example.com, https://outpost-1.example.com:6443 (written into every install stack):\n"
        ),
        "{}",
        release.notes
    );
}

/// A container of a workload the chart created, made runnable here: its args and env
/// with Secret volumes and `secretKeyRef`s read from the cluster and written into
/// `dir` (the mount paths in args rewritten to it), `fieldRef metadata.name` set to
/// `pod`, and `$(VAR)` references expanded, as a kubelet would.
fn local_container(
    cluster: &ControlPlane,
    namespace: &str,
    workload: &Value,
    pod: &str,
    dir: &Path,
) -> (Vec<String>, Vec<(String, String)>) {
    let spec = &workload["spec"]["template"]["spec"];
    let container = container(workload);
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = mount["name"].as_str().unwrap();
        let local = dir.join(name);
        std::fs::create_dir_all(&local).unwrap();
        let volume = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .expect("every mount has a volume");
        if let Some(secret) = volume["secret"]["secretName"].as_str() {
            for item in volume["secret"]["items"].as_array().unwrap() {
                let data = secret_value(cluster, namespace, secret, item["key"].as_str().unwrap());
                std::fs::write(local.join(item["path"].as_str().unwrap()), data).unwrap();
            }
        }
        mounts.push((mount["mountPath"].as_str().unwrap().to_owned(), local));
    }
    let mut env = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let from = &var["valueFrom"];
        let value = if let Some(value) = var["value"].as_str() {
            value.to_owned()
        } else if from["fieldRef"]["fieldPath"] == "metadata.name" {
            pod.to_owned()
        } else if let Some(secret) = from["secretKeyRef"]["name"].as_str() {
            let key = from["secretKeyRef"]["key"].as_str().unwrap();
            String::from_utf8(secret_value(cluster, namespace, secret, key)).unwrap()
        } else {
            panic!("unexpected env source {var}");
        };
        env.push((var["name"].as_str().unwrap().to_owned(), value));
    }
    let args = args(workload)
        .into_iter()
        .map(|mut arg| {
            // `--flag=/mount/path/file`: the mount's local directory instead.
            if let Some((flag, value)) = arg.split_once('=')
                && let Some((path, local)) = mounts
                    .iter()
                    .find(|(path, _)| value.starts_with(&format!("{path}/")))
            {
                arg = format!("{flag}={}{}", local.display(), &value[path.len()..]);
            }
            for (name, value) in &env {
                arg = arg.replace(&format!("$({name})"), value);
            }
            arg
        })
        .collect();
    (args, env)
}

fn spawn(args: &[String], env: &[(String, String)]) -> Process {
    Process::new(
        Command::new(outpost_binary())
            .args(args)
            .envs(env.iter().cloned())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("outpost starts"),
    )
}

fn replace_flag(args: &mut [String], name: &str, value: &str) {
    let prefix = format!("--{name}=");
    let at = args
        .iter()
        .position(|a| a.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {args:?}"));
    args[at] = format!("{prefix}{value}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_containers_serve_and_elect_a_leader() {
    let helm = Helm::find();
    let cluster = ControlPlane::start_standin_cluster().await;
    // An etcd that serves only TLS clients with a certificate of its CA; the Secret with
    // that CA and a client certificate is the user's (etcd.tls.existingSecret).
    let etcd = TlsEtcd::start().await;
    let ns = "outpost";
    let pem = |path: &Path| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
    };
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "etcd-client", "namespace": ns},
        "data": {
            "ca.crt": pem(&etcd.pki.ca),
            "client.crt": pem(&etcd.pki.client.0),
            "client.key": pem(&etcd.pki.client.1),
        },
    });
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret_file.path(), secret.to_string()).unwrap();
    cluster
        .kubectl()
        .ok(&["apply", "-f", secret_file.path().to_str().unwrap()]);
    let endpoint = format!("127.0.0.1:{}", etcd.port);
    let values = json!({"etcd": {
        "mode": "external",
        "external": {"endpoints": [endpoint]},
        "tls": {"existingSecret": "etcd-client"},
    }});
    helm.install(&cluster, "op", ns, &outpost_chart(), &values)
        .expect("installs");
    let dir = tempfile::tempdir().unwrap();

    // The API server, on loopback instead of 0.0.0.0 (the generated certificate also
    // names 127.0.0.1, for port-forwards).
    let apiserver = get(&cluster, "deployment", ns, "op-outpost");
    let (mut server_args, server_env) = local_container(
        &cluster,
        ns,
        &apiserver,
        "op-outpost-0",
        &dir.path().join("apiserver"),
    );
    assert_eq!(
        flag(&server_args, "listen").as_deref(),
        Some("0.0.0.0:6443")
    );
    let port = outpost_testing::free_port();
    replace_flag(&mut server_args, "listen", &format!("127.0.0.1:{port}"));
    let _server = spawn(&server_args, &server_env);
    let url = format!("https://127.0.0.1:{port}");
    let ca = secret_value(&cluster, ns, "op-outpost-tls", "ca.crt");
    let admin =
        String::from_utf8(secret_value(&cluster, ns, "op-outpost-auth", "admin-token")).unwrap();
    let client = |token: Option<&str>| {
        let mut config = kube_client::Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![pem_body(&ca)]);
        config.auth_info.token = token.map(|t| t.to_owned().into());
        config.default_retry = false;
        kube_client::Client::try_from(config).unwrap()
    };
    let readiness = container(&apiserver)["readinessProbe"]["httpGet"]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(30, "the API server's readiness probe to pass", async || {
        let request = http::Request::get(readiness.as_str())
            .body(kube_client::client::Body::empty())
            .unwrap();
        let response = client(None).send(request).await.ok()?;
        (response.status() == 200).then_some(())
    })
    .await;

    // The controllers, dialling that server with the generated CA and token.
    let controllers = get(&cluster, "deployment", ns, "op-outpost-controllers");
    let pod = "op-outpost-controllers-5d8f7-x2x9q";
    let (mut controller_args, controller_env) = local_container(
        &cluster,
        ns,
        &controllers,
        pod,
        &dir.path().join("controllers"),
    );
    replace_flag(&mut controller_args, "server", &url);
    let _controllers = spawn(&controller_args, &controller_env);
    let leases: kube_client::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube_client::Api::namespaced(client(Some(&admin)), "default");
    let holder = eventually(30, "the controllers to take the lease", async || {
        let lease = leases.get_opt("outpost-controllers").await.ok()??;
        lease.spec?.holder_identity
    })
    .await;
    assert_eq!(holder, pod);
}

/// The DER of a one-certificate PEM.
fn pem_body(pem: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(pem);
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM body is base64")
}
