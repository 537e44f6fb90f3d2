//! The customer's AWS account: the runner reads its install stack and assumes one of the
//! stack's roles for each Plan.
//!
//! The runner's own credentials come from the default chain (on the VM: the instance
//! role the install stack created). They are used only to read the stack, to check a
//! role before assuming it (`iam:GetRole`), to assume it (`sts:AssumeRole`) and to read
//! the install's secrets. Everything a Plan does runs under the role it resolved to,
//! with short-lived credentials handed to the executor in its environment, never on
//! disk. A role that is not enabled in the stack, does not exist, does not trust the
//! runner with the install's external id, or that STS refuses, fails the Plan closed
//! ([`RoleError`]); there is no fallback to another role.

pub mod anchor_parameters;
pub mod stack;
pub mod trust;

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sts::error::ProvideErrorMetadata;
pub use stack::StackInfo;

/// How long a Plan's role credentials live: STS's minimum, 15 minutes. A step that
/// runs longer gets expired credentials from the cloud's APIs.
pub const SESSION_SECONDS: i32 = 900;

/// Why a role cannot be used for a Plan. Every variant fails the Plan closed with
/// [`RoleError::PLAN_MESSAGE`]; the variant's text goes to the audit log and the
/// runner's log.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// The install stack has not been read yet, or cannot be.
    #[error("the install stack {stack} cannot be read: {reason}")]
    Stack {
        /// The stack's name.
        stack: String,
        /// What failed.
        reason: String,
    },
    /// The stack does not enable the role (its `Enable…` parameter is `false`, or the
    /// stack does not declare it).
    #[error("role {0} is not enabled in the install stack")]
    NotEnabled(String),
    /// `iam:GetRole` says the role does not exist.
    #[error("role {0} does not exist")]
    Missing(String),
    /// The role's trust policy does not let the runner assume it with the external id.
    #[error("role {role} does not trust {runner} with the install's external id")]
    Untrusted {
        /// The role.
        role: String,
        /// The runner's role ARN.
        runner: String,
    },
    /// IAM or STS answered with an error (access denied, throttled, unreachable).
    #[error("{call} for role {role} failed: {reason}")]
    Call {
        /// `iam:GetRole` or `sts:AssumeRole`.
        call: &'static str,
        /// The role.
        role: String,
        /// The service's error code and message.
        reason: String,
    },
}

impl RoleError {
    /// The Plan's failure message for role `role`, whatever the reason.
    pub fn plan_message(role: &str) -> String {
        format!("role {role} is disabled or not assumable in the customer account")
    }

    /// The constant part of [`RoleError::plan_message`], for documentation.
    pub const PLAN_MESSAGE: &'static str =
        "role R is disabled or not assumable in the customer account";
}

/// A role assumed for one Plan.
pub struct AssumedRole {
    /// The role's ARN.
    pub role_arn: String,
    /// The assumed-role identity (`arn:aws:sts::ACCOUNT:assumed-role/ROLE/PLAN-UID`).
    pub identity: String,
    /// When the credentials expire (RFC 3339).
    pub expires: String,
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
}

impl std::fmt::Debug for AssumedRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssumedRole")
            .field("role_arn", &self.role_arn)
            .field("identity", &self.identity)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// The customer's account as the runner sees it: its SDK configuration, its install
/// stack and the stack as last read.
pub struct Account {
    config: SdkConfig,
    /// The install stack's name (`--stack`).
    pub stack_name: String,
    /// `--aws-endpoint`, also handed to executors as `AWS_ENDPOINT_URL`.
    pub endpoint: Option<String>,
    /// The region the SDK uses, also handed to executors.
    pub region: String,
    /// The runner's own identity (`sts:GetCallerIdentity`), once read.
    caller: Mutex<Option<String>>,
    /// The stack as last read.
    stack: Mutex<Option<StackInfo>>,
}

impl Account {
    /// Loads the default credential chain and region (`--aws-region` and
    /// `--aws-endpoint` override them) for the install stack `stack_name`.
    pub async fn load(
        stack_name: String,
        region: Option<String>,
        endpoint: Option<String>,
    ) -> anyhow::Result<Self> {
        let config = sdk_config(region, endpoint.clone()).await?;
        let region = config
            .region()
            .map(|r| r.to_string())
            .expect("sdk_config refuses a configuration without a region");
        Ok(Self {
            config,
            stack_name,
            endpoint,
            region,
            caller: Mutex::default(),
            stack: Mutex::default(),
        })
    }

    /// The SDK configuration with the runner's own credentials.
    pub fn config(&self) -> &SdkConfig {
        &self.config
    }

