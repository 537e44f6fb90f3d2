//! The stand-in cluster's side of EKS tokens (`k8s-aws-v1.`, what `aws eks get-token`
//! mints), as aws-iam-authenticator does it: decode the presigned STS
//! `GetCallerIdentity` URL, check it names this cluster and the configured STS and is
//! less than 15 minutes old, call it, and map the caller's role to a user and groups (like the
//! `aws-auth` ConfigMap's `mapRoles`). The user is then authorized by RBAC
//! ([`super::rbac`]).
//!
//! # Warning
//! The STS it calls is an emulator over plain HTTP (`moto_server`, which verifies no
//! signature and names the caller by the access key of an `Authorization` header): the
//! presigned credential is restated as that header. Against real EKS, the real
//! aws-iam-authenticator does this part and STS checks the signature.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use super::User;

/// The prefix of an EKS bearer token.
pub const PREFIX: &str = "k8s-aws-v1.";
/// The signed header naming the cluster.
pub const CLUSTER_HEADER: &str = "x-k8s-aws-id";
/// The uid prefix of users authenticated by an EKS token (aws-iam-authenticator's):
/// such users are authorized by RBAC.
pub const UID_PREFIX: &str = "aws-iam-authenticator:";
/// How long a token is honoured from its `X-Amz-Date`: aws-iam-authenticator's 15
/// minutes (what `aws eks get-token`'s expiration says), whatever its `X-Amz-Expires`,
/// which may not be longer.
const LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How far in the future a token's date may be (clock skew).
const SKEW: Duration = Duration::from_secs(5 * 60);

/// One entry of the role mapping (`mapRoles`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RoleMapping {
    /// `arn:aws:iam::ACCOUNT:role/NAME`.
    pub rolearn: String,
    /// The Kubernetes user name; `{{SessionName}}` is the role session's name.
    pub username: String,
    /// The Kubernetes groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// Why an EKS token is refused (the client gets 401; the reason is logged).
#[derive(Debug, thiserror::Error)]
pub enum EksTokenError {
    /// Not base64url, not a URL, not GetCallerIdentity, or missing a signed parameter.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// The URL's host is not the configured STS endpoint.
    #[error("the token is presigned for {0}, not this cluster's STS endpoint")]
    Host(String),
    /// The token names another cluster (or none).
    #[error("the token is not for this cluster")]
    Cluster,
    /// Past its expiry, or dated in the future.
    #[error("the token has expired or is not yet valid")]
    Expired,
    /// STS refused the presigned request or could not be reached.
    #[error("STS: {0}")]
    Sts(String),
    /// The caller is not an assumed role, or the role is not mapped.
    #[error("{0} is not mapped to a user")]
    Unmapped(String),
}

/// The stand-in cluster's EKS token authenticator.
#[derive(Clone, Debug)]
pub struct EksTokens {
    cluster: String,
    /// `http://HOST:PORT` of the STS emulator.
    sts: http::Uri,
}

impl EksTokens {
    /// Tokens for `cluster`, presigned for `sts` (`http://HOST:PORT`).
    pub fn new(cluster: &str, sts: http::Uri) -> Self {
        EksTokens {
            cluster: cluster.to_owned(),
            sts,
        }
    }

    /// The user of an EKS token, checked at `now`, its role mapped by `roles` (the
    /// `aws-auth` ConfigMap's `mapRoles`, [`map_roles`]).
    pub async fn authenticate(
        &self,
        token: &str,
        now: SystemTime,
        roles: &[RoleMapping],
    ) -> Result<User, EksTokenError> {
        let url = self.presigned(token, now)?;
        let arn = self.caller(&url).await?;
        user(&arn, roles)
    }

