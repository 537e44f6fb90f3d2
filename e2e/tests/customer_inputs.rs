//! A `source: customer` input end to end, every part real: the control plane and
//! controllers, the customer's install stack in the AWS emulator (`moto_server`), a
//! runner started with `--stack` (as the stack's user data starts it) and the stand-in
//! cluster the component deploys into.
//!
//! * The install stack the control plane renders asks for the input (`InputGreeting`);
//!   the customer creates the stack with `InputGreeting=bonjour`.
//! * The component's ConfigMap uses `{{ inputs.greeting }}`: the stand-in cluster gets
//!   `bonjour`, read by the runner from its stack. The control plane's Plan holds the
//!   placeholder `${outpost-input:greeting}` in its desired state, never the value, and
//!   neither does the Install; the Plan's diff shows the value (customer inputs are not
//!   secrets, so the runner does not mask them: the approver sees what is applied).
//! * The customer changes the parameter to a value the App's pattern refuses: the next
//!   deploy fails naming the input and its parameter, and the ConfigMap keeps its value.
//!   A valid value then reaches the cluster at the next deploy.
//!
//! moto cannot boot the runner VM, so the stack created holds the rendered template's
//! customer-input parameter and, for the runner to assume the Plans' roles, the declared
//! roles (trusting the test's credentials, with the install's external id) and the
//! outputs the runner reads (`Role<K>Name`, `Role<K>Arn`, `RoleExternalId`); that the
//! rendered template as a whole is valid is `install_stack_aws`'s test (cfn-lint, and moto
//! creating it with `InputImageRegistry`). moto runs without IAM enforcement here and
//! does not check a parameter's `AllowedPattern`, which is how the test gives the runner
//! a value only its own check refuses.

use std::path::Path;
use std::process::{Command, Stdio};

use kube_client::api::Api;
use outpost_api::{Install, InstallStack, Operation, Plan, PlanPhase};
use outpost_testing::job_plans::runner_command;
use outpost_testing::{Backend, ControlPlane, Moto, Process, eventually, outpost_binary};
use serde_json::{Value, json};

use crate::customer_aws::{Emulator as _, REGION};

const INSTALL: &str = "acme";
const STACK: &str = "outpost-acme";
/// moto's credentials: anything goes without IAM enforcement.
const KEY: (&str, &str) = ("customer", "customer-secret");

/// The App (a customer input, three lifecycle roles, a sandbox module), its component
/// and the install.
fn objects(sandbox: &Path) -> String {
    format!(
        r#"apiVersion: outpost.dev/v1alpha1
kind: App
metadata:
  name: greeter
spec:
  inputs:
    - name: greeting
      description: How the app greets.
      type: string
      source: customer
      required: true
      pattern: "^[a-z]+$"
  permissions:
    roles:
      - name: acme-provision
        type: provision
      - name: acme-maintenance
        type: maintenance
      - name: acme-deprovision
        type: deprovision
  sandbox:
    type: terraform_module
    source: {sandbox}
---
apiVersion: outpost.dev/v1alpha1
kind: Component
metadata:
  name: hello
spec:
  app: greeter
  type: kubernetes_manifest
  manifest:
    namespace: shop
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: hello
      data:
        greeting: "{{{{ inputs.greeting }}}}"
---
apiVersion: outpost.dev/v1alpha1
kind: Install
metadata:
  name: {INSTALL}
spec:
  app: greeter
  approvalMode: approve-all
  cloud:
    provider: aws
    accountId: "123456789012"
    region: {REGION}
"#,
        sandbox = sandbox.display()
    )
}

