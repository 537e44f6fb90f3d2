//! Cluster access by EKS tokens: the stand-in cluster authenticates `k8s-aws-v1.`
//! tokens by calling the presigned STS `GetCallerIdentity` on the AWS emulator (moto),
//! maps the caller's role to a user and groups, and authorizes them by its RBAC
//! objects; the runner's `kubernetes_manifest` executor, with no kubeconfig, reaches
//! the cluster a Plan's `cluster` block names with a token of the Plan's role.
//!
//! The roles are mapped by the stand-in's `kube-system/aws-auth` ConfigMap, as on EKS.
//!
//! Each actor: the provision role's token may write ConfigMaps, the maintenance role's
//! may only read them (403, nothing stored); a token presigned for another host (real
//! STS included), expired, or of an unmapped role is refused (401, nothing stored).
//!
//! Where a token goes is AWS's word: the runner reads the cluster's endpoint and CA from
//! EKS `DescribeCluster` under the Plan's role. moto plays AWS with the cluster created
//! where the stand-in listens ([`Moto::create_eks_cluster`]). A Component naming another
//! server (the vendor's, here a recording proxy in front of the real cluster) fails its
//! Plan and the proxy sees no connection; a role that may not describe the cluster gets
//! no token at all.
//!
//! Not provable here: that a token signed for another cluster is refused. The cluster
//! name is bound by the signature, which real STS checks and moto does not (it checks
//! no signature at all); the stand-in checks that the name is among the signed headers
//! (`outpost-apiserver` unit tests).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sts::config::{Credentials, SharedCredentialsProvider};
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube_client::api::{Api, PostParams};
use outpost_api::Operation;
use outpost_e2e::helm::{Helm, copy_shop_chart};
use outpost_e2e::{ControlPlane, Moto, RecordingProxy};
use outpost_runner::eks;
use outpost_runner::executor::eks_cluster::PlanRoleClusterExecutor;
use outpost_runner::executor::{Executor as _, StepContext};
use serde_json::json;

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
const CLUSTER: &str = "shop-eks";

/// The cluster's RBAC: the provision role's group may do anything to ConfigMaps,
/// Namespaces and Deployments, the maintenance role's may read ConfigMaps and Namespaces.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: deployer}
rules:
  - apiGroups: [""]
    resources: [configmaps, namespaces]
    verbs: ["*"]
  - apiGroups: [apps]
    resources: [deployments]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: provision-deploys}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: deployer}
subjects: [{kind: Group, name: "outpost:provision"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
  - apiGroups: [""]
    resources: [configmaps, namespaces]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: maintenance-reads}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: Group, name: "outpost:maintenance"}]
"#;

/// The `kube-system/aws-auth` ConfigMap mapping each `(role, user prefix, group)`:
/// the role's sessions are `PREFIX:SESSION` in `group`.
pub fn aws_auth(roles: &[(&str, &str, &str)]) -> String {
    let mut map = String::new();
    for (role, user, group) in roles {
        map.push_str(&format!(
            "    - rolearn: arn:aws:iam::{ACCOUNT}:role/{role}\n      username: \"{user}:{{{{SessionName}}}}\"\n      groups: [\"{group}\"]\n"
        ));
    }
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: aws-auth, namespace: kube-system}}\ndata:\n  mapRoles: |\n{map}"
    )
}

/// moto, the stand-in cluster taking EKS tokens for [`CLUSTER`], and the credentials
/// of the roles `u-provision`, `u-maintenance` and (mapped to nobody) `u-other`.
struct Setup {
    moto: Moto,
    cluster: ControlPlane,
    provision: Credentials,
    maintenance: Credentials,
    other: Credentials,
    _dir: tempfile::TempDir,
}

fn sdk(moto: &Moto) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(moto.endpoint())
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIAADMINADMINADMIN0",
            "admin",
            None,
            None,
            "eks-test",
        )))
        .http_client(outpost_runner::aws::http_client())
        .build()
}

/// Creates role `name` in moto and assumes it (session `plan-1`).
async fn assume(config: &SdkConfig, name: &str) -> Credentials {
    let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:root")}, "Action": "sts:AssumeRole"}]});
    aws_sdk_iam::Client::new(config)
        .create_role()
        .role_name(name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("moto creates the role");
    let assumed = aws_sdk_sts::Client::new(config)
        .assume_role()
        .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/{name}"))
        .role_session_name("plan-1")
        .send()
        .await
        .expect("moto lets the role be assumed");
    let c = assumed.credentials().expect("credentials");
    Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_owned()),
        None,
        "eks-test",
    )
}

