//! The containers the chart renders, run here as processes on a real etcd that takes
//! only TLS clients with a certificate: they serve `/readyz` and elect a leader.

use super::*;

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