    /// Reads the install stack (`cloudformation:DescribeStacks`) and which of its roles
    /// exist (`iam:GetRole`), and keeps it as the stack last read.
    pub async fn refresh(&self) -> anyhow::Result<StackInfo> {
        let mut info = stack::describe(&self.config, &self.stack_name).await?;
        let iam = aws_sdk_iam::Client::new(&self.config);
        for (name, role) in &mut info.roles {
            if role.enabled {
                role.exists = match iam.get_role().role_name(name).send().await {
                    Ok(_) => Some(true),
                    Err(e) if e.code() == Some("NoSuchEntity") => Some(false),
                    Err(_) => None,
                };
            }
        }
        *self.stack.lock().expect("not poisoned") = Some(info.clone());
        Ok(info)
    }

    /// The stack as last read.
    pub fn stack(&self) -> Option<StackInfo> {
        self.stack.lock().expect("not poisoned").clone()
    }

    /// The runner's own ARN (`sts:GetCallerIdentity`), read once.
    async fn caller(&self) -> Result<String, String> {
        if let Some(arn) = self.caller.lock().expect("not poisoned").clone() {
            return Ok(arn);
        }
        let sts = aws_sdk_sts::Client::new(&self.config);
        let identity = sts
            .get_caller_identity()
            .send()
            .await
            .map_err(|e| describe(&e))?;
        let arn = identity.arn().unwrap_or_default().to_owned();
        *self.caller.lock().expect("not poisoned") = Some(arn.clone());
        Ok(arn)
    }

    /// Checks role `role` and assumes it for the Plan `plan_uid` (the session name):
    /// the stack (read again now) must enable it, IAM must show it exists and that its
    /// trust policy lets the runner's role assume it with the stack's external id, and
    /// STS must grant it.
    pub async fn assume(&self, role: &str, plan_uid: &str) -> Result<AssumedRole, RoleError> {
        let stack = match self.refresh().await {
            Ok(stack) => stack,
            Err(e) => {
                return Err(RoleError::Stack {
                    stack: self.stack_name.clone(),
                    reason: format!("{e:#}"),
                });
            }
        };
        if !stack.roles.get(role).is_some_and(|r| r.enabled) {
            return Err(RoleError::NotEnabled(role.to_owned()));
        }
        let call = |call: &'static str, reason: String| RoleError::Call {
            call,
            role: role.to_owned(),
            reason,
        };
        let caller = self
            .caller()
            .await
            .map_err(|reason| call("sts:GetCallerIdentity", reason))?;
        let runner_role = trust::role_of(&caller);
        let iam = aws_sdk_iam::Client::new(&self.config);
        let found = match iam.get_role().role_name(role).send().await {
            Ok(found) => found,
            Err(e) if e.code() == Some("NoSuchEntity") => {
                return Err(RoleError::Missing(role.to_owned()));
            }
            Err(e) => return Err(call("iam:GetRole", describe(&e))),
        };
        let found = found
            .role()
            .ok_or_else(|| RoleError::Missing(role.to_owned()))?;
        let document = found.assume_role_policy_document().unwrap_or_default();
        if !trust::trusts(document, &[&runner_role, &caller], &stack.external_id) {
            return Err(RoleError::Untrusted {
                role: role.to_owned(),
                runner: runner_role,
            });
        }
        let sts = aws_sdk_sts::Client::new(&self.config);
        let assumed = sts
            .assume_role()
            .role_arn(found.arn())
            .role_session_name(plan_uid)
            .external_id(&stack.external_id)
            .duration_seconds(SESSION_SECONDS)
            .send()
            .await
            .map_err(|e| call("sts:AssumeRole", describe(&e)))?;
        let credentials = assumed
            .credentials()
            .ok_or_else(|| call("sts:AssumeRole", "no credentials in the answer".into()))?;
        Ok(AssumedRole {
            role_arn: found.arn().to_owned(),
            identity: assumed
                .assumed_role_user()
                .map(|u| u.arn().to_owned())
                .unwrap_or_default(),
            expires: credentials.expiration().to_string(),
            access_key_id: credentials.access_key_id().to_owned(),
            secret_access_key: credentials.secret_access_key().to_owned(),
            session_token: credentials.session_token().to_owned(),
        })
    }

    /// The SDK configuration of the account with `assumed`'s credentials.
    pub fn config_for(&self, assumed: &AssumedRole) -> SdkConfig {
        use aws_sdk_sts::config::{Credentials, SharedCredentialsProvider};
        let credentials = Credentials::new(
            assumed.access_key_id.clone(),
            assumed.secret_access_key.clone(),
            Some(assumed.session_token.clone()),
            None,
            "outpost-plan-role",
        );
        self.config
            .to_builder()
            .credentials_provider(SharedCredentialsProvider::new(credentials))
            .build()
    }

    /// The environment an executor gets for `assumed`: the standard AWS variables every
    /// SDK, the AWS CLI and terraform's AWS provider read.
    pub fn environment(&self, assumed: &AssumedRole) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            (
                "AWS_ACCESS_KEY_ID".to_owned(),
                assumed.access_key_id.clone(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY".to_owned(),
                assumed.secret_access_key.clone(),
            ),
            (
                "AWS_SESSION_TOKEN".to_owned(),
                assumed.session_token.clone(),
            ),
            ("AWS_REGION".to_owned(), self.region.clone()),
            ("AWS_DEFAULT_REGION".to_owned(), self.region.clone()),
        ]);
        if let Some(endpoint) = &self.endpoint {
            env.insert("AWS_ENDPOINT_URL".to_owned(), endpoint.clone());
        }
        env
    }
}

