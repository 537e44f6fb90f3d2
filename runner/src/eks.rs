//! Cluster access without a kubeconfig: a stack-booted runner reaches an install's EKS
//! cluster with a token minted under the Plan's role, as `aws eks get-token` does.
//!
//! The token is `k8s-aws-v1.` and the unpadded base64url of a presigned STS
//! `GetCallerIdentity` URL whose signed headers include `x-k8s-aws-id: CLUSTER`. The
//! cluster (aws-iam-authenticator) calls that URL and learns who signed it; it cannot
//! use the token for anything else, nor for another cluster, nor once it is 15 minutes
//! old (aws-iam-authenticator's window). The token lives only in the Plan's kube client (and,
//! while a chart renders, in a 0600 kubeconfig in the Plan's work directory for Helm's
//! engine): never in a Plan, log or audit event.
//!
//! Which cluster comes from the component's `cluster` block (rendered from the
//! sandbox's outputs): its `name`. Where the token goes comes from AWS: EKS
//! `DescribeCluster` of that name under the Plan's role gives the API server's endpoint
//! and CA. The block's `endpoint` and `certificateAuthorityData` are the vendor's word,
//! optional, and only checked against AWS's: a Component that names another server
//! fails the Plan before any token is minted, so a vendor cannot collect a token the
//! customer's cluster would accept by pointing the runner at its own server.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use aws_sdk_sts::config::Credentials;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

/// The prefix of an EKS bearer token.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The header naming the cluster, signed into the token.
pub const CLUSTER_HEADER: &str = "x-k8s-aws-id";
/// How long a presigned token is valid, as `aws eks get-token`.
pub const TOKEN_SECONDS: u64 = 60;

/// The cluster a `kubernetes_manifest` or `helm_chart` Plan deploys into, from its
/// desired state's `cluster` block.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// The EKS cluster's name (signed into the token, and looked up in EKS); empty for
    /// a cluster reached by [`Cluster::kubeconfig_secret`].
    #[serde(default)]
    pub name: String,
    /// The API server's URL the vendor expects; empty when not given. Only checked
    /// against [`ApiServer::endpoint`].
    #[serde(default)]
    pub endpoint: String,
    /// The base64 PEM CA bundle the vendor expects; empty when not given. Only checked
    /// against [`ApiServer::certificate_authority_data`].
    #[serde(default)]
    pub certificate_authority_data: String,
    /// A cluster the customer brings: `${outpost-secret:NAME}`, a secret holding a
    /// kubeconfig, resolved into the step's environment like any secret reference.
    #[serde(default, rename = "kubeconfig")]
    pub kubeconfig_secret: String,
}

/// An EKS cluster's API server as EKS `DescribeCluster` reports it in the customer's
/// account: where a token of the Plan's role may be sent.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiServer {
    /// `cluster.endpoint`.
    pub endpoint: String,
    /// `cluster.certificateAuthority.data`: the base64 PEM CA bundle.
    pub certificate_authority_data: String,
}

impl Cluster {
    /// The `cluster` block of a Plan's desired state, if any.
    pub fn of(desired: &Value) -> anyhow::Result<Option<Cluster>> {
        let block = desired
            .get("cluster")
            .or_else(|| desired.pointer("/component/cluster"));
        block
            .map(|b| serde_json::from_value(b.clone()).context("the `cluster` block"))
            .transpose()
    }

    /// A kube client of this cluster authenticated by a fresh token of the Plan role's
    /// credentials in `env`: [`Cluster::kubeconfig`]'s.
    pub async fn client(
        &self,
        env: &BTreeMap<String, String>,
        namespace: &str,
    ) -> anyhow::Result<kube_client::Client> {
        client_of(self.kubeconfig(env, namespace).await?).await
    }

    /// The kubeconfig (in memory, as JSON) of this cluster for a step with environment
    /// `env`: the customer's own ([`Cluster::customer_kubeconfig`]) when the block names
    /// a kubeconfig secret, else one with an EKS token ([`Cluster::kubeconfig`]).
    pub async fn step_kubeconfig(
        &self,
        env: &BTreeMap<String, String>,
        namespace: &str,
    ) -> anyhow::Result<Value> {
        if self.kubeconfig_secret.is_empty() {
            self.kubeconfig(env, namespace).await
        } else {
            self.customer_kubeconfig(env)
        }
    }