/// The stack the customer creates: the rendered `template`'s customer-input parameter,
/// and its roles trusting `caller` (see the module docs).
fn customer_stack(template: &Value, caller: &str) -> Value {
    let external_id = template["Outputs"]["RoleExternalId"]["Value"].clone();
    let mut parameters = serde_json::Map::new();
    parameters.insert(
        "InputGreeting".into(),
        template["Parameters"]["InputGreeting"].clone(),
    );
    let mut resources = serde_json::Map::new();
    let mut outputs = serde_json::Map::new();
    outputs.insert(
        "RoleExternalId".into(),
        template["Outputs"]["RoleExternalId"].clone(),
    );
    let names = template["Outputs"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(key, output)| {
            let id = key.strip_prefix("Role")?.strip_suffix("Name")?;
            Some((id.to_owned(), output.clone()))
        });
    for (id, output) in names {
        parameters.insert(
            format!("Enable{id}"),
            template["Parameters"][format!("Enable{id}")].clone(),
        );
        resources.insert(
            format!("Role{id}"),
            json!({"Type": "AWS::IAM::Role", "Properties": {
                "RoleName": output["Value"],
                "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Action": "sts:AssumeRole",
                    "Principal": {"AWS": caller},
                    "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
                }]},
            }}),
        );
        outputs.insert(format!("Role{id}Name"), output);
        outputs.insert(
            format!("Role{id}Arn"),
            json!({"Value": {"Fn::GetAtt": [format!("Role{id}"), "Arn"]}}),
        );
    }
    json!({"AWSTemplateFormatVersion": "2010-09-09", "Parameters": parameters,
           "Resources": resources, "Outputs": outputs})
}

/// CloudFormation as the customer, in the emulator.
fn cloudformation(moto: &Moto) -> aws_sdk_cloudformation::Client {
    aws_sdk_cloudformation::Client::new(&moto.sdk(KEY.0, KEY.1, None))
}

fn greeting(value: &str) -> aws_sdk_cloudformation::types::Parameter {
    aws_sdk_cloudformation::types::Parameter::builder()
        .parameter_key("InputGreeting")
        .parameter_value(value)
        .build()
}

/// Waits until stack [`STACK`] is done creating or updating with `InputGreeting` `value`.
async fn stack_settled(moto: &Moto, value: &str) {
    let cfn = cloudformation(moto);
    eventually(60, "the stack to settle", async || {
        let described = cfn.describe_stacks().stack_name(STACK).send().await.ok()?;
        let stack = described.stacks().first()?.clone();
        let status = stack.stack_status()?.as_str().to_owned();
        assert!(
            !status.contains("FAILED") && !status.contains("ROLLBACK"),
            "{stack:?}\n{}",
            moto.log()
        );
        let set = stack.parameters().iter().any(|p| {
            p.parameter_key() == Some("InputGreeting") && p.parameter_value() == Some(value)
        });
        (status.ends_with("_COMPLETE") && set).then_some(())
    })
    .await;
}

