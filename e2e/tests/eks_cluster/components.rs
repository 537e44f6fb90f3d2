//! Components reaching the cluster without a kubeconfig, by name only.

use super::*;

#[tokio::test]
async fn a_plan_without_a_kubeconfig_deploys_under_its_role_and_maintenance_is_refused() {
    let s = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = PlanRoleClusterExecutor::manifests();
    let admin: Api<ConfigMap> = Api::namespaced(s.cluster.client().await, "shop");

    let ctx = s.step(&s.provision, dir.path(), "web-config");
    let diff = executor.plan(&ctx).await.expect("the provision role plans");
    assert!(diff.changes, "{}", diff.summary);
    executor
        .apply(&ctx, &diff)
        .await
        .expect("the provision role applies");
    let applied = admin.get("web-config").await.unwrap();
    assert_eq!(applied.data.unwrap()["tier"], "web");

    let ctx = s.step(&s.maintenance, dir.path(), "maintenance-config");
    let error = executor
        .plan(&ctx)
        .await
        .expect_err("the maintenance role cannot write a ConfigMap");
    let message = format!("{error:#}");
    assert!(
        message.contains("forbidden") && message.contains("maintenance:plan-1"),
        "{message}"
    );
    assert!(admin.get_opt("maintenance-config").await.unwrap().is_none());

    // A Plan that resolved no AWS role has no way in.
    let mut ctx = s.step(&s.provision, dir.path(), "roleless");
    ctx.env.clear();
    let error = executor.plan(&ctx).await.expect_err("no role, no token");
    assert!(
        format!("{error:#}").contains("resolved no AWS role"),
        "{error:#}"
    );
}

