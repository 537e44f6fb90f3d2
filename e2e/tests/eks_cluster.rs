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
use outpost_e2e::{ControlPlane, Moto};
use outpost_runner::eks;
use outpost_runner::executor::eks_cluster::PlanRoleClusterExecutor;
use outpost_runner::executor::{Executor as _, StepContext};
use serde_json::json;

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
const CLUSTER: &str = "shop-eks";

/// The cluster's RBAC: the provision role's group may do anything to ConfigMaps and
/// Namespaces, the maintenance role's may read them.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: deployer}
rules:
  - apiGroups: [""]
    resources: [configmaps, namespaces]
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

async fn setup() -> Setup {
    let moto = Moto::start();
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

    /// A step of a `kubernetes_manifest` Plan into the cluster under `credentials`.
    fn step(&self, credentials: &Credentials, dir: &std::path::Path, name: &str) -> StepContext {
        let ca = std::fs::read(&self.cluster.tls.ca).unwrap();
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
            ("AWS_ENDPOINT_URL".to_owned(), self.moto.endpoint()),
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
                "cluster": {
                    "name": CLUSTER,
                    "endpoint": self.cluster.url,
                    "certificateAuthorityData": base64::engine::general_purpose::STANDARD.encode(ca),
                },
            }),
            work_dir: dir.join(name),
            env,
            timeout: Duration::from_secs(60),
        }
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
    let executor = PlanRoleClusterExecutor;
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

/// `spec.cluster` of a Component: the admin may name a manifest's cluster; a cluster
/// on another type, or without an endpoint, is 422 and a viewer's write 403, nothing
/// stored either way.
#[tokio::test]
async fn a_components_cluster_is_admitted_only_in_full_on_a_manifest() {
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

    let no_endpoint = json!({"name": "eks", "endpoint": ""});
    let reply = post(admin, component("no-endpoint", manifest, no_endpoint)).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    let endpoint = reply.text.contains("spec.cluster.endpoint");
    assert!(endpoint, "{}", reply.text);
    assert_eq!(stored("no-endpoint").await, 404);

    let reply = post(admin, component("web", manifest, full.clone())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.json["spec"]["cluster"], full);
}
