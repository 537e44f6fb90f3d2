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
use outpost_runner::eks;
use outpost_runner::executor::eks_cluster::PlanRoleClusterExecutor;
use outpost_runner::executor::{Executor as _, StepContext};
use outpost_testing::helm::{Helm, copy_shop_chart};
use outpost_testing::{ControlPlane, Moto, RecordingProxy};
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

mod components;
mod roles;