/// The SDK configuration an executor builds from its step's environment, the inverse of
/// [`Account::environment`]: the Plan role's credentials, `region` (else `AWS_REGION`) and
/// `AWS_ENDPOINT_URL`. `None` when the environment holds no role credentials or no
/// region: the Plan resolved no AWS role, and nothing falls back to the runner's own.
pub fn plan_role_config(env: &BTreeMap<String, String>, region: Option<&str>) -> Option<SdkConfig> {
    use aws_sdk_sts::config::SharedCredentialsProvider;
    let var = |name: &str| env.get(name).filter(|v| !v.is_empty()).cloned();
    let region = region.map(str::to_owned).or_else(|| var("AWS_REGION"))?;
    let credentials = plan_role_credentials(env)?;
    let mut config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .http_client(http_client());
    if let Some(endpoint) = var("AWS_ENDPOINT_URL") {
        config = config.endpoint_url(endpoint);
    }
    Some(config.build())
}

/// The Plan role's credentials in a step's environment ([`Account::environment`]);
/// `None` when it holds none.
pub fn plan_role_credentials(
    env: &BTreeMap<String, String>,
) -> Option<aws_sdk_sts::config::Credentials> {
    let var = |name: &str| env.get(name).filter(|v| !v.is_empty()).cloned();
    Some(aws_sdk_sts::config::Credentials::new(
        var("AWS_ACCESS_KEY_ID")?,
        var("AWS_SECRET_ACCESS_KEY")?,
        var("AWS_SESSION_TOKEN"),
        None,
        "outpost-plan-role",
    ))
}

/// The HTTP client every AWS SDK client of the runner uses: hyper with rustls on
/// *ring* (the crypto provider the rest of the runner uses).
pub fn http_client() -> aws_sdk_sts::config::SharedHttpClient {
    use aws_smithy_http_client::tls;
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// The runner's own SDK configuration: the default credential chain (on the VM: the
/// instance role) and region, `region` (`--aws-region`) and `endpoint`
/// (`--aws-endpoint`) overriding them.
///
/// # Errors
///
/// When no region is given or configured.
pub async fn sdk_config(
    region: Option<String>,
    endpoint: Option<String>,
) -> anyhow::Result<SdkConfig> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http_client());
    if let Some(region) = region {
        loader = loader.region(Region::new(region));
    }
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    let config = loader.load().await;
    anyhow::ensure!(
        config.region().is_some(),
        "no AWS region: pass --aws-region or set AWS_REGION"
    );
    Ok(config)
}

/// An SDK error as `Code: message`; the HTTP status and the start of the answer when
/// the service's error has no code the SDK could parse; or the transport failure.
pub(crate) fn describe<E>(
    error: &aws_sdk_sts::error::SdkError<E, aws_sdk_sts::config::http::HttpResponse>,
) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error.as_service_error() {
        Some(service) => match (service.code(), error.raw_response()) {
            (None, Some(raw)) => {
                let body = String::from_utf8_lossy(raw.body().bytes().unwrap_or_default());
                let body: Vec<&str> = body.split_whitespace().collect();
                let body: String = body.join(" ").chars().take(300).collect();
                format!("HTTP {}: {body}", raw.status().as_u16())
            }
            (code, _) => format!(
                "{}: {}",
                code.unwrap_or("error"),
                service.message().unwrap_or_default()
            ),
        },
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(inner) = source {
                text.push_str(": ");
                text.push_str(&inner.to_string());
                source = inner.source();
            }
            text
        }
    }
}
