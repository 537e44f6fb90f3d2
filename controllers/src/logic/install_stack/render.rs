//! [`render_install_stack`]: an App and an Install to an `InstallStackSpec`.

use super::stack_template::StackTemplate;
use super::{inputs, roles, runner, secrets, state_bucket};
use outpost_api::{App, Install, InstallStackSpec, content_hash};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Renders one role name template for the Install the stack is for:
/// `"{{ install.id }}-provision"` to `"inst-123-provision"`, or a message
/// saying why it cannot.
///
/// The controller passes the template engine's renderer bound to the Install;
/// tests pass a small substitution.
pub type RenderRoleName<'a> = &'a dyn Fn(&str) -> Result<String, String>;

/// What the control plane adds to the App and Install when rendering a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackOptions {
    /// URLs the runner dials, for example `["https://outpost.example.com"]`: one (a
    /// load balancer in front of the API server replicas) or each replica's, which the
    /// runner fails over between. Comma-separated, they are the default of the
    /// `ServerUrl` parameter. Each must match
    /// [`SERVER_URL_PATTERN`](super::SERVER_URL_PATTERN).
    pub server_urls: Vec<String>,
}

/// Why a stack cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    /// The Install has no `metadata.name`.
    #[error("the install has no metadata.name")]
    InstallName,
    /// The `render` callback refused a role name.
    #[error("rendering role name {template:?}: {reason}")]
    RenderRoleName {
        /// The role's name template.
        template: String,
        /// What the callback said.
        reason: String,
    },
    /// A rendered role name is not a valid IAM role name.
    #[error("role {template:?} renders to {rendered:?}: {reason}")]
    InvalidRoleName {
        /// The role's name template.
        template: String,
        /// What it rendered to.
        rendered: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two roles render to the same IAM role name.
    #[error("roles {first:?} and {second:?} both render to {rendered:?}")]
    DuplicateRoleName {
        /// The rendered name.
        rendered: String,
        /// Template of the first role.
        first: String,
        /// Template of the second role.
        second: String,
    },
    /// A role name has no letters or digits outside `{{ ... }}` to derive the
    /// role's logical id from.
    #[error("role {template:?}: its name needs letters or digits outside {{{{ ... }}}}")]
    RoleLogicalId {
        /// The role's name template.
        template: String,
    },
    /// Two declared things map to the same CloudFormation logical id.
    #[error("logical id {id} is used by both {first} and {second}")]
    DuplicateLogicalId {
        /// The logical id.
        id: String,
        /// What claimed it first.
        first: String,
        /// What claimed it again.
        second: String,
    },
    /// A URL of `StackOptions::server_urls` does not match
    /// [`SERVER_URL_PATTERN`](super::SERVER_URL_PATTERN), or there is none.
    #[error(
        "server url {0:?} must be an https URL without spaces, quotes, commas or shell characters"
    )]
    ServerUrl(String),
}

/// Who the stack is for: the Install's namespace and name and what derives
/// from them.
pub(super) struct StackContext<'a> {
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    pub(super) external_id: String,
}

impl StackContext<'_> {
    /// `NS/NAME`, as the runner's `--install` flag takes it.
    pub(super) fn install_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Tags every taggable resource of the stack carries, plus `extra`.
    pub(super) fn tags(&self, extra: &[(&str, &str)]) -> Value {
        let mut tags =
            vec![json!({"Key": outpost_api::labels::INSTALL, "Value": self.install_ref()})];
        tags.extend(
            extra
                .iter()
                .map(|(key, value)| json!({"Key": key, "Value": value})),
        );
        Value::Array(tags)
    }
}

/// The value every role of `install`'s stack requires as `sts:ExternalId`:
/// `outpost:<namespace>/<name>`, with the namespace `default` when unset. The
/// runner passes the same value when it assumes a role.
///
/// # Errors
///
/// [`StackError::InstallName`] when the Install has no name.
pub fn role_external_id(install: &Install) -> Result<String, StackError> {
    let name = install
        .metadata
        .name
        .as_deref()
        .ok_or(StackError::InstallName)?;
    let namespace = install.metadata.namespace.as_deref().unwrap_or("default");
    Ok(format!("outpost:{namespace}/{name}"))
}