/// The stand-in's CA bundle as EKS reports one: base64 of the PEM.
fn ca_of(cluster: &ControlPlane) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(&cluster.tls.ca).unwrap())
}

async fn setup() -> Setup {
    let moto = Moto::start_with_eks_endpoints(&[]);
    let config = sdk(&moto);
    let provision = assume(&config, "u-provision").await;
    let maintenance = assume(&config, "u-maintenance").await;
    let other = assume(&config, "u-other").await;
    let dir = tempfile::tempdir().unwrap();
    let sts = moto.endpoint();
    let cluster = ControlPlane::start_standin_cluster_with(&[
        "--eks-cluster-name",
        CLUSTER,
        "--eks-sts-endpoint",
        &sts,
    ])
    .await;
    let rbac = dir.path().join("rbac.yaml");
    std::fs::write(
        &rbac,
        format!(
            "{}---\n{RBAC}",
            aws_auth(&[
                ("u-provision", "provision", "outpost:provision"),
                ("u-maintenance", "maintenance", "outpost:maintenance"),
            ])
        ),
    )
    .unwrap();
    cluster
        .kubectl()
        .ok(&["apply", "-f", rbac.to_str().unwrap()]);
    moto.create_eks_cluster(REGION, CLUSTER, &cluster.url, &ca_of(&cluster))
        .await;
    Setup {
        moto,
        cluster,
        provision,
        maintenance,
        other,
        _dir: dir,
    }
}

impl Setup {
    fn token(&self, credentials: &Credentials) -> String {
        self.token_at(credentials, SystemTime::now())
    }

    fn token_at(&self, credentials: &Credentials, at: SystemTime) -> String {
        let moto = self.moto.endpoint();
        eks::token(credentials, REGION, Some(&moto), CLUSTER, at).unwrap()
    }

    async fn config_maps(&self, token: &str) -> Api<ConfigMap> {
        Api::namespaced(self.cluster.client_as(token).await, "default")
    }

    /// The admin's view: whether ConfigMap `name` is stored.
    async fn stored(&self, name: &str) -> bool {
        let admin: Api<ConfigMap> = Api::namespaced(self.cluster.client().await, "default");
        admin.get_opt(name).await.unwrap().is_some()
    }

    /// A step of a `kubernetes_manifest` Plan into [`CLUSTER`], named by name only,
    /// under `credentials`.
    fn step(&self, credentials: &Credentials, dir: &std::path::Path, name: &str) -> StepContext {
        step(&self.moto, credentials, dir, name, json!({"name": CLUSTER}))
    }
}

