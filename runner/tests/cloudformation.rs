//! The cloudformation executor against the AWS emulator (`moto_server`): a stack is
//! created, updated and deleted through change sets, each change set the diff.

use aws_sdk_cloudformation::Client;
use outpost_api::{ChangeAction, Operation, PolicyInput};
use outpost_runner::executor::cloudformation::CloudFormationExecutor;
use outpost_runner::executor::{Diff, Executor, ExecutorError, StepContext};
use outpost_runner::plan_diff::plan_diff;
use outpost_testing::Moto;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const STACK: &str = "acme-queue";
const PASSWORD: &str = "hunter2-from-the-customer";

/// The stack's template: a queue (its visibility timeout given), the optional `extra`
/// resources, outputs that echo the `Env` and the NoEcho `Password` parameters.
fn template(visibility: Option<u32>, extra: Value) -> String {
    let mut queue = json!({"QueueName": {"Fn::Sub": "${Env}-jobs"}});
    if let Some(seconds) = visibility {
        queue["VisibilityTimeout"] = json!(seconds);
    }
    let mut resources = json!({"Queue": {"Type": "AWS::SQS::Queue", "Properties": queue}});
    for (name, resource) in extra.as_object().into_iter().flatten() {
        resources[name] = resource.clone();
    }
    json!({
        "Parameters": {
            "Env": {"Type": "String"},
            "Password": {"Type": "String", "NoEcho": true},
        },
        "Resources": resources,
        "Outputs": {
            "QueueUrl": {"Value": {"Ref": "Queue"}},
            "Env": {"Value": {"Ref": "Env"}},
            "PasswordEcho": {"Value": {"Ref": "Password"}},
        },
    })
    .to_string()
}