    /// The kubeconfig the customer keeps in their secret store for their own cluster,
    /// from the step's resolved secrets (read under the Plan's role, masked in every
    /// output). Errors name the secret, never its content.
    ///
    /// # Errors
    ///
    /// The block's `kubeconfig` is not a secret reference (a kubeconfig in the desired
    /// state would have passed through the control plane), the secret was not resolved,
    /// or it is not a kubeconfig.
    pub fn customer_kubeconfig(&self, env: &BTreeMap<String, String>) -> anyhow::Result<Value> {
        use crate::executor::secret_ref;
        let reference = self.kubeconfig_secret.trim();
        let name = reference
            .strip_prefix(secret_ref::PREFIX)
            .and_then(|rest| rest.strip_suffix('}'))
            .filter(|name| !name.contains('}'))
            .context(
                "the cluster's `kubeconfig` is not a secret reference: a kubeconfig is read \
                 from the customer's secret store, never from the desired state",
            )?;
        let text = secret_ref::resolve(reference, env)?;
        let kubeconfig: Value = serde_saphyr::from_str(&text)
            .ok()
            .filter(|k: &Value| k.get("clusters").is_some() && k.get("users").is_some())
            .with_context(|| {
                format!("secret {name:?} is not a kubeconfig (YAML with clusters and users)")
            })?;
        Ok(kubeconfig)
    }

    /// A kubeconfig (in memory, as JSON) of this cluster with a fresh token of the Plan
    /// role's credentials in `env` (see [`token`]), for the API server EKS reports
    /// ([`Cluster::describe`]) once [`Cluster::check`] found the block agreeing with it.
    /// Nothing is minted before both succeed.
    ///
    /// # Warning
    ///
    /// It holds the token: keep it in memory, or in a file only the runner reads for as
    /// long as a child needs it.
    pub async fn kubeconfig(
        &self,
        env: &BTreeMap<String, String>,
        namespace: &str,
    ) -> anyhow::Result<Value> {
        let credentials = crate::aws::plan_role_credentials(env).context(
            "the Plan resolved no AWS role: a cluster reached by an EKS token needs one",
        )?;
        let region = env
            .get("AWS_REGION")
            .filter(|r| !r.is_empty())
            .context("the Plan's environment has no AWS_REGION")?;
        let server = self.describe(env).await?;
        self.check(&server)?;
        let endpoint = env.get("AWS_ENDPOINT_URL").filter(|e| !e.is_empty());
        let token = token(
            &credentials,
            region,
            endpoint.map(String::as_str),
            &self.name,
            SystemTime::now(),
        )?;
        Ok(json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {"server": server.endpoint,
                "certificate-authority-data": server.certificate_authority_data}}],
            "users": [{"name": "plan-role", "user": {"token": token}}],
            "contexts": [{"name": "plan", "context": {
                "cluster": self.name, "user": "plan-role", "namespace": namespace}}],
            "current-context": "plan",
        }))
    }

    /// The cluster's API server as EKS `DescribeCluster` reports it, asked under the
    /// Plan role's credentials in `env` (with `AWS_ENDPOINT_URL`, the runner's
    /// `--aws-endpoint`). A role that may not describe the cluster fails here.
    ///
    /// # Errors
    ///
    /// The environment holds no role credentials or region, EKS refuses or does not
    /// know the cluster, or reports no endpoint or CA (a cluster still being created).
    pub async fn describe(&self, env: &BTreeMap<String, String>) -> anyhow::Result<ApiServer> {
        let config = crate::aws::plan_role_config(env, None).context(
            "the Plan resolved no AWS role: a cluster reached by an EKS token needs one",
        )?;
        let name = &self.name;
        let described = aws_sdk_eks::Client::new(&config)
            .describe_cluster()
            .name(name)
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "eks:DescribeCluster of cluster {name} under the Plan's role failed \
                     (the API server a token may go to is read from EKS): {}",
                    crate::aws::describe(&e)
                )
            })?;
        let cluster = described
            .cluster()
            .with_context(|| format!("eks:DescribeCluster returned no cluster {name}"))?;
        let status = cluster
            .status()
            .map_or_else(|| "unknown".to_owned(), |s| s.as_str().to_owned());
        let endpoint = cluster
            .endpoint()
            .filter(|e| !e.is_empty())
            .with_context(|| {
                format!("EKS reports no endpoint for cluster {name} (status {status})")
            })?;
        let ca = cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .filter(|d| !d.is_empty())
            .with_context(|| {
                format!("EKS reports no certificate authority for cluster {name} (status {status})")
            })?;
        Ok(ApiServer {
            endpoint: endpoint.to_owned(),
            certificate_authority_data: ca.to_owned(),
        })
    }

    /// Whether the block's own `endpoint` and `certificateAuthorityData`, where given,
    /// are what EKS reports (`server`). A URL's trailing `/` and the bundle's whitespace
    /// are not differences.
    ///
    /// # Errors
    ///
    /// Naming the field that differs and both values (a CA by its length: it is public,
    /// but long).
    pub fn check(&self, server: &ApiServer) -> anyhow::Result<()> {
        let name = &self.name;
        let given = self.endpoint.trim().trim_end_matches('/');
        let actual = server.endpoint.trim().trim_end_matches('/');
        anyhow::ensure!(
            given.is_empty() || given == actual,
            "the component's cluster.endpoint {given} is not the endpoint EKS reports for \
             cluster {name} ({actual}): no token of the Plan's role is sent to a server \
             the customer's account does not name"
        );
        let strip = |ca: &str| ca.split_whitespace().collect::<String>();
        let (given, actual) = (
            strip(&self.certificate_authority_data),
            strip(&server.certificate_authority_data),
        );
        anyhow::ensure!(
            given.is_empty() || given == actual,
            "the component's cluster.certificateAuthorityData ({} characters) is not the \
             certificate authority EKS reports for cluster {name} ({} characters): no token \
             of the Plan's role is sent to a server the customer's account does not name",
            given.len(),
            actual.len()
        );
        Ok(())
    }
}