/// A step of a `kubernetes_manifest` Plan whose `cluster` block is `cluster`, under
/// `credentials` with `moto` as AWS.
fn step(
    moto: &Moto,
    credentials: &Credentials,
    dir: &std::path::Path,
    name: &str,
    cluster: serde_json::Value,
) -> StepContext {
    let mut env = BTreeMap::from([
        (
            "AWS_ACCESS_KEY_ID".to_owned(),
            credentials.access_key_id().to_owned(),
        ),
        (
            "AWS_SECRET_ACCESS_KEY".to_owned(),
            credentials.secret_access_key().to_owned(),
        ),
        ("AWS_REGION".to_owned(), REGION.to_owned()),
        ("AWS_ENDPOINT_URL".to_owned(), moto.endpoint()),
    ]);
    if let Some(session) = credentials.session_token() {
        env.insert("AWS_SESSION_TOKEN".into(), session.to_owned());
    }
    StepContext {
        plan: format!("acme-deploy-{name}-1"),
        plan_uid: "plan-1".into(),
        operation: Operation::Deploy,
        entity: name.into(),
        desired: json!({
            "type": "kubernetes_manifest",
            "manifest": {"namespace": "shop", "content": format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  tier: web\n")},
            "cluster": cluster,
        }),
        work_dir: dir.join(name),
        env,
        timeout: Duration::from_secs(60),
    }
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

/// The HTTP status of a refused request.
fn code<T: std::fmt::Debug>(result: Result<T, kube_client::Error>) -> u16 {
    match result {
        Err(kube_client::Error::Api(status)) => status.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn each_role_gets_what_the_clusters_rbac_grants_its_group() {
    let s = setup().await;
    let provision = s.config_maps(&s.token(&s.provision)).await;
    provision
        .create(&PostParams::default(), &config_map("by-provision"))
        .await
        .expect("the provision role may create a ConfigMap");
    assert!(s.stored("by-provision").await);

    let maintenance = s.config_maps(&s.token(&s.maintenance)).await;
    let refused = maintenance
        .create(&PostParams::default(), &config_map("by-maintenance"))
        .await;
    let Err(kube_client::Error::Api(status)) = refused else {
        panic!("the maintenance role created a ConfigMap: {refused:?}");
    };
    assert_eq!(status.code, 403);
    assert!(
        status
            .message
            .contains("User \"maintenance:plan-1\" cannot create resource \"configmaps\""),
        "{}",
        status.message
    );
    assert!(!s.stored("by-maintenance").await);
    // It may read what it is granted to.
    let read = maintenance.get("by-provision").await.unwrap();
    assert_eq!(read.data.unwrap()["k"], "v");
    assert_eq!(
        code(
            maintenance
                .delete("by-provision", &Default::default())
                .await
        ),
        403
    );
    assert!(s.stored("by-provision").await);
}

#[tokio::test]
async fn tokens_for_another_host_time_or_role_are_refused() {
    let s = setup().await;
    let expired = s.token_at(
        &s.provision,
        SystemTime::now() - Duration::from_secs(20 * 60),
    );
    let elsewhere = eks::token(
        &s.provision,
        REGION,
        Some("http://127.0.0.2:1"),
        CLUSTER,
        SystemTime::now(),
    )
    .unwrap();
    let real_sts = eks::token(&s.provision, REGION, None, CLUSTER, SystemTime::now()).unwrap();
    let unmapped = s.token(&s.other);
    for (what, token) in [
        ("an expired", expired),
        ("another host's", elsewhere),
        ("real STS's (not this cluster's)", real_sts),
        ("an unmapped role's", unmapped),
    ] {
        let api = s.config_maps(&token).await;
        let name = "forged";
        assert_eq!(
            code(api.create(&PostParams::default(), &config_map(name)).await),
            401,
            "{what} token"
        );
        assert_eq!(
            code(api.list(&Default::default()).await),
            401,
            "{what} token"
        );
        assert!(!s.stored(name).await, "{what} token stored an object");
    }
    // The same role's fresh token for this cluster is taken.
    let api = s.config_maps(&s.token(&s.provision)).await;
    api.list(&Default::default()).await.unwrap();
}

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

/// A role the customer did not allow `eks:DescribeCluster` (moto enforcing IAM) cannot
/// learn where the cluster is: its Plan fails with EKS's refusal, no token is minted,
/// and the cluster (behind a recording proxy, the endpoint EKS reports) sees nothing.
#[tokio::test]
async fn a_role_that_may_not_describe_the_cluster_fails_closed() {
    // IAM is enforced after the setup's three calls: creating and assuming the role,
    // creating the cluster.
    let moto = Moto::start_with_eks_endpoints(&[("INITIAL_NO_AUTH_ACTION_COUNT", "3")]);
    let maintenance = assume(&sdk(&moto), "u-maintenance").await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let proxy = RecordingProxy::start(&cluster.url, &cluster.tls).await;
    moto.create_eks_cluster(REGION, CLUSTER, &proxy.url, &ca_of(&cluster))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = step(
        &moto,
        &maintenance,
        dir.path(),
        "undescribed",
        json!({"name": CLUSTER}),
    );
    let error = PlanRoleClusterExecutor::manifests()
        .plan(&ctx)
        .await
        .expect_err("a role that may not describe the cluster has no way in");
    let message = format!("{error:#}");
    assert!(
        message.contains(&format!(
            "eks:DescribeCluster of cluster {CLUSTER} under the Plan's role failed"
        )) && message.contains("403"),
        "{message}"
    );
    assert_eq!(proxy.connections(), 0, "the cluster was reached");
    let admin: Api<ConfigMap> = Api::namespaced(cluster.client().await, "shop");
    assert!(admin.get_opt("undescribed").await.unwrap().is_none());
}

/// `spec.cluster` of a Component: the admin may name a manifest's cluster (by name: the
/// endpoint is optional; or by a kubeconfig secret reference); a cluster on another
/// type, without a name, with a plain-text kubeconfig or with both is 422 and a viewer's
/// write 403, nothing stored either way.
#[tokio::test]
async fn a_components_cluster_is_admitted_only_by_name_on_a_manifest() {
    let cp = ControlPlane::start(outpost_e2e::Backend::Embedded).await;
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