/// Renders the install stack of `install` (an Install of `app`): the
/// CloudFormation template as JSON, the parameter values the control plane
/// knows (`ServerUrl`, the server URLs comma-separated; never the runner token or
/// secret values), and as
/// `version` the template's [`content_hash`]. `render` renders each role
/// name template for `install`; see [`RenderRoleName`].
///
/// The output is deterministic: object keys are sorted and arrays follow the
/// App's declaration order. The template's layout is described in the
/// [module documentation](super).
///
/// # Errors
///
/// A [`StackError`] when a role name does not render to a valid, unique IAM
/// role name, when two roles or secrets map to one logical id, when the
/// Install has no name, or when the server URL is unsafe to put in UserData.
///
/// # Example
///
/// ```no_run
/// use outpost_controllers::install_stack::{StackOptions, render_install_stack};
/// # fn example(app: &outpost_api::App, install: &outpost_api::Install) {
/// let id = install.metadata.uid.clone().unwrap_or_default();
/// let render = |name: &str| Ok(name.replace("{{ install.id }}", &id));
/// let options = StackOptions { server_urls: vec!["https://outpost.example.com".into()] };
/// let stack = render_install_stack(app, install, &options, &render).unwrap();
/// println!("{} {}", stack.version, stack.template);
/// # }
/// ```
pub fn render_install_stack(
    app: &App,
    install: &Install,
    options: &StackOptions,
    render: RenderRoleName<'_>,
) -> Result<InstallStackSpec, StackError> {
    let server_urls = runner::server_url_parameter(&options.server_urls)?;
    let name = install
        .metadata
        .name
        .as_deref()
        .ok_or(StackError::InstallName)?;
    let context = StackContext {
        namespace: install.metadata.namespace.as_deref().unwrap_or("default"),
        name,
        external_id: role_external_id(install)?,
    };
    let app_name = app.metadata.name.as_deref().unwrap_or("app");

    let mut stack = StackTemplate::default();
    let settings = app.spec.runner.clone().unwrap_or_default();
    runner::add_parameters(&mut stack, &server_urls, &settings)?;
    inputs::add_inputs(&mut stack, &app.spec.inputs)?;
    let secret_refs: Vec<String> = app.spec.secrets.iter().map(secrets::secret_id).collect();
    // Every role keeps terraform state in the bucket and reads the install's secrets
    // (secrets last: the order a role's policies are listed in).
    let shared: Vec<serde_json::Value> = std::iter::once(state_bucket::role_policy())
        .chain(secrets::role_policy(&secret_refs))
        .collect();
    let role_names = roles::add_roles(&mut stack, &context, app.spec.roles(), &shared, render)?;
    let secret_ids = secrets::add_secrets(&mut stack, &context, &app.spec.secrets)?;
    state_bucket::add_state_bucket(&mut stack, &context, &role_names)?;
    runner::add_runner(&mut stack, &context, &role_names, &secret_ids)?;

    let cloud = &install.spec.cloud;
    let rules = json!({
        "InstallAccountAndRegion": {
            "Assertions": [
                {
                    "Assert": {"Fn::Equals": [{"Ref": "AWS::AccountId"}, cloud.account_id]},
                    "AssertDescription": format!(
                        "This stack is for AWS account {}.", cloud.account_id
                    ),
                },
                {
                    "Assert": {"Fn::Equals": [{"Ref": "AWS::Region"}, cloud.region]},
                    "AssertDescription": format!("This stack is for region {}.", cloud.region),
                },
            ],
        },
    });
    let description = format!(
        "Outpost install stack of {app_name} for install {}: IAM roles, secrets and the runner.",
        context.install_ref()
    );
    let template = stack.into_value(description, rules);
    let version = content_hash(&template);
    let parameters = BTreeMap::from([(runner::SERVER_URL_PARAMETER.to_owned(), server_urls)]);
    Ok(InstallStackSpec {
        install: name.to_owned(),
        version,
        template,
        parameters,
    })
}
