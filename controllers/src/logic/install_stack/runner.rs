//! The runner VM: its parameters, instance role and profile, an egress-only
//! security group and the instance that starts `outpost runner`.

use super::audit_anchor;
use super::render::{StackContext, StackError};
use super::runner_token;
use super::stack_template::StackTemplate;
use outpost_api::RunnerSettings;
use outpost_api::audit_anchor::{CHECKPOINT_PARAMETER, KEY_PARAMETER};
use serde_json::{Value, json};

/// Where the runner keeps its state on the VM (`--state-dir`).
pub const RUNNER_STATE_DIR: &str = "/var/lib/outpost";

/// `AllowedPattern` of the `ServerUrl` parameter: https URLs, comma-separated, of
/// characters that need no quoting in a shell or a systemd unit.
pub const SERVER_URL_PATTERN: &str = "^https://[A-Za-z0-9.:/_~%-]+(,https://[A-Za-z0-9.:/_~%-]+)*$";

/// `AllowedPattern` of the `TerraformProviders` parameter: provider source addresses
/// (`hashicorp/aws`, `registry.example.com/acme/db`, `acme/*`), comma-separated, at
/// least one, of characters that need no quoting in a shell or a systemd unit.
pub const TERRAFORM_PROVIDERS_PATTERN: &str =
    "^[A-Za-z0-9][A-Za-z0-9._/*-]*(,[A-Za-z0-9][A-Za-z0-9._/*-]*)*$";

/// The providers the runner allows unless the customer says otherwise: the AWS
/// provider (the install's roles are AWS roles). The built-in `terraform` provider
/// (`terraform_data`) is allowed whatever the list says.
pub const DEFAULT_TERRAFORM_PROVIDERS: &str = "hashicorp/aws";

pub(super) const SERVER_URL_PARAMETER: &str = "ServerUrl";
pub(super) const TERRAFORM_PROVIDERS_PARAMETER: &str = "TerraformProviders";
pub(super) const RUNNER_ROLE: &str = "RunnerInstanceRole";
const GROUP: &str = "Runner";
const DEFAULT_INSTANCE_TYPE: &str = "t3.small";

/// The `ServerUrl` parameter's value: `urls` comma-separated, each checked with
/// [`is_safe_server_url`].
pub(super) fn server_url_parameter(urls: &[String]) -> Result<String, StackError> {
    match urls.iter().find(|url| !is_safe_server_url(url)) {
        Some(unsafe_url) => Err(StackError::ServerUrl(unsafe_url.clone())),
        None if urls.is_empty() => Err(StackError::ServerUrl(String::new())),
        None => Ok(urls.join(",")),
    }
}

/// Whether `url` is one URL of [`SERVER_URL_PATTERN`].
fn is_safe_server_url(url: &str) -> bool {
    url.strip_prefix("https://").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".:/_~%-".contains(&b))
    })
}

/// Adds the runner's parameters, first in the console.
pub(super) fn add_parameters(
    stack: &mut StackTemplate,
    server_urls: &str,
    settings: &RunnerSettings,
) -> Result<(), StackError> {
    let owner = "the runner";
    let instance_type = settings
        .instance_type
        .as_deref()
        .unwrap_or(DEFAULT_INSTANCE_TYPE);
    let parameters = [
        (
            SERVER_URL_PARAMETER,
            json!({
                "Type": "String",
                "Default": server_urls,
                "AllowedPattern": SERVER_URL_PATTERN,
                "Description": "URL of the vendor's Outpost control plane the runner dials; several, comma-separated, for it to fail over between API server replicas",
            }),
        ),
        (runner_token::TOKEN_PARAMETER, runner_token::parameter()),
        (
            TERRAFORM_PROVIDERS_PARAMETER,
            json!({
                "Type": "String",
                "Default": DEFAULT_TERRAFORM_PROVIDERS,
                "AllowedPattern": TERRAFORM_PROVIDERS_PATTERN,
                "ConstraintDescription": "provider source addresses (NAMESPACE/TYPE, HOST/NAMESPACE/TYPE or NAMESPACE/*), comma-separated, without spaces",
                "Description": "Terraform providers the vendor's modules may use, comma-separated (hashicorp/aws, acme/*); a module needing any other is refused before terraform runs. terraform_data (terraform.io/builtin/terraform) is always allowed: give only that to allow no other",
            }),
        ),
        (
            "RunnerAmiId",
            json!({
                "Type": "AWS::EC2::Image::Id",
                "Description": "AMI of the runner VM; it must have `outpost` on its PATH",
            }),
        ),
        (
            "RunnerInstanceType",
            json!({
                "Type": "String",
                "Default": instance_type,
                "Description": "EC2 instance type of the runner VM",
            }),
        ),
        (
            "VpcId",
            json!({
                "Type": "AWS::EC2::VPC::Id",
                "Description": "VPC of the runner VM",
            }),
        ),
        (
            "RunnerSubnetId",
            json!({
                "Type": "AWS::EC2::Subnet::Id",
                "Description": "Subnet of the runner VM, in the VPC; it needs outbound HTTPS",
            }),
        ),
    ];
    for (id, parameter) in parameters {
        stack.parameter(GROUP, id, owner, parameter)?;
    }
    Ok(())
}

