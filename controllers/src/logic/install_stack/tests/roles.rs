//! The lifecycle roles: one switch each with defaults by type, trust only in the runner
//! role with the external ID, and their policies and boundaries as declared.

use super::*;

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
