//! The rest of the stack: generated or NoEcho secrets, the install's account and region,
//! deterministic output, names, server URLs, the state bucket, the providers the customer
//! allows and customer inputs as parameters.

use super::*;

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