/// A `helm_chart` without a kubeconfig: Helm renders with `.Capabilities` of the
/// cluster EKS names (read under the Plan's role; the engine's kubeconfig lives only
/// while it renders), the provision role's Plan applies the chart's objects, the
/// maintenance role's is refused by the cluster's RBAC and stores nothing.
#[tokio::test]
async fn a_chart_without_a_kubeconfig_deploys_under_its_role_and_maintenance_is_refused() {
    let s = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let charts = dir.path().join("charts");
    let chart = charts.join("shop");
    copy_shop_chart(&chart, &[]);
    let helm = Helm::find().template_binary(dir.path());
    let executor = PlanRoleClusterExecutor::helm(helm, vec![charts.clone()]);
    let chart_step = |credentials: &Credentials, release: &str| {
        let mut ctx = s.step(credentials, dir.path(), release);
        ctx.desired = json!({"type": "helm_chart", "cluster": {"name": CLUSTER},
            "helm": {"chart": chart, "namespace": "shop", "values": {"greeting": "hi"}}});
        ctx
    };
    let admin: Api<ConfigMap> = Api::namespaced(s.cluster.client().await, "shop");

    let ctx = chart_step(&s.provision, "shop");
    let diff = executor
        .plan(&ctx)
        .await
        .expect("the provision role plans the chart");
    assert!(diff.changes, "{}", diff.summary);
    executor
        .apply(&ctx, &diff)
        .await
        .expect("the provision role applies the chart");
    let data = admin.get("shop-web").await.unwrap().data.unwrap();
    assert_eq!(data["greeting"], "hi");
    // .Capabilities are the cluster's, read with the Plan role's token.
    assert_eq!(data["hasDeployments"], "true");
    assert!(data["kubeVersion"].starts_with("v1."), "{data:?}");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(s.cluster.client().await, "shop");
    assert!(deployments.get_opt("shop-web").await.unwrap().is_some());
    // The engine's kubeconfig (with the token) is gone once it rendered.
    let left: Vec<_> = walk(&ctx.work_dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("kubeconfig")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");

    let ctx = chart_step(&s.maintenance, "maintained");
    let error = executor
        .plan(&ctx)
        .await
        .expect_err("the maintenance role cannot write the chart's objects");
    let message = format!("{error:#}");
    assert!(
        message.contains("forbidden") && message.contains("maintenance:plan-1"),
        "{message}"
    );
    assert!(admin.get_opt("maintained-web").await.unwrap().is_none());
    assert!(
        deployments
            .get_opt("maintained-web")
            .await
            .unwrap()
            .is_none()
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The vendor names its own server as the cluster's endpoint (a recording proxy in
/// front of the real cluster, which would pass the token on): the Plan fails naming the
/// mismatch and the proxy sees no connection, so no token; a CA other than the
/// cluster's fails the same way. The same block naming the endpoint and CA EKS reports
/// deploys.
#[tokio::test]
async fn a_component_naming_another_endpoint_fails_and_no_token_leaves() {
    let s = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = PlanRoleClusterExecutor::manifests();
    let collector = RecordingProxy::start(&s.cluster.url, &s.cluster.tls).await;
    let ca = ca_of(&s.cluster);

    let foreign =
        json!({"name": CLUSTER, "endpoint": collector.url, "certificateAuthorityData": ca});
    let ctx = step(&s.moto, &s.provision, dir.path(), "harvested", foreign);
    let error = executor
        .plan(&ctx)
        .await
        .expect_err("another endpoint is refused");
    let message = format!("{error:#}");
    let expected = format!(
        "the component's cluster.endpoint {} is not the endpoint EKS reports for cluster {CLUSTER} ({})",
        collector.url, s.cluster.url
    );
    assert!(message.contains(&expected), "{message}");
    // Drift's reading goes the same way (every step builds its client alike).
    let error = executor
        .observe(&ctx, &json!({}))
        .await
        .expect_err("and so is drift's");
    assert!(format!("{error:#}").contains(&expected), "{error:#}");
    assert_eq!(
        collector.connections(),
        0,
        "the vendor's server was reached"
    );
    assert!(!String::from_utf8_lossy(&collector.requests()).contains(eks::TOKEN_PREFIX));
    assert!(!s.stored("harvested").await);

    let other_ca = base64::engine::general_purpose::STANDARD.encode("-----BEGIN CERTIFICATE-----");
    let wrong_ca =
        json!({"name": CLUSTER, "endpoint": s.cluster.url, "certificateAuthorityData": other_ca});
    let ctx = step(&s.moto, &s.provision, dir.path(), "wrong-ca", wrong_ca);
    let error = executor
        .plan(&ctx)
        .await
        .expect_err("another CA is refused");
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!(
            "cluster.certificateAuthorityData ({} characters) is not the certificate authority EKS reports for cluster {CLUSTER}",
            other_ca.len()
        )),
        "{message}"
    );
    assert!(!s.stored("wrong-ca").await);

    let own = json!({"name": CLUSTER, "endpoint": format!("{}/", s.cluster.url), "certificateAuthorityData": ca});
    let ctx = step(&s.moto, &s.provision, dir.path(), "named-in-full", own);
    let diff = executor
        .plan(&ctx)
        .await
        .expect("the cluster's own endpoint and CA plan");
    executor.apply(&ctx, &diff).await.expect("and apply");
    let admin: Api<ConfigMap> = Api::namespaced(s.cluster.client().await, "shop");
    assert!(admin.get_opt("named-in-full").await.unwrap().is_some());
    assert_eq!(collector.connections(), 0);
}

/// `spec.cluster` of a Component: the admin may name a manifest's cluster (by name: the
/// endpoint is optional; or by a kubeconfig secret reference); a cluster on another
/// type, without a name, with a plain-text kubeconfig or with both is 422 and a viewer's
/// write 403, nothing stored either way.
#[tokio::test]
async fn a_components_cluster_is_admitted_only_by_name_on_a_manifest() {
    let cp = ControlPlane::start(outpost_testing::Backend::Embedded).await;
    let components = "/apis/outpost.dev/v1alpha1/namespaces/default/components";
    let json = [("content-type", "application/json")];
    let component = |name: &str, type_: &str, cluster: serde_json::Value| {
        let mut spec = json!({"app": "shopfront", "type": type_, "cluster": cluster});
        match type_ {
            "kubernetes_manifest" => {
                spec["manifest"] =
                    json!({"content": "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n"})
            }
            _ => spec["job"] = json!({"image": "busybox:1.36", "command": ["true"]}),
        }
        json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
               "metadata": {"name": name}, "spec": spec})
        .to_string()
    };
    let full = json!({"name": "{{ sandbox.outputs.cluster_name }}",
                      "endpoint": "{{ sandbox.outputs.cluster_endpoint }}"});
    let stored = async |name: &str| {
        cp.raw(
            Some(&cp.admin_token),
            "GET",
            &format!("{components}/{name}"),
            &[],
            "",
        )
        .await
        .status
    };

    let post = async |token: &str, body: String| {
        cp.raw(Some(token), "POST", components, &json, body).await
    };
    let manifest = "kubernetes_manifest";
    let (admin, viewer) = (&cp.admin_token, &cp.viewer_token);

    let reply = post(viewer, component("by-viewer", manifest, full.clone())).await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    assert_eq!(stored("by-viewer").await, 404);

    let reply = post(admin, component("on-a-job", "job", full.clone())).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(reply.text.contains("spec.cluster"), "{}", reply.text);
    assert_eq!(stored("on-a-job").await, 404);

    let no_name = json!({"name": "", "endpoint": "https://k"});
    let reply = post(admin, component("no-name", manifest, no_name)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    let name = reply.text.contains("spec.cluster.name");
    assert!(name, "{}", reply.text);
    assert_eq!(stored("no-name").await, 404);

    // A customer's own cluster is named by a kubeconfig secret, never by the kubeconfig:
    // plain text is refused without being echoed.
    let plain = json!({"kubeconfig": "apiVersion: v1\nusers: [{user: {token: s3cr3t-token}}]"});
    let reply = post(admin, component("plain-kubeconfig", manifest, plain)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(
        reply.text.contains("spec.cluster.kubeconfig"),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("s3cr3t-token"), "{}", reply.text);
    assert_eq!(stored("plain-kubeconfig").await, 404);
    let both = json!({"name": "eks", "kubeconfig": "{{ secrets.cluster_kubeconfig }}"});
    let reply = post(admin, component("both", manifest, both)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(reply.text.contains("spec.cluster.name"), "{}", reply.text);
    assert_eq!(stored("both").await, 404);
    let own = json!({"kubeconfig": "{{ secrets.cluster_kubeconfig }}"});
    let reply = post(viewer, component("own-by-viewer", manifest, own.clone())).await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    assert_eq!(stored("own-by-viewer").await, 404);
    let reply = post(admin, component("own", manifest, own.clone())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.json["spec"]["cluster"], own);

    let by_name = json!({"name": "{{ sandbox.outputs.cluster_name }}"});
    let reply = post(admin, component("by-name", manifest, by_name.clone())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.json["spec"]["cluster"], by_name);

    let reply = post(admin, component("web", manifest, full.clone())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.json["spec"]["cluster"], full);
}
