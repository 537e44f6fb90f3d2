//! The runner VM: no ingress, started with the ARN of its token secret, the only reader
//! of the token and the only writer of the audit anchor, and no token in its UserData.

use super::*;

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
