//! Renders the example App's stack and checks what a customer would see:
//! parameters and their defaults, which resources each parameter setting
//! creates (conditions evaluated here), trust, ingress and NoEcho.

use super::*;
use outpost_api::{App, Install, InstallStackSpec, content_hash, is_content_hash};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

const APP_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../manifests/app.yaml"
));

fn example_app() -> App {
    serde_saphyr::from_str(APP_YAML).expect("manifests/app.yaml is an App")
}

fn install() -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": "acme", "namespace": "shop"},
        "spec": {
            "app": "shopfront",
            "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"},
        },
    }))
    .expect("a valid Install")
}

/// Stands in for the template engine: `{{ install.id }}` and
/// `{{ install.name }}` become the install's name; anything else is an error.
fn render_for(install: &Install) -> impl Fn(&str) -> Result<String, String> + use<> {
    let name = install.metadata.name.clone().unwrap_or_default();
    move |text: &str| {
        let out = text
            .replace("{{ install.id }}", &name)
            .replace("{{ install.name }}", &name);
        match out.find("{{") {
            Some(at) => Err(format!("unknown expression at byte {at}")),
            None => Ok(out),
        }
    }
}

fn options() -> StackOptions {
    StackOptions {
        server_urls: vec!["https://outpost.example.com".into()],
    }
}

fn render(app: &App) -> Result<InstallStackSpec, StackError> {
    let install = install();
    render_install_stack(app, &install, &options(), &render_for(&install))
}

fn example_stack() -> Value {
    render(&example_app())
        .expect("the example renders")
        .template
}

fn section<'a>(template: &'a Value, name: &str) -> &'a Map<String, Value> {
    template[name]
        .as_object()
        .unwrap_or_else(|| panic!("template has a {name} section"))
}

/// A parameter's value: `set` if given there, else its `Default`.
fn parameter_value(template: &Value, set: &BTreeMap<&str, &str>, name: &str) -> String {
    if let Some(value) = set.get(name) {
        return (*value).to_owned();
    }
    template["Parameters"][name]["Default"]
        .as_str()
        .unwrap_or_else(|| panic!("parameter {name} has no default and was not set"))
        .to_owned()
}

/// Evaluates a condition expression as CloudFormation would.
fn evaluate(template: &Value, set: &BTreeMap<&str, &str>, expression: &Value) -> bool {
    let operand = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Object(o) if o.contains_key("Ref") => {
                parameter_value(template, set, o["Ref"].as_str().expect("Ref is a name"))
            }
            other => panic!("unsupported operand {other}"),
        }
    };
    let (function, args) = expression
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("a condition is a one-key object");
    match function.as_str() {
        "Fn::Equals" => operand(&args[0]) == operand(&args[1]),
        "Fn::Not" => !evaluate(template, set, &args[0]),
        "Fn::And" => args
            .as_array()
            .unwrap()
            .iter()
            .all(|a| evaluate(template, set, a)),
        "Fn::Or" => args
            .as_array()
            .unwrap()
            .iter()
            .any(|a| evaluate(template, set, a)),
        "Condition" => {
            let name = args.as_str().expect("Condition names a condition");
            evaluate(template, set, &template["Conditions"][name])
        }
        other => panic!("unsupported condition function {other}"),
    }
}

/// The entries of `section_name` CloudFormation would create for the
/// parameter values `set` (defaults elsewhere).
fn created(template: &Value, section_name: &str, set: &[(&str, &str)]) -> BTreeSet<String> {
    let set: BTreeMap<&str, &str> = set.iter().copied().collect();
    section(template, section_name)
        .iter()
        .filter(|(_, entry)| match entry.get("Condition") {
            None => true,
            Some(Value::String(name)) => {
                let expression = &template["Conditions"][name.as_str()];
                assert!(!expression.is_null(), "condition {name} is defined");
                evaluate(template, &set, expression)
            }
            Some(other) => panic!("Condition must be a name, got {other}"),
        })
        .map(|(id, _)| id.clone())
        .collect()
}

fn role_resources(ids: &BTreeSet<String>) -> BTreeSet<&str> {
    ids.iter()
        .map(String::as_str)
        .filter(|id| id.starts_with("Role"))
        .collect()
}