/// `outpost deploy hello --install acme` as the vendor's admin; the new Plan's name (it
/// says "waiting for plan NAME").
fn deploy(cp: &ControlPlane) -> String {
    let output = Command::new(outpost_binary())
        .args(["deploy", "hello", "--install", INSTALL, "--kubeconfig"])
        .arg(cp.kubeconfig(&cp.admin_token))
        .output()
        .expect("outpost deploy runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "outpost deploy: {said}");
    said.split_whitespace()
        .find(|word| word.starts_with(&format!("{INSTALL}-deploy-hello-")))
        .unwrap_or_else(|| panic!("the Plan's name in {said:?}"))
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Plan `name` once it has finished.
async fn finished(plans: &Api<Plan>, name: &str) -> Plan {
    eventually(120, &format!("Plan {name} to finish"), async || {
        let plan = plans.get_opt(name).await.ok()??;
        let phase = plan.status.as_ref()?.phase?;
        phase.is_terminal().then_some(plan)
    })
    .await
}

/// The ConfigMap's `greeting` in the stand-in cluster.
fn applied(cluster: &ControlPlane) -> String {
    let run = cluster.kubectl().run(&[
        "get",
        "configmap",
        "hello",
        "-n",
        "shop",
        "-o",
        "jsonpath={.data.greeting}",
    ]);
    if run.ok { run.stdout } else { String::new() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_fills_in_the_customers_input_from_its_stack_and_the_control_plane_never_holds_it()
 {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let sandbox = outpost_testing::shop::ready_sandbox(dir.path());
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, objects(&sandbox)).unwrap();
    cp.kubectl().ok(&["apply", "-f", file.to_str().unwrap()]);
    let _controllers = cp.start_controllers("customer-inputs");
    let client = cp.client().await;
    let stacks: Api<InstallStack> = Api::namespaced(client.clone(), "default");
    let stack = eventually(60, "the install stack to be rendered", async || {
        stacks.get_opt(INSTALL).await.ok().flatten()
    })
    .await;
    let template = &stack.spec.template;
    assert_eq!(
        template["Parameters"]["InputGreeting"],
        json!({"Type": "String", "Description": "greeting: How the app greets.",
               "AllowedPattern": ".*(?:^[a-z]+$).*", "MinLength": 1,
               "ConstraintDescription": "must match the pattern ^[a-z]+$"})
    );

    // The customer creates the stack with their value.
    let moto = Moto::start();
    let sts = aws_sdk_sts::Client::new(&moto.sdk(KEY.0, KEY.1, None));
    let caller = sts.get_caller_identity().send().await.unwrap();
    let caller = caller.arn().unwrap().to_owned();
    let body = customer_stack(template, &caller);
    cloudformation(&moto)
        .create_stack()
        .stack_name(STACK)
        .template_body(body.to_string())
        .parameters(greeting("bonjour"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateStack: {e:?}\n{}", moto.log()));
    stack_settled(&moto, "bonjour").await;

    let token = cp.mint_runner_token(&format!("default/{INSTALL}"));
    let mut command = runner_command(&cp.url, &cp.tls.ca, &token, &dir.path().join("state"));
    command
        .args([
            "--stack",
            STACK,
            "--aws-region",
            REGION,
            "--aws-endpoint",
            &moto.endpoint(),
        ])
        .arg("--module-root")
        .arg(&sandbox)
        .args(["--terraform", "terraform", "--kubeconfig"])
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .env("AWS_ACCESS_KEY_ID", KEY.0)
        .env("AWS_SECRET_ACCESS_KEY", KEY.1)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let _runner = Process::new(command.spawn().expect("outpost-runner starts"));

    // The customer's value reaches the cluster.
    eventually(180, "the ConfigMap with the customer's value", async || {
        (applied(&cluster) == "bonjour").then_some(())
    })
    .await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let deployed = eventually(30, "the succeeded deploy Plan", async || {
        plans
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|p| {
                p.spec.operation == Operation::Deploy
                    && p.spec.entity.name == "hello"
                    && p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Succeeded)
            })
    })
    .await;
    // The control plane holds the placeholder, never the value.
    let desired = serde_json::to_string(&deployed.spec.desired_state).unwrap();
    assert!(desired.contains("${outpost-input:greeting}"), "{desired}");
    assert!(!desired.contains("bonjour"), "{desired}");
    let installs: Api<Install> = Api::namespaced(client.clone(), "default");
    let install = serde_json::to_string(&installs.get(INSTALL).await.unwrap()).unwrap();
    assert!(!install.contains("bonjour"), "{install}");

    // A value the declaration refuses fails the next deploy, naming the input.
    let update = |value: &'static str| {
        cloudformation(&moto)
            .update_stack()
            .stack_name(STACK)
            .use_previous_template(true)
            .parameters(greeting(value))
    };
    update("Bonjour!").send().await.unwrap();
    stack_settled(&moto, "Bonjour!").await;
    let refused = finished(&plans, &deploy(&cp)).await;
    let status = refused.status.unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "customer input greeting (install stack parameter InputGreeting): Invalid value: \
             \"Bonjour!\": must match the pattern \"^[a-z]+$\""
        )
    );
    assert_eq!(applied(&cluster), "bonjour");

    // A valid one reaches the cluster at the next deploy.
    update("salut").send().await.unwrap();
    stack_settled(&moto, "salut").await;
    let redeployed = finished(&plans, &deploy(&cp)).await;
    assert_eq!(
        redeployed.status.as_ref().and_then(|s| s.phase),
        Some(PlanPhase::Succeeded),
        "{:?}",
        redeployed.status
    );
    assert_eq!(applied(&cluster), "salut");
    // The diff of a change shows the customer's values: they are not masked.
    let status = serde_json::to_string(&redeployed.status).unwrap();
    assert!(status.contains("salut"), "{status}");
    let desired = serde_json::to_string(&redeployed.spec.desired_state).unwrap();
    assert!(!desired.contains("salut"), "{desired}");
}
