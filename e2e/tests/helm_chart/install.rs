//! `helm install` of the chart into the stand-in cluster, with the bundled etcd and with
//! an external one: the objects it creates, locked down.

use super::*;

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