#[test]
fn one_switch_per_role_with_defaults_by_type() {
    let template = example_stack();
    let parameters = section(&template, "Parameters");
    let expected = [
        ("EnableProvision", "true"),
        ("EnableMaintenance", "true"),
        ("EnableDeprovision", "true"),
        ("EnableBreakGlass", "false"),
        ("EnableEksUpgradeRole", "false"),
    ];
    for (name, default) in expected {
        let parameter = &parameters[name];
        assert_eq!(parameter["Type"], "String", "{name}");
        assert_eq!(
            parameter["AllowedValues"],
            json!(["true", "false"]),
            "{name}"
        );
        assert_eq!(parameter["Default"], default, "{name}");
    }
    let switches: BTreeSet<&str> = parameters
        .keys()
        .map(String::as_str)
        .filter(|k| k.starts_with("Enable"))
        .collect();
    assert_eq!(switches, expected.iter().map(|(n, _)| *n).collect());

    // Every role resource, its boundary and its output carry the role's condition.
    let conditions = section(&template, "Conditions");
    assert_eq!(conditions.len(), 5);
    for key in [
        "Provision",
        "Maintenance",
        "Deprovision",
        "BreakGlass",
        "EksUpgradeRole",
    ] {
        let condition = format!("Role{key}Enabled");
        assert_eq!(
            conditions[&condition],
            json!({"Fn::Equals": [{"Ref": format!("Enable{key}")}, "true"]})
        );
        let role = &template["Resources"][format!("Role{key}")];
        assert_eq!(role["Type"], "AWS::IAM::Role");
        assert_eq!(role["Condition"], condition.as_str());
        assert_eq!(
            template["Outputs"][format!("Role{key}Arn")]["Condition"],
            condition.as_str()
        );
    }
}

#[test]
fn custom_role_enabled_by_default_defaults_to_true() {
    let mut app = example_app();
    let roles = &mut app.spec.permissions.as_mut().unwrap().roles;
    roles[4].enabled_by_default = Some(true);
    roles[0].enabled_by_default = Some(false);
    let template = render(&app).unwrap().template;
    assert_eq!(
        template["Parameters"]["EnableEksUpgradeRole"]["Default"],
        "true"
    );
    assert_eq!(
        template["Parameters"]["EnableProvision"]["Default"],
        "false"
    );
}

#[test]
fn flipping_a_switch_changes_which_roles_are_created() {
    let template = example_stack();
    let defaults = created(&template, "Resources", &[]);
    assert_eq!(
        role_resources(&defaults),
        BTreeSet::from([
            "RoleDeprovision",
            "RoleMaintenance",
            "RoleProvision",
            "RoleProvisionBoundary",
        ])
    );

    let with_upgrade = created(&template, "Resources", &[("EnableEksUpgradeRole", "true")]);
    assert_eq!(
        &with_upgrade - &defaults,
        BTreeSet::from([
            "RoleEksUpgradeRole".to_owned(),
            "RoleEksUpgradeRoleBoundary".to_owned()
        ])
    );
    let outputs = created(&template, "Outputs", &[("EnableEksUpgradeRole", "true")]);
    assert!(outputs.contains("RoleEksUpgradeRoleArn"));
    assert!(!created(&template, "Outputs", &[]).contains("RoleEksUpgradeRoleArn"));

    let without_provision = created(
        &template,
        "Resources",
        &[("EnableProvision", "false"), ("EnableBreakGlass", "true")],
    );
    assert_eq!(
        role_resources(&without_provision),
        BTreeSet::from(["RoleBreakGlass", "RoleDeprovision", "RoleMaintenance"])
    );
    // The runner and the secrets do not depend on any switch.
    let everything_off = created(
        &template,
        "Resources",
        &[
            ("EnableProvision", "false"),
            ("EnableMaintenance", "false"),
            ("EnableDeprovision", "false"),
        ],
    );
    assert_eq!(
        everything_off,
        BTreeSet::from(
            [
                "AuditCheckpointParameter",
                "RunnerPublicKeyParameter",
                "RunnerInstance",
                "RunnerInstanceProfile",
                "RunnerInstanceRole",
                "RunnerSecurityGroup",
                "RunnerTokenSecret",
                "RunnerTokenSecretPolicy",
                "SecretApiKey",
                "SecretDbPassword",
                "StateBucket",
                "StateBucketPolicy",
            ]
            .map(String::from)
        )
    );
}