/// Adds the runner's resources and outputs. `role_names` are the rendered
/// names of the declared roles, `secret_ids` the logical ids of the secrets.
pub(super) fn add_runner(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
    role_names: &[String],
    secret_ids: &[String],
) -> Result<(), StackError> {
    let owner = "the runner";
    let mut statements = Vec::new();
    if !role_names.is_empty() {
        // By name, not `Fn::GetAtt`: the roles trust this role, so referring
        // to them here would be a dependency cycle. Disabled roles do not
        // exist, so allowing them grants nothing.
        let arns: Vec<Value> = role_names
            .iter()
            .map(|name| {
                json!({"Fn::Sub": format!("arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:role/{name}")})
            })
            .collect();
        statements.push(json!({
            "Sid": "AssumeInstallRoles",
            "Effect": "Allow",
            "Action": "sts:AssumeRole",
            "Resource": arns.clone(),
        }));
        // The runner checks a role exists and trusts it before assuming it.
        statements.push(json!({
            "Sid": "CheckInstallRoles",
            "Effect": "Allow",
            "Action": "iam:GetRole",
            "Resource": arns,
        }));
    }
    // The runner reads its token at boot, and no other principal may.
    statements.push(runner_token::add_secret(stack, context, RUNNER_ROLE)?);
    // The runner publishes its public key and checkpoints, and no other principal of the
    // stack may.
    statements.push(audit_anchor::add_parameters(stack, context)?);
    // The runner reads its own stack: enabled roles, outputs.
    statements.push(json!({
        "Sid": "ReadInstallStack",
        "Effect": "Allow",
        "Action": "cloudformation:DescribeStacks",
        "Resource": {"Ref": "AWS::StackId"},
    }));
    if !secret_ids.is_empty() {
        let arns: Vec<Value> = secret_ids.iter().map(|id| json!({"Ref": id})).collect();
        statements.push(json!({
            "Sid": "ReadInstallSecrets",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": arns,
        }));
    }
    let mut role_properties = serde_json::Map::new();
    role_properties.insert(
        "AssumeRolePolicyDocument".into(),
        json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }],
        }),
    );
    role_properties.insert(
        "Description".into(),
        json!(format!(
            "Outpost runner of install {}",
            context.install_ref()
        )),
    );
    role_properties.insert(
        "Policies".into(),
        json!([{
            "PolicyName": "outpost-runner",
            "PolicyDocument": {"Version": "2012-10-17", "Statement": statements},
        }]),
    );
    role_properties.insert("Tags".into(), context.tags(&[]));
    stack.resource(
        RUNNER_ROLE,
        owner,
        json!({"Type": "AWS::IAM::Role", "Properties": role_properties}),
    )?;
    stack.resource(
        "RunnerInstanceProfile",
        owner,
        json!({
            "Type": "AWS::IAM::InstanceProfile",
            "Properties": {"Roles": [{"Ref": RUNNER_ROLE}]},
        }),
    )?;
    // Egress only: the runner listens on no port, so there is no ingress rule.
    stack.resource(
        "RunnerSecurityGroup",
        owner,
        json!({
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": format!(
                    "Outpost runner of install {}: outbound only", context.install_ref()
                ),
                "VpcId": {"Ref": "VpcId"},
                "SecurityGroupEgress": [{
                    "IpProtocol": "-1",
                    "CidrIp": "0.0.0.0/0",
                    "Description": "The runner dials the control plane and cloud APIs",
                }],
                "Tags": context.tags(&[]),
            },
        }),
    )?;
    stack.resource(
        "RunnerInstance",
        owner,
        json!({
            "Type": "AWS::EC2::Instance",
            "Properties": {
                "ImageId": {"Ref": "RunnerAmiId"},
                "InstanceType": {"Ref": "RunnerInstanceType"},
                "SubnetId": {"Ref": "RunnerSubnetId"},
                "SecurityGroupIds": [{"Ref": "RunnerSecurityGroup"}],
                "IamInstanceProfile": {"Ref": "RunnerInstanceProfile"},
                "MetadataOptions": {"HttpTokens": "required"},
                "UserData": {"Fn::Base64": {"Fn::Sub": user_data(context)}},
                "Tags": context.tags(&[("Name", &format!("outpost-runner-{}", context.name))]),
            },
        }),
    )?;
    for (id, description, value) in [
        (
            "RunnerInstanceId",
            "Instance id of the runner VM",
            json!({"Ref": "RunnerInstance"}),
        ),
        (
            "RunnerRoleArn",
            "ARN of the runner's instance role, the only principal the install's roles trust",
            json!({"Fn::GetAtt": [RUNNER_ROLE, "Arn"]}),
        ),
        (
            "RoleExternalId",
            "The sts:ExternalId every role of the install requires",
            json!(context.external_id),
        ),
    ] {
        stack.output(
            id,
            owner,
            json!({"Description": description, "Value": value}),
        )?;
    }
    Ok(())
}

