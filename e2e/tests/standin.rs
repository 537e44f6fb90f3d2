//! `outpost server --standin-cluster`: the common Kubernetes kinds, API only, driven by
//! the machine's real kubectl (server-side apply, dry runs, tables, edit, watch).

use outpost_testing::{ControlPlane, Kubectl};

const MANIFEST: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
data:
  mode: live
---
apiVersion: v1
kind: Secret
metadata:
  name: credentials
  namespace: shop
type: Opaque
data:
  password: aHVudGVyMg==
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: nginx:1.27
          ports:
            - containerPort: 80
        - name: sidecar
          image: envoyproxy/envoy:v1.31
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: shop
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels:
      app: db
  template:
    metadata:
      labels:
        app: db
    spec:
      containers:
        - name: postgres
          image: postgres:17
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  selector:
    app: web
  ports:
    - port: 80
      targetPort: 80
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
spec:
  rules:
    - host: shop.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: web
                port:
                  number: 80
"#;

fn apply(cp: &ControlPlane, kubectl: &Kubectl, text: &str, extra: &[&str]) -> String {
    let file = cp.scratch().join("standin.yaml");
    std::fs::write(&file, text).unwrap();
    let mut args = vec!["apply", "--server-side", "-f", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    kubectl.ok(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_gets_and_edits_common_kinds() {
    let cp = ControlPlane::start_standin_cluster().await;
    let kubectl = cp.kubectl();

    // Discovery: the core group under /api/v1 and the apps and networking groups.
    let resources = kubectl.ok(&["api-resources", "--no-headers"]);
    for expected in [
        "configmaps",
        "secrets",
        "services",
        "namespaces",
        "deployments",
        "statefulsets",
        "ingresses",
    ] {
        assert!(
            resources.lines().any(|l| l.starts_with(expected)),
            "{expected} missing:\n{resources}"
        );
    }

    // A server-side dry run stores nothing.
    let dry = apply(&cp, &kubectl, MANIFEST, &["--dry-run=server"]);
    assert!(
        dry.contains("deployment.apps/web serverside-applied (server dry run)"),
        "{dry}"
    );
    assert!(!kubectl.run(&["get", "namespace", "shop"]).ok);

    let out = apply(&cp, &kubectl, MANIFEST, &[]);
    for expected in [
        "namespace/shop serverside-applied",
        "configmap/settings serverside-applied",
        "secret/credentials serverside-applied",
        "deployment.apps/web serverside-applied",
        "statefulset.apps/db serverside-applied",
        "service/web serverside-applied",
        "ingress.networking.k8s.io/web serverside-applied",
    ] {
        assert!(out.contains(expected), "{expected}:\n{out}");
    }
    let yaml = kubectl.ok(&[
        "get",
        "deploy",
        "web",
        "-n",
        "shop",
        "-o",
        "yaml",
        "--show-managed-fields",
    ]);
    assert!(
        yaml.contains("image: nginx:1.27") && yaml.contains("manager: kubectl"),
        "{yaml}"
    );
    let table = kubectl.ok(&["get", "deploy,sts,svc,cm,ing", "-n", "shop"]);
    for name in [
        "deployment.apps/web",
        "statefulset.apps/db",
        "service/web",
        "configmap/settings",
        "ingress.networking.k8s.io/web",
    ] {
        assert!(table.contains(name), "{name}:\n{table}");
    }
    let namespaces = kubectl.ok(&["get", "ns", "-o", "name"]);
    assert!(namespaces.contains("namespace/shop"), "{namespaces}");

    // Another manager changing an applied field conflicts, until it forces.
    let scaled = MANIFEST.replace("replicas: 2", "replicas: 4");
    let file = cp.scratch().join("scaled.yaml");
    std::fs::write(&file, &scaled).unwrap();
    let conflict = kubectl.run(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(
        !conflict.ok && conflict.stderr.contains("conflict"),
        "{conflict:?}"
    );
    kubectl.ok(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "--force-conflicts",
        "-f",
        file.to_str().unwrap(),
    ]);
    let replicas = kubectl.jsonpath(&["deploy", "web", "-n", "shop"], "{.spec.replicas}");
    assert_eq!(replicas, "4");

    // kubectl edit sends a strategic merge patch: one container's image changes, the
    // other container and the ports stay.
    let edited = kubectl.edit(
        "s/image: nginx:1.27/image: nginx:1.28/",
        &["deployment", "web", "-n", "shop"],
    );
    assert!(edited.contains("deployment.apps/web edited"), "{edited}");
    let images = kubectl.ok(&["get", "deploy", "web", "-n", "shop", "-o", "jsonpath={.spec.template.spec.containers[*].image} {.spec.template.spec.containers[0].ports[0].containerPort}"]);
    assert_eq!(images, "nginx:1.28 envoyproxy/envoy:v1.31 80");

    // A watch sees another client's change.
    let mut watch = kubectl.watch(&[
        "get",
        "configmaps",
        "-n",
        "shop",
        "-w",
        "-o",
        "custom-columns=NAME:.metadata.name,MODE:.data.mode",
    ]);
    watch.until(30, "initial row", |l| l.contains("live"));
    kubectl.ok(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        "shop",
        "-p",
        r#"{"data":{"mode":"maintenance"}}"#,
    ]);
    watch.until(30, "change to maintenance", |l| l.contains("maintenance"));
    drop(watch);

    // Client-side apply (a strategic merge patch against last-applied) works too.
    let file = cp.scratch().join("client-side.yaml");
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: client\n  namespace: shop\ndata:\n  a: \"1\"\n  b: \"2\"\n";
    std::fs::write(&file, config).unwrap();
    kubectl.ok(&["apply", "-f", file.to_str().unwrap()]);
    std::fs::write(&file, config.replace("  b: \"2\"\n", "  c: \"3\"\n")).unwrap();
    let out = kubectl.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(out.contains("configmap/client configured"), "{out}");
    let data = kubectl.jsonpath(&["cm", "client", "-n", "shop"], "{.data}");
    assert_eq!(data, r#"{"a":"1","c":"3"}"#);

    kubectl.ok(&["delete", "-n", "shop", "ingress", "web"]);
    assert!(!kubectl.run(&["get", "ingress", "web", "-n", "shop"]).ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outpost_kinds_keep_refusing_strategic_merge() {
    let cp = ControlPlane::start_standin_cluster().await;
    let reply = cp
        .patch(
            "/apis/outpost.dev/v1alpha1/namespaces/default/installs/x",
            "application/strategic-merge-patch+json",
            "{}",
        )
        .await;
    assert_eq!(reply.status, 415, "{}", reply.text);
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[],
            "",
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json["kind"], "ConfigMapList");
}
