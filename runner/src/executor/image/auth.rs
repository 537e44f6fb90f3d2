//! How the image copy authenticates to each registry: the component's
//! `image.sourceAuth` (the vendor's registry) and `image.destinationAuth` (the
//! install's), as rendered into the Plan's desired state.
//!
//! * `username` + `password`: HTTP basic, which `oci-client` also presents to a
//!   registry's bearer token realm (`WWW-Authenticate: Bearer realm=…`).
//! * `token`: a bearer token sent as it is.
//! * `ecr`: `ecr:GetAuthorizationToken` for the registry's account and region under the
//!   Plan's role (its short-lived credentials in the step's environment); the token is
//!   valid for 12 hours and lives only in memory for the copy.
//!
//! Passwords and tokens are secret references (`${outpost-secret:NAME}`) resolved from
//! the step's environment, where the runner masks them in everything it reports.
//! Without credentials a registry is reached anonymously, and one that requires them
//! fails the Plan closed ("unauthorized").

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

use super::super::secret_ref;

/// How one registry is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// No credentials.
    Anonymous,
    /// HTTP basic (or a token realm's basic exchange); `password` is a secret reference.
    Basic {
        /// The user name.
        username: String,
        /// The password's text in the desired state: a secret reference.
        password: String,
    },
    /// A bearer token; `token` is a secret reference.
    Bearer {
        /// The token's text in the desired state: a secret reference.
        token: String,
    },
    /// An ECR authorization token for the Plan's role.
    Ecr,
}

impl Access {
    /// The access `auth` (the rendered `sourceAuth` or `destinationAuth`, `field` names
    /// it) describes for `registry`. Omitted: ECR for an ECR registry when `ecr_default`
    /// (the install's registry), anonymous otherwise.
    pub fn from_desired(
        auth: Option<&Value>,
        field: &str,
        registry: &str,
        ecr_default: bool,
    ) -> anyhow::Result<Self> {
        let Some(auth) = auth.filter(|a| !a.is_null()) else {
            return Ok(if ecr_default && EcrRegistry::parse(registry).is_some() {
                Access::Ecr
            } else {
                Access::Anonymous
            });
        };
        let text = |name: &str| auth.get(name).and_then(Value::as_str).map(str::to_owned);
        let secret = |name: &str| -> anyhow::Result<Option<String>> {
            match text(name) {
                Some(value) if !secret_ref::has_reference(&value) => bail!(
                    "{field}.{name} is not a secret reference: credentials are only read from \
                     the customer's secret store"
                ),
                other => Ok(other),
            }
        };
        let ecr = auth.get("ecr").and_then(Value::as_bool).unwrap_or(false);
        Ok(
            match (text("username"), secret("password")?, secret("token")?, ecr) {
                (Some(username), Some(password), None, false) => {
                    Access::Basic { username, password }
                }
                (None, None, Some(token), false) => Access::Bearer { token },
                (None, None, None, true) => Access::Ecr,
                _ => bail!("{field} must set one of username and password, token, or ecr"),
            },
        )
    }

    /// How the registry is reached, for error messages (`field` names the setting).
    pub fn describe(&self, field: &str) -> String {
        match self {
            Access::Anonymous => format!("anonymously ({field} is not set)"),
            Access::Basic { username, .. } => format!("as {username:?} ({field})"),
            Access::Bearer { .. } => format!("with a bearer token ({field})"),
            Access::Ecr => "with an ECR authorization token for the Plan's role".to_owned(),
        }
    }

    /// The credentials for `registry`, secret references resolved from `env` (the
    /// step's environment), ECR's token asked for under the role whose credentials
    /// `env` holds.
    pub async fn resolve(
        &self,
        registry: &str,
        env: &BTreeMap<String, String>,
    ) -> anyhow::Result<RegistryAuth> {
        Ok(match self {
            Access::Anonymous => RegistryAuth::Anonymous,
            Access::Basic { username, password } => RegistryAuth::Basic(
                secret_ref::resolve(username, env)?,
                secret_ref::resolve(password, env)?,
            ),
            Access::Bearer { token } => RegistryAuth::Bearer(secret_ref::resolve(token, env)?),
            Access::Ecr => ecr_token(registry, env).await?,
        })
    }
}

/// An ECR registry host: `ACCOUNT.dkr.ecr.REGION.amazonaws.com` (or `.com.cn`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcrRegistry {
    /// The registry's account id.
    pub account: String,
    /// Its region.
    pub region: String,
}

impl EcrRegistry {
    /// The account and region of an ECR registry host, `None` for any other host.
    pub fn parse(registry: &str) -> Option<Self> {
        let host = registry.split(':').next()?;
        let rest = host
            .strip_suffix(".amazonaws.com")
            .or_else(|| host.strip_suffix(".amazonaws.com.cn"))?;
        let (account, rest) = rest.split_once(".dkr.ecr.")?;
        let valid_account = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        let valid_region = !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        (valid_account && valid_region).then(|| EcrRegistry {
            account: account.to_owned(),
            region: rest.to_owned(),
        })
    }
}

/// Exchanges the role credentials in `env` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`; `AWS_ENDPOINT_URL` when the runner has one) for an ECR
/// authorization token for `registry` (`ecr:GetAuthorizationToken` for the registry's
/// account, in its region): basic credentials `AWS` and the token's password.
///
/// # Errors
///
/// The registry is not an ECR host, `env` holds no role credentials (the Plan resolved
/// no AWS role), ECR refuses, or its answer is not a token for this registry.
pub async fn ecr_token(
    registry: &str,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<RegistryAuth> {
    let ecr = EcrRegistry::parse(registry).with_context(|| {
        format!("{registry} is not an ECR registry (ACCOUNT.dkr.ecr.REGION.amazonaws.com)")
    })?;
    let Some(config) = crate::aws::plan_role_config(env, Some(&ecr.region)) else {
        bail!(
            "the Plan has no AWS role credentials: an ECR token for {registry} is asked for \
             under the Plan's role"
        );
    };
    let client = aws_sdk_ecr::Client::new(&config);
    // A token serves every registry of the region the role may reach; ECR deprecated
    // naming registries in the request, but naming this one makes the answer's
    // `proxyEndpoint` name it, which is checked below.
    #[allow(deprecated)]
    let request = client.get_authorization_token().registry_ids(&ecr.account);
    let answer = request.send().await.map_err(|e| {
        anyhow::anyhow!(
            "ecr:GetAuthorizationToken for {registry} failed: {}",
            crate::aws::describe(&e)
        )
    })?;
    let data = answer
        .authorization_data()
        .iter()
        .find(|d| {
            d.proxy_endpoint()
                .and_then(|p| p.split_once("://").map(|(_, host)| host))
                .is_some_and(|host| host.trim_end_matches('/') == registry)
        })
        .with_context(|| format!("ecr:GetAuthorizationToken returned no token for {registry}"))?;
    let token = data
        .authorization_token()
        .context("ECR's authorization data has no token")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .context("ECR's authorization token is not base64 of USER:PASSWORD")?;
    let (username, password) = decoded
        .split_once(':')
        .context("ECR's authorization token is not base64 of USER:PASSWORD")?;
    Ok(RegistryAuth::Basic(
        username.to_owned(),
        password.to_owned(),
    ))
}