/// The UserData script, for `Fn::Sub`: installs and starts `outpost runner`
/// as a systemd service. `${ServerUrl}`, `${TerraformProviders}`, `${RunnerTokenSecret}`
/// (the token's secret's ARN), `${StateBucket}` (the terraform state bucket's name),
/// `${RunnerPublicKeyParameter}` and `${AuditCheckpointParameter}` (the audit anchor's SSM
/// parameter names), `${AWS::StackName}` and `${AWS::Region}` are substituted by
/// CloudFormation; the `AllowedPattern`s of `ServerUrl` and `TerraformProviders` keep
/// them free of characters the shell or systemd would interpret (and non-empty), and the
/// others are ARNs and names of such characters. The token itself is
/// not in the script, the unit or the command line: the runner reads it from the secret
/// with its instance role. The script uses no `${` of its own.
fn user_data(context: &StackContext<'_>) -> String {
    let command = format!(
        "outpost runner --server ${{ServerUrl}} --token-secret ${{{}}} --install {} \
         --state-dir {RUNNER_STATE_DIR} --state-bucket ${{{}}} --stack ${{AWS::StackName}} \
         --aws-region ${{AWS::Region}} \
         --publish-key-parameter ${{{KEY_PARAMETER}}} \
         --publish-checkpoint-parameter ${{{CHECKPOINT_PARAMETER}}} \
         --terraform-providers ${{{TERRAFORM_PROVIDERS_PARAMETER}}}",
        runner_token::TOKEN_SECRET,
        context.install_ref(),
        super::state_bucket::STATE_BUCKET,
    );
    [
        "#!/bin/bash".to_owned(),
        "set -euo pipefail".to_owned(),
        format!("install -d -m 0700 {RUNNER_STATE_DIR}"),
        "umask 077".to_owned(),
        "cat >/etc/systemd/system/outpost-runner.service <<'UNIT'".to_owned(),
        "[Unit]".to_owned(),
        "Description=Outpost runner".to_owned(),
        "Wants=network-online.target".to_owned(),
        "After=network-online.target".to_owned(),
        "[Service]".to_owned(),
        format!("ExecStart=/usr/bin/env {command}"),
        "Restart=always".to_owned(),
        "RestartSec=5".to_owned(),
        "[Install]".to_owned(),
        "WantedBy=multi-user.target".to_owned(),
        "UNIT".to_owned(),
        "systemctl daemon-reload".to_owned(),
        "systemctl enable --now outpost-runner.service".to_owned(),
        String::new(),
    ]
    .join("\n")
}