/// The kube client of `kubeconfig` ([`Cluster::kubeconfig`]).
pub async fn client_of(kubeconfig: Value) -> anyhow::Result<kube_client::Client> {
    let kubeconfig: kube_client::config::Kubeconfig =
        serde_json::from_value(kubeconfig).context("a kubeconfig for the cluster")?;
    let config =
        kube_client::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube_client::Client::try_from(config)?)
}

/// The STS endpoint a token is presigned for: `endpoint` (the runner's `--aws-endpoint`,
/// an emulator) or STS's regional endpoint.
fn sts_url(region: &str, endpoint: Option<&str>) -> String {
    let base = match endpoint {
        Some(endpoint) => endpoint.trim_end_matches('/').to_owned(),
        None => format!("https://sts.{region}.amazonaws.com"),
    };
    format!("{base}/?Action=GetCallerIdentity&Version=2011-06-15")
}

/// An EKS bearer token for `cluster` signed with `credentials` at `now`: what
/// `aws eks get-token --cluster-name CLUSTER` prints.
///
/// # Errors
///
/// When the request cannot be signed (an endpoint that is not a URL).
pub fn token(
    credentials: &Credentials,
    region: &str,
    endpoint: Option<&str>,
    cluster: &str,
    now: SystemTime,
) -> anyhow::Result<String> {
    use aws_sigv4::http_request::{
        SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
    };
    let url = sts_url(region, endpoint);
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(TOKEN_SECONDS));
    let identity = credentials.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now)
        .settings(settings)
        .build()
        .context("signing parameters")?
        .into();
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        [(CLUSTER_HEADER, cluster)].into_iter(),
        SignableBody::Bytes(&[]),
    )
    .context("the STS request")?;
    let (instructions, _) = sign(request, &params)
        .context("signing the STS request")?
        .into_parts();
    let mut signed = http::Request::builder()
        .uri(url.as_str())
        .body(())
        .context("the STS request")?;
    instructions.apply_to_request_http1x(&mut signed);
    let presigned = signed.uri().to_string();
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(presigned)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(token: &str) -> BTreeMap<String, String> {
        let encoded = token.strip_prefix(TOKEN_PREFIX).expect("the prefix");
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .expect("unpadded base64url");
        let url = String::from_utf8(url).expect("a URL");
        let uri: http::Uri = url.parse().expect("a URL");
        assert_eq!(uri.path(), "/");
        form_pairs(uri.query().unwrap_or_default())
    }

    fn form_pairs(query: &str) -> BTreeMap<String, String> {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| {
                let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
                (k.to_owned(), v.into_owned())
            })
            .collect()
    }

    #[test]
    fn a_token_is_a_presigned_get_caller_identity_for_the_cluster() {
        let credentials = Credentials::new("AKIDPLAN", "secret", Some("session".into()), None, "t");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let token = token(&credentials, "eu-west-1", None, "shop-eks", now).unwrap();
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&token[TOKEN_PREFIX.len()..])
                .unwrap(),
        )
        .unwrap();
        assert!(
            url.starts_with(
                "https://sts.eu-west-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
            ),
            "{url}"
        );
        let query = query(&token);
        assert_eq!(query["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(query["X-Amz-Expires"], "60");
        assert_eq!(query["X-Amz-Date"], "20231114T221320Z");
        assert_eq!(
            query["X-Amz-Credential"],
            "AKIDPLAN/20231114/eu-west-1/sts/aws4_request"
        );
        assert_eq!(query["X-Amz-SignedHeaders"], "host;x-k8s-aws-id");
        assert_eq!(query["X-Amz-Security-Token"], "session");
        assert_eq!(query["X-Amz-Signature"].len(), 64);
        // Another cluster, another signature: the name is signed in.
        let other = super::token(&credentials, "eu-west-1", None, "other", now).unwrap();
        assert_ne!(
            crate::eks::tests::query(&other)["X-Amz-Signature"],
            query["X-Amz-Signature"]
        );
    }

    #[test]
    fn an_emulator_endpoint_is_the_tokens_host() {
        let credentials = Credentials::new("AKID", "secret", None, None, "t");
        let token = token(
            &credentials,
            "us-east-1",
            Some("http://127.0.0.1:5000/"),
            "c",
            SystemTime::now(),
        )
        .unwrap();
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&token[TOKEN_PREFIX.len()..])
            .unwrap();
        assert!(url.starts_with(b"http://127.0.0.1:5000/?Action=GetCallerIdentity&"));
    }

    #[test]
    fn the_cluster_block_is_read_from_the_desired_state() {
        let desired = json!({"type": "kubernetes_manifest",
            "cluster": {"name": "eks", "endpoint": "https://k", "certificateAuthorityData": "Q0E="}});
        assert_eq!(
            Cluster::of(&desired).unwrap(),
            Some(Cluster {
                name: "eks".into(),
                endpoint: "https://k".into(),
                certificate_authority_data: "Q0E=".into(),
                kubeconfig_secret: String::new(),
            })
        );
        assert_eq!(Cluster::of(&json!({"type": "x"})).unwrap(), None);
        let named = Cluster::of(&json!({"cluster": {"name": "eks"}})).unwrap();
        assert_eq!(named.unwrap().endpoint, "");
        assert!(Cluster::of(&json!({"cluster": {"name": 1}})).is_err());
    }

    #[test]
    fn a_customers_kubeconfig_comes_only_from_a_resolved_secret() {
        let cluster = |reference: &str| Cluster {
            name: String::new(),
            endpoint: String::new(),
            certificate_authority_data: String::new(),
            kubeconfig_secret: reference.into(),
        };
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: https://k}}]\nusers: [{name: u, user: {token: t0ken}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n";
        let env = BTreeMap::from([
            (crate::secrets::env_name("kc"), kubeconfig.to_owned()),
            (
                crate::secrets::env_name("text"),
                "not: [a kubeconfig".to_owned(),
            ),
        ]);
        let read = cluster("${outpost-secret:kc}")
            .customer_kubeconfig(&env)
            .unwrap();
        assert_eq!(read["users"][0]["user"]["token"], "t0ken");
        let error = |reference: &str| {
            format!(
                "{:#}",
                cluster(reference).customer_kubeconfig(&env).unwrap_err()
            )
        };
        assert!(error("apiVersion: v1").contains("not a secret reference"));
        assert!(error("x${outpost-secret:kc}").contains("not a secret reference"));
        assert!(
            error("${outpost-secret:other}")
                .contains("\"other\" is referenced but was not resolved")
        );
        let not_one = error("${outpost-secret:text}");
        assert!(
            not_one.contains("secret \"text\" is not a kubeconfig"),
            "{not_one}"
        );
        assert!(!not_one.contains("[a kubeconfig"), "{not_one}");
    }

    #[test]
    fn a_block_may_name_only_the_api_server_eks_reports() {
        let server = ApiServer {
            endpoint: "https://ABC.gr7.eu-west-1.eks.amazonaws.com".into(),
            certificate_authority_data: "Q0E=".into(),
        };
        let cluster = |endpoint: &str, ca: &str| Cluster {
            name: "shop-eks".into(),
            endpoint: endpoint.into(),
            certificate_authority_data: ca.into(),
            kubeconfig_secret: String::new(),
        };
        cluster("", "").check(&server).unwrap();
        cluster("https://ABC.gr7.eu-west-1.eks.amazonaws.com/", "Q0E=\n")
            .check(&server)
            .unwrap();
        let error = cluster("https://collector.example", "")
            .check(&server)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cluster.endpoint https://collector.example is not the endpoint EKS reports for cluster shop-eks (https://ABC.gr7.eu-west-1.eks.amazonaws.com)"),
            "{error}"
        );
        let error = cluster("", "T1RIRVI=")
            .check(&server)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("cluster.certificateAuthorityData (8 characters) is not the certificate authority EKS reports for cluster shop-eks (4 characters)"),
            "{error}"
        );
    }
}