#[test]
fn roles_trust_only_the_runner_role_with_the_external_id() {
    let template = example_stack();
    let role = &template["Resources"]["RoleEksUpgradeRole"]["Properties"];
    assert_eq!(role["RoleName"], "acme-eks-upgrade-role");
    let statements = role["AssumeRolePolicyDocument"]["Statement"]
        .as_array()
        .unwrap();
    assert_eq!(statements.len(), 1);
    assert_eq!(
        statements[0]["Principal"],
        json!({"AWS": {"Fn::GetAtt": ["RunnerInstanceRole", "Arn"]}})
    );
    assert_eq!(statements[0]["Action"], "sts:AssumeRole");
    assert_eq!(
        statements[0]["Condition"],
        json!({"StringEquals": {"sts:ExternalId": "outpost:shop/acme"}})
    );
    assert_eq!(role_external_id(&install()).unwrap(), "outpost:shop/acme");

    // The runner's role is assumed by EC2 only and may assume the declared roles.
    let runner = &template["Resources"]["RunnerInstanceRole"]["Properties"];
    assert_eq!(
        runner["AssumeRolePolicyDocument"]["Statement"][0]["Principal"],
        json!({"Service": "ec2.amazonaws.com"})
    );
    let assume = &runner["Policies"][0]["PolicyDocument"]["Statement"][0];
    assert_eq!(assume["Action"], "sts:AssumeRole");
    assert_eq!(assume["Resource"].as_array().unwrap().len(), 5);
    assert_eq!(
        assume["Resource"][4],
        json!({"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/acme-eks-upgrade-role"})
    );
    // It checks a role (exists, trusts it) before assuming it, and reads its own stack.
    let check = &runner["Policies"][0]["PolicyDocument"]["Statement"][1];
    assert_eq!(check["Action"], "iam:GetRole");
    assert_eq!(check["Resource"], assume["Resource"]);
    let statements = runner["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap();
    let read_stack = statements
        .iter()
        .find(|s| s["Sid"] == "ReadInstallStack")
        .expect("the runner may read its stack");
    assert_eq!(read_stack["Action"], "cloudformation:DescribeStacks");
    assert_eq!(read_stack["Resource"], json!({"Ref": "AWS::StackId"}));
    // The runner learns every role's name, enabled or not, and the external id from
    // the stack's outputs, and finds its stack by name.
    let outputs = &template["Outputs"];
    assert_eq!(
        outputs["RoleEksUpgradeRoleName"],
        json!({
            "Description": "Name of the custom role, enabled by parameter EnableEksUpgradeRole",
            "Value": "acme-eks-upgrade-role",
        })
    );
    assert_eq!(outputs["RoleExternalId"]["Value"], "outpost:shop/acme");
    let user_data = template["Resources"]["RunnerInstance"]["Properties"]["UserData"]["Fn::Base64"]
        ["Fn::Sub"]
        .as_str()
        .unwrap();
    assert!(
        user_data.contains("--stack ${AWS::StackName} --aws-region ${AWS::Region}"),
        "{user_data}"
    );
}

#[test]
fn policies_and_boundaries_are_as_declared() {
    let app = example_app();
    let template = render(&app).unwrap().template;
    let resources = &template["Resources"];
    let maintenance = &app.spec.roles()[1];
    let properties = &resources["RoleMaintenance"]["Properties"];
    assert_eq!(properties["Policies"][0]["PolicyName"], "eks-deploy");
    assert_eq!(
        properties["Policies"][0]["PolicyDocument"],
        maintenance.policies[0].document
    );
    assert_eq!(properties["Policies"][1]["PolicyName"], "rds-read");
    // Every role may read the install's secrets: the runner reads a Plan's secrets
    // under the Plan's role.
    for role in ["RoleMaintenance", "RoleProvision", "RoleEksUpgradeRole"] {
        let policies = resources[role]["Properties"]["Policies"]
            .as_array()
            .unwrap();
        let secrets = policies.last().unwrap();
        assert_eq!(secrets["PolicyName"], "outpost-install-secrets", "{role}");
        assert_eq!(
            secrets["PolicyDocument"]["Statement"][0],
            json!({
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": [{"Ref": "SecretDbPassword"}, {"Ref": "SecretApiKey"}],
            }),
            "{role}"
        );
    }
    assert_eq!(
        properties["PermissionsBoundary"],
        "arn:aws:iam::aws:policy/PowerUserAccess"
    );

    let provision = &resources["RoleProvision"]["Properties"];
    assert_eq!(
        provision["ManagedPolicyArns"],
        json!(["arn:aws:iam::aws:policy/AdministratorAccess"])
    );
    assert_eq!(
        provision["PermissionsBoundary"],
        json!({"Ref": "RoleProvisionBoundary"})
    );
    let boundary = &resources["RoleProvisionBoundary"];
    assert_eq!(boundary["Type"], "AWS::IAM::ManagedPolicy");
    assert_eq!(boundary["Condition"], "RoleProvisionEnabled");
    assert_eq!(
        Some(&boundary["Properties"]["PolicyDocument"]),
        app.spec.roles()[0]
            .permissions_boundary
            .as_ref()
            .unwrap()
            .document
            .as_ref()
    );
    assert!(
        resources["RoleDeprovision"]["Properties"]
            .get("PermissionsBoundary")
            .is_none()
    );
}

#[test]
fn the_runner_has_no_ingress() {
    let template = example_stack();
    let resources = section(&template, "Resources");
    assert!(
        resources
            .values()
            .all(|r| r["Type"] != "AWS::EC2::SecurityGroupIngress"),
        "no ingress rule resource"
    );
    let groups: Vec<&Value> = resources
        .values()
        .filter(|r| r["Type"] == "AWS::EC2::SecurityGroup")
        .collect();
    assert_eq!(groups.len(), 1);
    assert!(
        groups[0]["Properties"]
            .get("SecurityGroupIngress")
            .is_none()
    );
    assert_eq!(
        groups[0]["Properties"]["SecurityGroupEgress"][0]["IpProtocol"],
        "-1"
    );
    assert_eq!(
        resources["RunnerInstance"]["Properties"]["SecurityGroupIds"],
        json!([{"Ref": "RunnerSecurityGroup"}])
    );
}

#[test]
fn the_runner_starts_with_the_arn_of_its_token_secret() {
    let stack = render(&example_app()).unwrap();
    let template = &stack.template;
    let token = &template["Parameters"]["RunnerToken"];
    assert_eq!(token["NoEcho"], true);
    assert!(token.get("Default").is_none(), "the token has no default");
    assert_eq!(token["AllowedPattern"], TOKEN_PATTERN);
    assert_eq!(
        template["Parameters"]["ServerUrl"]["Default"],
        "https://outpost.example.com"
    );
    assert_eq!(
        template["Parameters"]["RunnerInstanceType"]["Default"],
        "t3.small"
    );
    assert_eq!(
        stack.parameters,
        BTreeMap::from([(
            "ServerUrl".to_owned(),
            "https://outpost.example.com".to_owned()
        )])
    );

    // The parameter goes into a secret of the customer's Secrets Manager, and only
    // there.
    let secret = &template["Resources"]["RunnerTokenSecret"];
    assert_eq!(secret["Type"], "AWS::SecretsManager::Secret");
    assert_eq!(
        secret["Properties"]["Name"],
        "outpost-runner-token/shop/acme"
    );
    assert_eq!(
        secret["Properties"]["SecretString"],
        json!({"Ref": "RunnerToken"})
    );
    assert_eq!(
        references(template, "RunnerToken"),
        ["Resources.RunnerTokenSecret.Properties.SecretString"]
    );
    assert_eq!(
        template["Outputs"]["RunnerTokenSecretArn"]["Value"],
        json!({"Ref": "RunnerTokenSecret"})
    );

    let instance = &template["Resources"]["RunnerInstance"]["Properties"];
    assert_eq!(instance["ImageId"], json!({"Ref": "RunnerAmiId"}));
    assert_eq!(instance["SubnetId"], json!({"Ref": "RunnerSubnetId"}));
    let script = user_data(template);
    assert!(script.starts_with("#!/bin/bash\n"), "{script}");
    assert!(
        script.contains(
            "ExecStart=/usr/bin/env outpost runner --server ${ServerUrl} \
             --token-secret ${RunnerTokenSecret} --install shop/acme \
             --state-dir /var/lib/outpost --state-bucket ${StateBucket} \
             --stack ${AWS::StackName} --aws-region ${AWS::Region} \
             --publish-key-parameter ${RunnerPublicKeyParameter} \
             --publish-checkpoint-parameter ${AuditCheckpointParameter} \
             --terraform-providers ${TerraformProviders}\n"
        ),
        "{script}"
    );
    // Every `${...}` in the script is a parameter, resource or pseudo parameter
    // CloudFormation substitutes: the token's secret's ARN, never the token.
    let substituted: BTreeSet<&str> = script
        .split("${")
        .skip(1)
        .map(|rest| &rest[..rest.find('}').unwrap()])
        .collect();
    assert_eq!(
        substituted,
        BTreeSet::from([
            "AWS::Region",
            "AWS::StackName",
            "AuditCheckpointParameter",
            "RunnerPublicKeyParameter",
            "RunnerTokenSecret",
            "ServerUrl",
            "StateBucket",
            "TerraformProviders"
        ])
    );
    assert_eq!(
        template["Outputs"]["RunnerInstanceId"]["Value"],
        json!({"Ref": "RunnerInstance"})
    );
}

#[test]
fn only_the_runner_role_may_write_the_audit_anchor_parameters() {
    let template = &example_stack();
    for (id, name) in [
        (
            "RunnerPublicKeyParameter",
            "/outpost/shop/acme/runner-public-key",
        ),
        (
            "AuditCheckpointParameter",
            "/outpost/shop/acme/audit-checkpoint",
        ),
    ] {
        let parameter = &template["Resources"][id];
        assert_eq!(parameter["Type"], "AWS::SSM::Parameter");
        assert_eq!(parameter["Properties"]["Name"], name);
        assert_eq!(parameter["Properties"]["Type"], "String");
        assert_eq!(parameter["Properties"]["Value"], "unpublished");
        assert_eq!(template["Outputs"][id]["Value"], json!({"Ref": id}));
        // The output names it, the user data passes it to the runner, and nothing else
        // of the stack refers to it.
        assert_eq!(
            references(template, id),
            [
                format!("Outputs.{id}.Value"),
                "Resources.RunnerInstance.Properties.UserData.Fn::Base64.Fn::Sub".to_owned(),
            ]
        );
    }
    // One statement grants SSM, to the runner's role, on exactly the two parameters.
    let mut grants = Vec::new();
    for (id, resource) in template["Resources"].as_object().unwrap() {
        let text = resource.to_string();
        if text.contains("ssm:") {
            grants.push(id.clone());
        }
    }
    assert_eq!(grants, ["RunnerInstanceRole"]);
    let statements =
        template["Resources"]["RunnerInstanceRole"]["Properties"]["Policies"][0]["PolicyDocument"]
            ["Statement"]
            .as_array()
            .unwrap();
    let publish: Vec<&Value> = statements
        .iter()
        .filter(|s| s.to_string().contains("ssm:"))
        .collect();
    assert_eq!(
        publish,
        [&json!({
            "Sid": "PublishAuditAnchor",
            "Effect": "Allow",
            "Action": ["ssm:GetParameter", "ssm:PutParameter"],
            "Resource": [
                {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/outpost/shop/acme/runner-public-key"},
                {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/outpost/shop/acme/audit-checkpoint"},
            ],
        })]
    );
}

/// The runner VM's UserData script.
fn user_data(template: &Value) -> &str {
    template["Resources"]["RunnerInstance"]["Properties"]["UserData"]["Fn::Base64"]["Fn::Sub"]
        .as_str()
        .expect("the UserData is an Fn::Sub string")
}

/// Where in `value` something refers to `id`, as dotted paths: `{"Ref": id}`,
/// `{"Fn::GetAtt": [id, …]}` or `${id}` in an `Fn::Sub` string.
fn references(value: &Value, id: &str) -> Vec<String> {
    fn walk(value: &Value, id: &str, path: &str, found: &mut Vec<String>) {
        let refers = match value {
            Value::Object(map) => {
                map.get("Ref").is_some_and(|r| r == id)
                    || map.get("Fn::GetAtt").is_some_and(|a| a[0] == id)
            }
            Value::String(text) => text.contains(&format!("${{{id}}}")),
            _ => false,
        };
        if refers {
            found.push(path.trim_start_matches('.').to_owned());
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    walk(child, id, &format!("{path}.{key}"), found);
                }
            }
            Value::Array(items) => {
                for (at, child) in items.iter().enumerate() {
                    walk(child, id, &format!("{path}.{at}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(value, id, "", &mut found);
    found
}

#[test]
fn no_token_is_in_the_user_data_or_a_default() {
    let template = example_stack();
    // What a runner token looks like (`opr_NS_NAME_…`, see the apiserver's
    // `RunnerToken`), and what a token on the runner's command line would.
    let script = user_data(&template);
    for needle in ["opr_", "--token ", "RunnerToken}", "OUTPOST_RUNNER_TOKEN"] {
        assert!(
            !script.contains(needle),
            "{needle:?} in the UserData:\n{script}"
        );
    }
    for (name, parameter) in section(&template, "Parameters") {
        if let Some(default) = parameter.get("Default") {
            let default = default.to_string();
            assert!(!default.contains("opr_"), "{name} defaults to {default}");
        }
    }
    // Nothing else in the template refers to the parameter (the only `Ref` is the
    // secret's value, checked above) or carries a token.
    assert!(!template.to_string().contains("opr_"));
}

#[test]
fn only_the_runner_role_can_read_the_token() {
    let template = example_stack();
    // The one statement that names the secret is the runner role's read.
    assert_eq!(
        references(&template, "RunnerTokenSecret"),
        [
            "Outputs.RunnerTokenSecretArn.Value",
            "Resources.RunnerInstance.Properties.UserData.Fn::Base64.Fn::Sub",
            "Resources.RunnerInstanceRole.Properties.Policies.0.PolicyDocument.Statement.2.Resource",
            "Resources.RunnerTokenSecretPolicy.Properties.SecretId",
        ]
    );
    let statement = &template["Resources"]["RunnerInstanceRole"]["Properties"]["Policies"][0]["PolicyDocument"]
        ["Statement"][2];
    assert_eq!(
        statement,
        &json!({
            "Sid": "ReadRunnerToken",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": {"Ref": "RunnerTokenSecret"},
        })
    );
    // Every other principal is denied by the secret's resource policy, even one whose
    // own policies allow everything (the provision role has AdministratorAccess).
    let policy = &template["Resources"]["RunnerTokenSecretPolicy"]["Properties"];
    assert_eq!(policy["BlockPublicPolicy"], true);
    assert_eq!(
        policy["ResourcePolicy"]["Statement"],
        json!([{
            "Sid": "OnlyTheRunnerReadsTheToken",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": "*",
            "Condition": {
                "ArnNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": ["RunnerInstanceRole", "Arn"]}},
            },
        }])
    );
    // The token's name is outside the install's secrets (`outpost/NS/NAME/…`), which
    // the install's roles read and Plans name.
    let name = template["Resources"]["RunnerTokenSecret"]["Properties"]["Name"]
        .as_str()
        .unwrap();
    assert!(!name.starts_with("outpost/"), "{name}");
    for (id, resource) in section(&template, "Resources") {
        if id.starts_with("Secret") {
            let declared = resource["Properties"]["Name"].as_str().unwrap();
            assert!(declared.starts_with("outpost/shop/acme/"), "{declared}");
        }
    }
}

#[test]
fn secrets_are_generated_or_set_from_no_echo_parameters() {
    let template = example_stack();
    let generated = &template["Resources"]["SecretDbPassword"];
    assert_eq!(generated["Type"], "AWS::SecretsManager::Secret");
    assert_eq!(
        generated["Properties"]["Name"],
        "outpost/shop/acme/db_password"
    );
    assert_eq!(
        generated["Properties"]["GenerateSecretString"]["PasswordLength"],
        32
    );
    assert!(generated["Properties"].get("SecretString").is_none());
    assert!(
        template["Parameters"]
            .get("SecretDbPasswordValue")
            .is_none()
    );

    let set = &template["Resources"]["SecretApiKey"]["Properties"];
    assert_eq!(set["SecretString"], json!({"Ref": "SecretApiKeyValue"}));
    assert_eq!(template["Parameters"]["SecretApiKeyValue"]["NoEcho"], true);

    for id in ["SecretDbPassword", "SecretApiKey"] {
        let output = &template["Outputs"][format!("{id}Arn")];
        assert_eq!(output["Value"], json!({"Ref": id}));
        assert!(output.get("Condition").is_none());
    }
}

#[test]
fn the_stack_is_for_the_install_account_and_region() {
    let template = example_stack();
    let assertions = &template["Rules"]["InstallAccountAndRegion"]["Assertions"];
    assert_eq!(
        assertions[0]["Assert"],
        json!({"Fn::Equals": [{"Ref": "AWS::AccountId"}, "111122223333"]})
    );
    assert_eq!(
        assertions[1]["Assert"],
        json!({"Fn::Equals": [{"Ref": "AWS::Region"}, "eu-west-1"]})
    );
}

#[test]
fn output_is_deterministic_and_versioned_by_content() {
    let app = example_app();
    let first = render(&app).unwrap();
    let second = render(&app).unwrap();
    assert_eq!(
        serde_json::to_string(&first.template).unwrap(),
        serde_json::to_string(&second.template).unwrap()
    );
    assert!(is_content_hash(&first.version), "{}", first.version);
    assert_eq!(first.version, content_hash(&first.template));
    assert_eq!(first.install, "acme");
    // CloudFormation takes at most 51,200 bytes as a TemplateBody.
    let size = serde_json::to_string(&first.template).unwrap().len();
    assert!(size < 51_200, "{size} bytes");

    let mut changed = app.clone();
    changed.spec.permissions.as_mut().unwrap().roles[1].policies[0].document["Statement"][0]["Action"] =
        json!("eks:*");
    assert_ne!(render(&changed).unwrap().version, first.version);
}

#[test]
fn unrenderable_or_invalid_role_names_are_errors() {
    let mut app = example_app();
    app.spec.permissions.as_mut().unwrap().roles[0].name = "{{ install.region }}-x".into();
    assert!(matches!(
        render(&app),
        Err(StackError::RenderRoleName { .. })
    ));

    // A callback that leaves an expression in place is caught.
    let install = install();
    let identity = |text: &str| Ok(text.to_owned());
    assert!(matches!(
        render_install_stack(&example_app(), &install, &options(), &identity),
        Err(StackError::InvalidRoleName { .. })
    ));

    let mut app = example_app();
    app.spec.permissions.as_mut().unwrap().roles[0].name =
        format!("{{{{ install.id }}}}-{}", "p".repeat(60));
    let Err(StackError::InvalidRoleName { rendered, .. }) = render(&app) else {
        panic!("a 65-character name is refused")
    };
    assert_eq!(rendered.len(), 65);
}

#[test]
fn clashing_names_are_errors() {
    let mut app = example_app();
    let roles = &mut app.spec.permissions.as_mut().unwrap().roles;
    roles[4].name = "{{ install.name }}-provision".into();
    assert!(matches!(
        render(&app),
        Err(StackError::DuplicateRoleName { .. })
    ));

    let mut app = example_app();
    app.spec.permissions.as_mut().unwrap().roles[4].name = "{{ install.id }}.provision".into();
    let err = render(&app).unwrap_err();
    assert!(
        matches!(&err, StackError::DuplicateLogicalId { id, .. } if id == "EnableProvision"),
        "{err}"
    );

    let mut app = example_app();
    app.spec.permissions.as_mut().unwrap().roles[4].name = "{{ install.id }}".into();
    assert!(matches!(
        render(&app),
        Err(StackError::RoleLogicalId { .. })
    ));
}

#[test]
fn unsafe_server_urls_are_refused() {
    let install = install();
    for (urls, refused) in [
        (
            &["http://outpost.example.com"][..],
            "http://outpost.example.com",
        ),
        (
            &["https://x.example.com/$(reboot)"],
            "https://x.example.com/$(reboot)",
        ),
        (&["https://"], "https://"),
        (
            &["https://a.example.com", "https://b.example.com,reboot"],
            "https://b.example.com,reboot",
        ),
        (&[], ""),
    ] {
        let options = StackOptions {
            server_urls: urls.iter().map(|u| u.to_string()).collect(),
        };
        let result =
            render_install_stack(&example_app(), &install, &options, &render_for(&install));
        assert_eq!(
            result.unwrap_err(),
            StackError::ServerUrl(refused.into()),
            "{urls:?}"
        );
    }
}

#[test]
fn several_server_urls_reach_the_runner_comma_separated() {
    let install = install();
    let options = StackOptions {
        server_urls: vec![
            "https://outpost-0.example.com:6443".into(),
            "https://outpost-1.example.com:6443".into(),
        ],
    };
    let stack =
        render_install_stack(&example_app(), &install, &options, &render_for(&install)).unwrap();
    let both = "https://outpost-0.example.com:6443,https://outpost-1.example.com:6443";
    let parameter = &stack.template["Parameters"]["ServerUrl"];
    assert_eq!(parameter["Default"], both);
    assert_eq!(parameter["AllowedPattern"], SERVER_URL_PATTERN);
    assert_eq!(stack.parameters["ServerUrl"], both);
    // The runner takes the list as it is: `--server A,B`.
    let script = stack.template["Resources"]["RunnerInstance"]["Properties"]["UserData"]
        ["Fn::Base64"]["Fn::Sub"]
        .as_str()
        .unwrap();
    assert!(
        script.contains("outpost runner --server ${ServerUrl} "),
        "{script}"
    );
    // A new version: the customer's stack must be updated to reach the replicas.
    assert_ne!(stack.version, render(&example_app()).unwrap().version);
}

#[test]
fn the_state_bucket_is_versioned_encrypted_and_only_the_roles_touch_its_objects() {
    let template = example_stack();
    let bucket = &template["Resources"]["StateBucket"];
    assert_eq!(bucket["Type"], "AWS::S3::Bucket");
    // It outlives the stack: it is the only record of what terraform made.
    assert_eq!(bucket["DeletionPolicy"], "Retain");
    assert_eq!(bucket["UpdateReplacePolicy"], "Retain");
    let properties = &bucket["Properties"];
    assert_eq!(properties["VersioningConfiguration"]["Status"], "Enabled");
    assert_eq!(
        properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
            ["SSEAlgorithm"],
        "AES256"
    );
    for block in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(
            properties["PublicAccessBlockConfiguration"][block], true,
            "{block}"
        );
    }
    assert!(
        properties.get("BucketName").is_none(),
        "CloudFormation names it"
    );

    // Every principal but the install's declared roles is denied the objects (the
    // runner's instance role too: it never reads state itself); nothing over plain HTTP.
    let policy = &template["Resources"]["StateBucketPolicy"]["Properties"];
    assert_eq!(policy["Bucket"], json!({"Ref": "StateBucket"}));
    let statements = policy["PolicyDocument"]["Statement"].as_array().unwrap();
    let roles = &statements[0];
    assert_eq!(roles["Effect"], "Deny");
    assert_eq!(roles["Principal"], "*");
    assert_eq!(
        roles["Resource"],
        json!({"Fn::Sub": "${StateBucket.Arn}/*"})
    );
    for action in ["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"] {
        assert!(
            roles["Action"].as_array().unwrap().contains(&json!(action)),
            "{action}"
        );
    }
    let allowed: Vec<&str> = roles["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arn| arn["Fn::Sub"].as_str().unwrap())
        .collect();
    assert_eq!(
        allowed,
        [
            "acme-provision",
            "acme-maintenance",
            "acme-deprovision",
            "acme-break-glass",
            "acme-eks-upgrade-role"
        ]
        .map(|role| format!("arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:role/{role}"))
    );
    assert!(!roles.to_string().contains("RunnerInstanceRole"));
    assert_eq!(statements[1]["Sid"], "OnlyTls");
    assert_eq!(
        statements[1]["Condition"],
        json!({"Bool": {"aws:SecureTransport": "false"}})
    );

    // Each role may use the bucket (terraform's S3 backend and its lock files); the
    // runner's own role may not.
    for role in ["RoleProvision", "RoleMaintenance", "RoleBreakGlass"] {
        let policies = template["Resources"][role]["Properties"]["Policies"]
            .as_array()
            .unwrap();
        let state = policies
            .iter()
            .find(|p| p["PolicyName"] == "outpost-terraform-state")
            .unwrap_or_else(|| panic!("{role} may use the state bucket"));
        assert_eq!(
            state["PolicyDocument"]["Statement"][1]["Resource"],
            json!({"Fn::Sub": "${StateBucket.Arn}/*"})
        );
    }
    assert_eq!(
        references(&template, "StateBucket")
            .iter()
            .filter(|path| path.contains("RunnerInstanceRole"))
            .count(),
        0
    );
    assert_eq!(
        template["Outputs"]["StateBucketName"]["Value"],
        json!({"Ref": "StateBucket"})
    );
}

#[test]
fn the_customer_chooses_the_terraform_providers_the_runner_allows() {
    let stack = render(&example_app()).unwrap();
    let parameter = &stack.template["Parameters"]["TerraformProviders"];
    assert_eq!(parameter["Type"], "String");
    assert_eq!(parameter["Default"], DEFAULT_TERRAFORM_PROVIDERS);
    assert_eq!(parameter["AllowedPattern"], TERRAFORM_PROVIDERS_PATTERN);
    // The customer's value, not the vendor's, reaches the runner: no value of it is
    // rendered into the template besides the default the customer can change.
    assert!(!stack.parameters.contains_key("TerraformProviders"));
    let script = user_data(&stack.template);
    assert!(
        script.contains(" --terraform-providers ${TerraformProviders}\n"),
        "{script}"
    );
}

#[test]
fn the_customer_sets_customer_inputs_as_stack_parameters() {
    let template = example_stack();
    let parameters = section(&template, "Parameters");
    // Exactly the example's `source: customer` inputs, none of the vendor's.
    let inputs: BTreeSet<&str> = parameters
        .keys()
        .filter(|k| k.starts_with("Input"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        inputs,
        BTreeSet::from([
            "InputAllowedCidrs",
            "InputDbBackupRetentionDays",
            "InputImageRegistry",
            "InputNodeCount",
        ])
    );
    let registry = &parameters["InputImageRegistry"];
    assert_eq!(registry["Type"], "String");
    assert!(registry.get("Default").is_none(), "required: {registry}");
    assert_eq!(registry["MinLength"], 1);
    assert!(
        registry["Description"]
            .as_str()
            .unwrap()
            .starts_with("Image registry: The registry in the customer's account"),
        "{registry}"
    );
    // A pattern is matched anywhere in the value, as the App declares it.
    let mut app = example_app();
    let domain = app
        .spec
        .inputs
        .iter_mut()
        .find(|i| i.name == "domain")
        .unwrap();
    domain.source = Some(outpost_api::Party::Customer);
    let with_domain = render(&app).unwrap().template;
    let domain = &with_domain["Parameters"]["InputDomain"];
    assert_eq!(
        domain["AllowedPattern"],
        ".*(?:^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$).*"
    );
    assert_eq!(
        domain["Description"],
        "Domain: Public host name of the shop, which the vendor assigns."
    );
    assert_eq!(
        parameters["InputAllowedCidrs"]["Type"],
        "CommaDelimitedList"
    );
    assert_eq!(parameters["InputAllowedCidrs"]["Default"], "0.0.0.0/0");
    assert_eq!(parameters["InputNodeCount"]["Type"], "Number");
    assert_eq!(parameters["InputNodeCount"]["Default"], "3");
    assert!(parameters.get("InputLicenseKey").is_none());
    assert!(parameters.get("InputDbInstanceClass").is_none());
    assert!(parameters.get("InputDomain").is_none());
    let groups = &template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"];
    let group = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["Label"]["default"] == "Inputs")
        .expect("an Inputs group");
    assert_eq!(group["Parameters"].as_array().unwrap().len(), 4);
    assert_eq!(
        template["Metadata"]["Outpost::CustomerInputs"]["image_registry"],
        json!({"Ref": "InputImageRegistry"})
    );
}