fn topic() -> Value {
    json!({"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "acme-events"}}})
}

fn bucket() -> Value {
    json!({"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "acme-data"}}})
}

fn component(template: &str) -> Value {
    json!({
        "app": "shopfront",
        "type": "cloudformation",
        "cloudformation": {
            "template": template,
            "stackName": STACK,
            "parameters": {"Env": "prod", "Password": "${outpost-secret:db_password}"},
        },
    })
}

/// The step environment of a Plan whose role the runner assumed: the emulator's
/// credentials, region and endpoint, and the resolved secret.
fn environment(moto: &Moto) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ENDPOINT_URL".into(), moto.endpoint()),
        (
            outpost_runner::secrets::env_name("db_password"),
            PASSWORD.into(),
        ),
    ])
}

fn context(work_dir: &Path, moto: &Moto, operation: Operation, desired: Value) -> StepContext {
    StepContext {
        plan: format!("acme-{}-queue", operation.as_str()),
        plan_uid: "uid-1".into(),
        operation,
        entity: "queue".into(),
        desired,
        work_dir: work_dir.to_owned(),
        env: environment(moto),
        timeout: Duration::from_secs(120),
    }
}

/// The customer's own view of the account.
fn customer(moto: &Moto) -> Client {
    let config = aws_sdk_cloudformation::Config::builder()
        .behavior_version(aws_sdk_cloudformation::config::BehaviorVersion::latest())
        .region(aws_sdk_cloudformation::config::Region::new("us-east-1"))
        .endpoint_url(moto.endpoint())
        .credentials_provider(aws_sdk_cloudformation::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .http_client(outpost_runner::aws::http_client())
        .build();
    Client::from_conf(config)
}

async fn stack_status(cfn: &Client) -> Option<String> {
    let described = cfn.describe_stacks().stack_name(STACK).send().await.ok()?;
    let status = described
        .stacks()
        .first()?
        .stack_status()?
        .as_str()
        .to_owned();
    (status != "DELETE_COMPLETE").then_some(status)
}

async fn resources(cfn: &Client) -> Vec<String> {
    let mut ids: Vec<String> = cfn
        .list_stack_resources()
        .stack_name(STACK)
        .send()
        .await
        .expect("ListStackResources")
        .stack_resource_summaries()
        .iter()
        .filter_map(|r| r.logical_resource_id().map(str::to_owned))
        .collect();
    ids.sort();
    ids
}

/// The Plan's diff as people and policies see it: address → action.
fn changes(diff: &Diff) -> BTreeMap<String, ChangeAction> {
    plan_diff(diff)
        .resources
        .into_iter()
        .map(|r| (r.address, r.action))
        .collect()
}

#[tokio::test]
async fn a_stack_is_created_updated_and_deleted_through_change_sets() {
    let moto = Moto::start();
    let cfn = customer(&moto);
    let executor = CloudFormationExecutor::new();
    let work = tempfile::tempdir().unwrap();
    let deploy =
        |template: &str| context(work.path(), &moto, Operation::Deploy, component(template));

    // Create: the CREATE change set lists every resource; nothing exists before apply.
    let v1 = deploy(&template(None, topic()));
    let created = executor.plan(&v1).await.expect("plan v1");
    assert!(created.changes);
    assert_eq!(created.input, PolicyInput::Cloudformation);
    assert_eq!(created.document["changeSet"]["type"], "CREATE");
    assert_eq!(
        changes(&created),
        BTreeMap::from([
            ("AWS::SNS::Topic/Topic".to_owned(), ChangeAction::Create),
            ("AWS::SQS::Queue/Queue".to_owned(), ChangeAction::Create),
        ])
    );
    assert_eq!(created.summary, "2 to add, 0 to change, 0 to destroy");
    assert_eq!(created.document["parameters"]["Password"], "(sensitive)");
    assert_eq!(created.document["parameters"]["Env"], "prod");
    assert!(!created.document.to_string().contains(PASSWORD));
    assert_eq!(
        stack_status(&cfn).await.as_deref(),
        Some("REVIEW_IN_PROGRESS"),
        "planning creates only the change set"
    );
    assert!(resources(&cfn).await.is_empty());

    let applied = executor.apply(&v1, &created).await.expect("apply v1");
    assert_eq!(stack_status(&cfn).await.as_deref(), Some("CREATE_COMPLETE"));
    assert_eq!(resources(&cfn).await, ["Queue", "Topic"]);
    assert_eq!(applied.last_applied["parameters"]["Env"], "prod");
    assert!(
        !applied.last_applied.to_string().contains(PASSWORD),
        "{}",
        applied.last_applied
    );
    assert_eq!(
        executor.observe(&v1, &applied.last_applied).await.unwrap(),
        applied.last_applied,
        "no drift right after the apply"
    );

    // Update: the UPDATE change set is the diff (topic removed, bucket added, queue
    // changed in place).
    let v2 = deploy(&template(Some(60), bucket()));
    let updated = executor.plan(&v2).await.expect("plan v2");
    assert_eq!(updated.document["changeSet"]["type"], "UPDATE");
    assert_eq!(
        changes(&updated),
        BTreeMap::from([
            ("AWS::S3::Bucket/Bucket".to_owned(), ChangeAction::Create),
            ("AWS::SNS::Topic/Topic".to_owned(), ChangeAction::Delete),
            ("AWS::SQS::Queue/Queue".to_owned(), ChangeAction::Update),
        ])
    );
    assert_eq!(updated.summary, "1 to add, 1 to change, 1 to destroy");

    // The stack moves after planning (the customer updates it): the change set is not
    // executed, the runner must plan again.
    cfn.update_stack()
        .stack_name(STACK)
        .template_body(template(Some(30), topic()))
        .parameters(parameter("Env", "prod"))
        .parameters(parameter("Password", PASSWORD))
        .send()
        .await
        .expect("the customer's UpdateStack");
    assert!(
        executor.moved(&v2, &updated).await.unwrap().is_some(),
        "the approved change set's stack moved"
    );
    let error = executor.apply(&v2, &updated).await.unwrap_err();
    assert!(matches!(error, ExecutorError::Moved(_)), "{error:#}");
    assert_ne!(
        executor.observe(&v1, &applied.last_applied).await.unwrap(),
        applied.last_applied,
        "the customer's update shows as drift"
    );

    let replanned = executor.plan(&v2).await.expect("plan v2 again");
    assert_ne!(
        plan_diff(&replanned).hash,
        plan_diff(&updated).hash,
        "an approval of the first change set does not cover the second"
    );
    let applied = executor.apply(&v2, &replanned).await.expect("apply v2");
    assert_eq!(stack_status(&cfn).await.as_deref(), Some("UPDATE_COMPLETE"));
    assert_eq!(resources(&cfn).await, ["Bucket", "Queue"]);
    // moto computes a stack's outputs only in CreateStack and UpdateStack (here the
    // customer's), never for a change set: they are checked after this second apply.
    assert_eq!(
        applied.outputs.get("Env"),
        Some(&json!("prod")),
        "{applied:?}"
    );
    assert!(
        applied.outputs["QueueUrl"]
            .as_str()
            .unwrap()
            .contains("prod-jobs")
    );
    assert!(
        !applied.outputs.contains_key("PasswordEcho"),
        "an output showing a secret is not reported: {:?}",
        applied.outputs
    );
    assert_eq!(
        applied.last_applied["outputs"]["PasswordEcho"],
        "(sensitive)"
    );
    assert!(!applied.last_applied.to_string().contains(PASSWORD));

    // No change: no change set is left behind; the outputs are read as they are.
    let same = executor.plan(&v2).await.expect("plan v2, unchanged");
    assert!(!same.changes, "{:?}", same.document);
    assert_eq!(same.summary, "0 to add, 0 to change, 0 to destroy");
    let pending = cfn
        .list_change_sets()
        .stack_name(STACK)
        .send()
        .await
        .expect("ListChangeSets");
    assert!(
        pending
            .summaries()
            .iter()
            .all(|s| s.execution_status().map(|e| e.as_str()) != Some("AVAILABLE")),
        "no change set is left to execute"
    );
    let current = executor.unchanged(&v2, &same).await.expect("unchanged");
    assert_eq!(current.outputs["Env"], "prod");

    // Teardown: every resource of the stack is deleted, then the stack.
    let teardown = context(
        work.path(),
        &moto,
        Operation::Teardown,
        json!({"component": "queue", "type": "cloudformation"}),
    );
    let deleting = executor.plan(&teardown).await.expect("plan teardown");
    assert_eq!(
        changes(&deleting),
        BTreeMap::from([
            ("AWS::S3::Bucket/Bucket".to_owned(), ChangeAction::Delete),
            ("AWS::SQS::Queue/Queue".to_owned(), ChangeAction::Delete),
        ])
    );
    assert!(
        stack_status(&cfn).await.is_some(),
        "planning deletes nothing"
    );
    executor
        .apply(&teardown, &deleting)
        .await
        .expect("apply teardown");
    assert_eq!(stack_status(&cfn).await, None);
    let again = executor.plan(&teardown).await.expect("plan teardown again");
    assert!(!again.changes);
    assert_eq!(
        executor.observe(&teardown, &Value::Null).await.unwrap(),
        Value::Null
    );
}

fn parameter(key: &str, value: &str) -> aws_sdk_cloudformation::types::Parameter {
    aws_sdk_cloudformation::types::Parameter::builder()
        .parameter_key(key)
        .parameter_value(value)
        .build()
}

#[tokio::test]
async fn without_the_plans_role_nothing_is_created() {
    let moto = Moto::start();
    let work = tempfile::tempdir().unwrap();
    let mut ctx = context(
        work.path(),
        &moto,
        Operation::Deploy,
        component(&template(None, topic())),
    );
    ctx.env.retain(|k, _| !k.starts_with("AWS_"));
    let error = CloudFormationExecutor::new()
        .plan(&ctx)
        .await
        .expect_err("no credentials");
    assert!(
        error.to_string().contains("no AWS credentials"),
        "{error:#}"
    );
    assert_eq!(stack_status(&customer(&moto)).await, None);
}