    /// The presigned URL of `token` once its host, action, cluster and date are checked.
    fn presigned(&self, token: &str, now: SystemTime) -> Result<http::Uri, EksTokenError> {
        let encoded = token
            .strip_prefix(PREFIX)
            .ok_or(EksTokenError::Malformed("no k8s-aws-v1. prefix"))?;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded.trim_end_matches('='))
            .map_err(|_| EksTokenError::Malformed("not base64url"))?;
        let url = String::from_utf8(url).map_err(|_| EksTokenError::Malformed("not UTF-8"))?;
        let uri: http::Uri = url
            .parse()
            .map_err(|_| EksTokenError::Malformed("not a URL"))?;
        if uri.scheme() != self.sts.scheme() || uri.authority() != self.sts.authority() {
            return Err(EksTokenError::Host(
                uri.authority().map(|a| a.to_string()).unwrap_or_default(),
            ));
        }
        let query = query_pairs(uri.query().unwrap_or_default());
        let one = |name: &'static str| {
            query
                .get(name)
                .map(String::as_str)
                .ok_or(EksTokenError::Malformed(name))
        };
        if uri.path() != "/"
            || one("Action")? != "GetCallerIdentity"
            || one("Version")? != "2011-06-15"
        {
            return Err(EksTokenError::Malformed("not an STS GetCallerIdentity"));
        }
        if !one("X-Amz-SignedHeaders")?
            .split(';')
            .any(|h| h == CLUSTER_HEADER)
        {
            return Err(EksTokenError::Cluster);
        }
        let date = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", one("X-Amz-Date")?)
            .ok()
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .ok_or(EksTokenError::Malformed("X-Amz-Date"))?;
        let signed = SystemTime::from(date.timestamp());
        let expires = one("X-Amz-Expires")?
            .parse::<u64>()
            .map_err(|_| EksTokenError::Malformed("X-Amz-Expires"))?;
        if Duration::from_secs(expires) > LIFETIME {
            return Err(EksTokenError::Malformed("X-Amz-Expires above 15 minutes"));
        }
        if now + SKEW < signed || signed + LIFETIME < now {
            return Err(EksTokenError::Expired);
        }
        Ok(uri)
    }

    /// Calls the presigned `GetCallerIdentity` with the cluster header (the cluster
    /// name is what the signature covers) and returns the caller's ARN.
    async fn caller(&self, url: &http::Uri) -> Result<String, EksTokenError> {
        let sts = |e: &dyn std::fmt::Display| EksTokenError::Sts(e.to_string());
        let query = query_pairs(url.query().unwrap_or_default());
        let param = |name: &str| query.get(name).cloned().unwrap_or_default();
        let authority = url.authority().ok_or(EksTokenError::Malformed("no host"))?;
        let stream = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .map_err(|e| sts(&e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| sts(&e))?;
        tokio::spawn(connection);
        let request = http::Request::get(url.clone())
            .header(http::header::HOST, authority.as_str())
            .header(CLUSTER_HEADER, &self.cluster)
            // The emulator's way to learn the signer (see the module's warning).
            .header(
                http::header::AUTHORIZATION,
                format!(
                    "AWS4-HMAC-SHA256 Credential={}, SignedHeaders={}, Signature={}",
                    param("X-Amz-Credential"),
                    param("X-Amz-SignedHeaders"),
                    param("X-Amz-Signature")
                ),
            )
            .body(Empty::<Bytes>::new())
            .map_err(|e| sts(&e))?;
        let response = sender.send_request(request).await.map_err(|e| sts(&e))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| sts(&e))?
            .to_bytes();
        let body = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(EksTokenError::Sts(format!("{status}: {body}")));
        }
        element(&body, "Arn")
            .map(str::to_owned)
            .ok_or_else(|| EksTokenError::Sts(format!("no Arn in {body}")))
    }
}

/// The user `roles` map an assumed-role ARN
/// (`arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION`) to.
fn user(arn: &str, roles: &[RoleMapping]) -> Result<User, EksTokenError> {
    let unmapped = || EksTokenError::Unmapped(arn.to_owned());
    let rest = arn.strip_prefix("arn:aws:sts::").ok_or_else(unmapped)?;
    let (account, path) = rest.split_once(':').ok_or_else(unmapped)?;
    let (role, session) = path
        .strip_prefix("assumed-role/")
        .and_then(|p| p.split_once('/'))
        .ok_or_else(unmapped)?;
    let role_arn = format!("arn:aws:iam::{account}:role/{role}");
    let mapping = roles
        .iter()
        .find(|r| r.rolearn == role_arn)
        .ok_or_else(unmapped)?;
    Ok(User {
        name: mapping.username.replace("{{SessionName}}", session),
        uid: format!("{UID_PREFIX}{account}:{role}:{session}"),
        groups: mapping.groups.clone(),
    })
}

/// The namespace and name of the ConfigMap the role mapping is read from, as on EKS.
pub const AWS_AUTH: (&str, &str) = ("kube-system", "aws-auth");

/// The role mapping of an `aws-auth` ConfigMap: its `data.mapRoles`, a YAML list of
/// `{rolearn, username, groups}`. An absent or malformed one maps nothing.
pub fn map_roles(config_map: &serde_json::Value) -> Vec<RoleMapping> {
    config_map
        .pointer("/data/mapRoles")
        .and_then(serde_json::Value::as_str)
        .and_then(|yaml| serde_saphyr::from_str(yaml).ok())
        .unwrap_or_default()
}

/// Whether `user` was authenticated by an EKS token (and is authorized by RBAC).
pub fn is_eks_user(user: &User) -> bool {
    user.uid.starts_with(UID_PREFIX)
}

/// The decoded `name=value` pairs of a query string (the last of a repeated name).
fn query_pairs(query: &str) -> BTreeMap<String, String> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The text of the first `<name>…</name>` in an XML answer.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(xml[start..end].trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> EksTokens {
        EksTokens::new("shop-eks", "http://127.0.0.1:5000".parse().unwrap())
    }

    /// An `aws-auth` ConfigMap mapping the provision role.
    fn aws_auth() -> serde_json::Value {
        serde_json::json!({"data": {"mapRoles": "- rolearn: arn:aws:iam::123456789012:role/u-provision\n  username: \"provision:{{SessionName}}\"\n  groups: [\"example:provision\"]\n"}})
    }

    fn token(url: &str) -> String {
        format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
        )
    }

    const SIGNED: &str = "http://127.0.0.1:5000/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20231114%2Fus-east-1%2Fsts%2Faws4_request&X-Amz-Date=20231114T221320Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id&X-Amz-Signature=abc";

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn a_token_is_checked_before_sts_is_called() {
        let t = tokens();
        let signed_at = 1_700_000_000;
        assert!(t.presigned(&token(SIGNED), at(signed_at + 30)).is_ok());
        assert!(t.presigned(&token(SIGNED), at(signed_at + 14 * 60)).is_ok());
        let long = SIGNED.replace("X-Amz-Expires=60", "X-Amz-Expires=3600");
        assert!(matches!(
            t.presigned(&token(&long), at(signed_at)),
            Err(EksTokenError::Malformed(_))
        ));
        assert!(matches!(
            t.presigned(&token(SIGNED), at(signed_at + 15 * 60 + 1)),
            Err(EksTokenError::Expired)
        ));
        assert!(matches!(
            t.presigned(&token(SIGNED), at(signed_at - 600)),
            Err(EksTokenError::Expired)
        ));
        let forged = SIGNED.replace("127.0.0.1:5000", "evil.example:5000");
        assert!(matches!(
            t.presigned(&token(&forged), at(signed_at)),
            Err(EksTokenError::Host(h)) if h == "evil.example:5000"
        ));
        let unsigned_cluster = SIGNED.replace("host%3Bx-k8s-aws-id", "host");
        assert!(matches!(
            t.presigned(&token(&unsigned_cluster), at(signed_at)),
            Err(EksTokenError::Cluster)
        ));
        let other_action = SIGNED.replace("GetCallerIdentity", "AssumeRole");
        assert!(matches!(
            t.presigned(&token(&other_action), at(signed_at)),
            Err(EksTokenError::Malformed(_))
        ));
        assert!(t.presigned("k8s-aws-v1.!!", at(signed_at)).is_err());
        assert!(t.presigned("not-an-eks-token", at(signed_at)).is_err());
    }

    #[test]
    fn an_assumed_role_maps_to_its_user_and_other_callers_to_none() {
        let roles = map_roles(&aws_auth());
        let user = user(
            "arn:aws:sts::123456789012:assumed-role/u-provision/session-1",
            &roles,
        )
        .unwrap();
        assert_eq!(user.name, "provision:session-1");
        assert_eq!(user.groups, ["example:provision"]);
        assert!(is_eks_user(&user));
        for arn in [
            "arn:aws:sts::123456789012:assumed-role/u-maintenance/session-1",
            "arn:aws:iam::123456789012:user/moto",
            "arn:aws:sts::999999999999:assumed-role/u-provision/session-1",
        ] {
            assert!(
                matches!(super::user(arn, &roles), Err(EksTokenError::Unmapped(_))),
                "{arn}"
            );
        }
        // No aws-auth ConfigMap, or a malformed one: nobody is mapped.
        assert!(map_roles(&serde_json::json!({})).is_empty());
        assert!(map_roles(&serde_json::json!({"data": {"mapRoles": "{{"}})).is_empty());
    }

    #[test]
    fn the_arn_is_read_from_stss_answer() {
        let xml = "<GetCallerIdentityResponse><GetCallerIdentityResult><Arn>arn:aws:sts::1:assumed-role/r/s</Arn><UserId>X</UserId></GetCallerIdentityResult></GetCallerIdentityResponse>";
        assert_eq!(element(xml, "Arn"), Some("arn:aws:sts::1:assumed-role/r/s"));
        assert_eq!(element(xml, "Account"), None);
    }
}
