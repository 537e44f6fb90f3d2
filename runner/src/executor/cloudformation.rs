//! The `cloudformation` executor (components of that type, and `cloudformation`
//! sandboxes): CloudFormation change sets, under the Plan's role.
//!
//! * **plan**: creates a change set (`CREATE` when the stack does not exist yet,
//!   `UPDATE` otherwise), waits for it and describes it. The description (each
//!   resource's action, replacement and changed properties) is the [`Diff`] document
//!   policies see (input `cloudformation`); it names the change set, so the diff's hash
//!   binds an approval to exactly that change set. A change set without changes is
//!   deleted and the diff has none. Teardown and deprovision Plans list the stack's
//!   resources, each to be deleted.
//! * **apply**: executes exactly that change set (it *is* the saved artefact). The stack
//!   must not have moved since planning ([`Executor::moved`]: its latest event and status,
//!   and the change set still `AVAILABLE`); if it did, nothing is executed and the runner
//!   plans again, as with terraform's stale saved plan (the refused change set is
//!   deleted). Teardown deletes the stack.
//! * **outputs**: the stack's outputs; one whose value contains a secret resolved for the
//!   step, or a value passed to a `NoEcho` parameter, is left out.
//! * **observe**: the stack's status, latest event, parameters and outputs, so drift
//!   sees a stack changed outside Outpost. Resource-level drift (`DetectStackDrift`)
//!   is not read: the AWS emulator the tests run against does not implement it.
//!
//! The CloudFormation client uses only the step's environment ([`StepContext::env`]):
//! the Plan's assumed role's credentials, region and endpoint, never the runner's own.
//!
//! Why this file stays whole (~720 lines): it is one executor's change-set sequence
//! (create, wait, describe, execute, wait, read outputs) and its error type; the stack
//! source (`source`) and change set reading (`change_set`) are their own modules. Each call's request and the wait on
//! its answer sit together, and splitting them would separate a call from its wait.

mod change_set;
mod source;

use super::secret_ref::{self, UnresolvedSecret};
use super::{Applied, Diff, Executor, ExecutorError, Moved, StepContext, typed};
use crate::plan_diff::SENSITIVE;
use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::error::ProvideErrorMetadata;
use aws_sdk_cloudformation::types::{Capability, ChangeSetType, Parameter};
use futures::future::BoxFuture;
use outpost_api::{ChangeAction, Operation, PolicyInput, ResourceChange};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

pub use source::{StackRecord, StackSource, Template, stack_of};

/// What went wrong driving CloudFormation.
#[derive(Debug, thiserror::Error)]
pub enum CloudFormationError {
    /// The desired state does not describe a stack.
    #[error("desired state is not a cloudformation stack: {0}")]
    InvalidDesiredState(String),
    /// The step has no AWS credentials: it runs without a role.
    #[error(
        "no AWS credentials for this step: cloudformation runs under the Plan's role \
         (start the runner with --stack)"
    )]
    NoCredentials,
    /// A parameter references a secret the step does not have.
    #[error(transparent)]
    Secret(#[from] UnresolvedSecret),
    /// A file operation in the work dir failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// CloudFormation answered with an error.
    #[error("cloudformation:{call} {stack}: {reason}")]
    Call {
        /// The API call.
        call: &'static str,
        /// The stack.
        stack: String,
        /// The service's error code and message.
        reason: String,
        /// The service's error code.
        code: Option<String>,
    },
    /// The change set or the stack operation ended in failure, or did not end in time.
    #[error("stack {stack}: {reason}")]
    Failed {
        /// The stack.
        stack: String,
        /// Its status and reason.
        reason: String,
    },
}

/// The statuses a stack operation ends in successfully.
const DONE: [&str; 3] = ["CREATE_COMPLETE", "UPDATE_COMPLETE", "DELETE_COMPLETE"];

/// The `cloudformation` executor.
#[derive(Debug, Clone, Default)]
pub struct CloudFormationExecutor;

/// The stack as it is: the basis an apply checks, and what drift compares.
#[derive(Debug, Default)]
struct Live {
    stack_id: String,
    status: String,
    reason: String,
    latest_event: Option<String>,
    parameters: BTreeMap<String, String>,
    outputs: BTreeMap<String, String>,
}

impl Live {
    fn basis(&self) -> Value {
        json!({"stackId": self.stack_id, "status": self.status, "latestEvent": self.latest_event})
    }
}

impl CloudFormationExecutor {
    /// An executor.
    pub fn new() -> Self {
        Self
    }

    /// A client with the step's credentials, region and endpoint.
    fn client(ctx: &StepContext) -> Result<Client, CloudFormationError> {
        crate::aws::plan_role_config(&ctx.env, None)
            .map(|config| Client::new(&config))
            .ok_or(CloudFormationError::NoCredentials)
    }

    async fn plan_step(&self, ctx: &StepContext) -> Result<Diff, CloudFormationError> {
        let client = Self::client(ctx)?;
        if matches!(ctx.operation, Operation::Teardown | Operation::Deprovision) {
            return delete_plan(&client, ctx).await;
        }
        let wanted = stack_of(&ctx.desired)?;
        let stack = wanted.stack_name.as_str();
        let deadline = Instant::now() + ctx.timeout;
        let live = idle(&client, stack, deadline).await?;
        let create = live
            .as_ref()
            .is_none_or(|l| l.status == "REVIEW_IN_PROGRESS");
        let mut parameters = Vec::new();
        let mut shown = serde_json::Map::new();
        for (key, value) in &wanted.parameters {
            let secret = secret_ref::has_reference(value);
            let resolved = secret_ref::resolve(value, &ctx.env)?;
            shown.insert(
                key.clone(),
                json!(if secret { SENSITIVE } else { value.as_str() }),
            );
            parameters.push(
                Parameter::builder()
                    .parameter_key(key)
                    .parameter_value(resolved)
                    .build(),
            );
        }
        let name = change_set_name(&ctx.plan);
        let mut request = client
            .create_change_set()
            .stack_name(stack)
            .change_set_name(&name)
            .change_set_type(if create {
                ChangeSetType::Create
            } else {
                ChangeSetType::Update
            })
            .set_parameters(Some(parameters))
            .capabilities(Capability::CapabilityIam)
            .capabilities(Capability::CapabilityNamedIam)
            .capabilities(Capability::CapabilityAutoExpand)
            .description(format!("Outpost Plan {}", ctx.plan));
        request = match &wanted.template {
            Template::Url(url) => request.template_url(url),
            Template::Body(body) => request.template_body(body),
        };
        let created = match request.send().await {
            Ok(created) => created,
            Err(e) => {
                let error = call_error("CreateChangeSet", stack, &e);
                return match &error {
                    CloudFormationError::Call { reason, .. }
                        if change_set::says_no_changes(reason) =>
                    {
                        Ok(no_changes(stack, live.as_ref(), &shown))
                    }
                    _ => Err(error),
                };
            }
        };
        let change_set_id = created.id().unwrap_or(&name).to_owned();
        let stack_id = created.stack_id().map(str::to_owned);
        StackRecord {
            stack_name: stack.to_owned(),
            stack_id: stack_id.clone(),
        }
        .write(&ctx.work_dir)
        .await?;
        let described = loop {
            let described = client
                .describe_change_set()
                .change_set_name(&change_set_id)
                .stack_name(stack)
                .send()
                .await
                .map_err(|e| call_error("DescribeChangeSet", stack, &e))?;
            let status = described.status().map(|s| s.as_str()).unwrap_or_default();
            if status == "CREATE_COMPLETE" || status == "FAILED" {
                break described;
            }
            wait(stack, deadline, &format!("change set {status}")).await?;
        };
        if described.status().map(|s| s.as_str()) == Some("FAILED") {
            let reason = described.status_reason().unwrap_or_default().to_owned();
            let _ = client
                .delete_change_set()
                .change_set_name(&change_set_id)
                .stack_name(stack)
                .send()
                .await;
            if change_set::says_no_changes(&reason) {
                return Ok(no_changes(stack, live.as_ref(), &shown));
            }
            return Err(CloudFormationError::Failed {
                stack: stack.to_owned(),
                reason: format!("the change set failed: {reason}"),
            });
        }
        let mut changes: Vec<Value> = described
            .changes()
            .iter()
            .map(change_set::change_document)
            .collect();
        let mut next = described.next_token().map(str::to_owned);
        while let Some(token) = next {
            let page = client
                .describe_change_set()
                .change_set_name(&change_set_id)
                .stack_name(stack)
                .next_token(token)
                .send()
                .await
                .map_err(|e| call_error("DescribeChangeSet", stack, &e))?;
            changes.extend(page.changes().iter().map(change_set::change_document));
            next = page.next_token().map(str::to_owned);
        }
        let resources: Vec<ResourceChange> =
            changes.iter().map(change_set::resource_change).collect();
        // Read after the change set exists: a CREATE change set creates the stack
        // (`REVIEW_IN_PROGRESS`).
        let basis = live_stack(&client, stack).await?;
        Ok(Diff {
            input: PolicyInput::Cloudformation,
            summary: change_set::summary(&resources),
            changes: true,
            resources: Some(resources),
            basis: basis.as_ref().map_or(Value::Null, Live::basis),
            document: json!({
                "stack": stack,
                "stackId": stack_id,
                "changeSet": {"id": change_set_id, "type": if create { "CREATE" } else { "UPDATE" }},
                "parameters": shown,
                "changes": changes,
            }),
        })
    }

    async fn apply_step(
        &self,
        ctx: &StepContext,
        diff: &Diff,
    ) -> Result<Result<Applied, Moved>, CloudFormationError> {
        let client = Self::client(ctx)?;
        let stack = diff.document["stack"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(moved) = moved(&client, diff).await? {
            // It is never executed: the runner plans again with a new one.
            if let Some(id) = diff.document["changeSet"]["id"].as_str() {
                let _ = client
                    .delete_change_set()
                    .change_set_name(id)
                    .stack_name(&stack)
                    .send()
                    .await;
            }
            return Ok(Err(moved));
        }
        let deadline = Instant::now() + ctx.timeout;
        if diff.document["delete"] == true {
            let id = diff.document["stackId"].as_str().unwrap_or(&stack);
            client
                .delete_stack()
                .stack_name(id)
                .send()
                .await
                .map_err(|e| call_error("DeleteStack", &stack, &e))?;
            let live = settle(&client, id, deadline).await?;
            StackRecord::remove(&ctx.work_dir).await;
            return Ok(Ok(Applied {
                log: format!("stack {stack}: {}\n", live.status),
                last_applied: Value::Null,
                ..Applied::default()
            }));
        }
        let change_set_id = diff.document["changeSet"]["id"]
            .as_str()
            .unwrap_or_default();
        if let Err(e) = client
            .execute_change_set()
            .change_set_name(change_set_id)
            .stack_name(&stack)
            .send()
            .await
        {
            if e.code() == Some("InvalidChangeSetStatus") || e.code() == Some("ChangeSetNotFound") {
                return Ok(Err(Moved(format!(
                    "change set {change_set_id} can no longer be executed: {}",
                    crate::aws::describe(&e)
                ))));
            }
            return Err(call_error("ExecuteChangeSet", &stack, &e));
        }
        let live = settle(&client, &stack, deadline).await?;
        Ok(Ok(applied(
            ctx,
            &stack,
            &live,
            format!("stack {stack}: {}\n", live.status),
        )))
    }

    async fn unchanged_step(
        &self,
        ctx: &StepContext,
        diff: &Diff,
    ) -> Result<Applied, CloudFormationError> {
        let Some(stack) = diff.document["stack"].as_str() else {
            return Ok(Applied::default());
        };
        let client = Self::client(ctx)?;
        match live_stack(&client, stack).await? {
            Some(live) => Ok(applied(ctx, stack, &live, String::new())),
            None => Ok(Applied::default()),
        }
    }

    async fn observe_step(&self, ctx: &StepContext) -> Result<Value, CloudFormationError> {
        let Some(record) = StackRecord::read(&ctx.work_dir).await? else {
            return Ok(Value::Null);
        };
        let client = Self::client(ctx)?;
        let live = live_stack(&client, &record.stack_name).await?;
        Ok(live.map_or(Value::Null, |l| {
            observed(&record.stack_name, &l, &hidden_values(ctx, &l))
        }))
    }
}

/// The change set's name for Plan `plan`: unique per attempt (a re-plan after the stack
/// moved makes another one).
fn change_set_name(plan: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let plan: String = plan
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(100)
        .collect();
    format!("outpost-{plan}-{millis}")
}

/// The diff of a Plan that changes nothing.
fn no_changes(
    stack: &str,
    live: Option<&Live>,
    parameters: &serde_json::Map<String, Value>,
) -> Diff {
    Diff {
        input: PolicyInput::Cloudformation,
        document: json!({"stack": stack, "changeSet": null, "parameters": parameters, "changes": []}),
        summary: change_set::summary(&[]),
        changes: false,
        resources: Some(Vec::new()),
        basis: live.map_or(Value::Null, Live::basis),
    }
}

/// The diff of a teardown: every resource of the stack the work dir remembers, deleted.
async fn delete_plan(client: &Client, ctx: &StepContext) -> Result<Diff, CloudFormationError> {
    let record = StackRecord::read(&ctx.work_dir).await?;
    let live = match &record {
        Some(record) => idle(client, &record.stack_name, Instant::now() + ctx.timeout).await?,
        None => None,
    };
    let (Some(record), Some(live)) = (record, live) else {
        return Ok(Diff {
            input: PolicyInput::Cloudformation,
            document: json!({"nothingDeployed": true}),
            summary: change_set::summary(&[]),
            changes: false,
            resources: Some(Vec::new()),
            basis: Value::Null,
        });
    };
    let stack = record.stack_name.as_str();
    let mut resources = Vec::new();
    let mut changes = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page = client
            .list_stack_resources()
            .stack_name(&live.stack_id)
            .set_next_token(next)
            .send()
            .await
            .map_err(|e| call_error("ListStackResources", stack, &e))?;
        for resource in page.stack_resource_summaries() {
            let change = json!({
                "action": "Remove",
                "logicalResourceId": resource.logical_resource_id(),
                "physicalResourceId": resource.physical_resource_id(),
                "resourceType": resource.resource_type(),
            });
            resources.push(ResourceChange {
                action: ChangeAction::Delete,
                ..change_set::resource_change(&change)
            });
            changes.push(change);
        }
        next = page.next_token().map(str::to_owned);
        if next.is_none() {
            break;
        }
    }
    Ok(Diff {
        input: PolicyInput::Cloudformation,
        summary: change_set::summary(&resources),
        changes: true,
        resources: Some(resources),
        basis: live.basis(),
        document: json!({"stack": stack, "stackId": live.stack_id, "delete": true, "changes": changes}),
    })
}

/// Whether the stack `diff` was planned against moved since, or its change set can no
/// longer be executed.
async fn moved(client: &Client, diff: &Diff) -> Result<Option<Moved>, CloudFormationError> {
    let Some(stack) = diff.document["stack"].as_str() else {
        return Ok(None);
    };
    let now = live_stack(client, stack).await?;
    let basis = now.as_ref().map_or(Value::Null, Live::basis);
    if basis != diff.basis {
        return Ok(Some(Moved(format!(
            "stack {stack} changed since the change set was made (was {}, is {basis})",
            diff.basis
        ))));
    }
    if let Some(id) = diff.document["changeSet"]["id"].as_str() {
        let described = client
            .describe_change_set()
            .change_set_name(id)
            .stack_name(stack)
            .send()
            .await;
        let status = match &described {
            Ok(d) => d
                .execution_status()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            Err(e) => crate::aws::describe(e),
        };
        if status != "AVAILABLE" {
            return Ok(Some(Moved(format!(
                "change set {id} can no longer be executed: {status}"
            ))));
        }
    }
    Ok(None)
}

/// The stack `stack` as it is, `None` when it does not exist (or is deleted).
async fn live_stack(client: &Client, stack: &str) -> Result<Option<Live>, CloudFormationError> {
    let described = match client.describe_stacks().stack_name(stack).send().await {
        Ok(described) => described,
        Err(e) if e.code() == Some("ValidationError") => return Ok(None),
        Err(e) => return Err(call_error("DescribeStacks", stack, &e)),
    };
    let Some(found) = described.stacks().first() else {
        return Ok(None);
    };
    let status = found
        .stack_status()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    if status == "DELETE_COMPLETE" {
        return Ok(None);
    }
    let stack_id = found.stack_id().unwrap_or(stack).to_owned();
    let events = client
        .describe_stack_events()
        .stack_name(&stack_id)
        .send()
        .await
        .map_err(|e| call_error("DescribeStackEvents", stack, &e))?;
    Ok(Some(Live {
        stack_id,
        status,
        reason: found.stack_status_reason().unwrap_or_default().to_owned(),
        latest_event: events
            .stack_events()
            .first()
            .and_then(|e| e.event_id().map(str::to_owned)),
        parameters: found
            .parameters()
            .iter()
            .filter_map(|p| {
                Some((
                    p.parameter_key()?.to_owned(),
                    p.parameter_value()?.to_owned(),
                ))
            })
            .collect(),
        outputs: found
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
            .collect(),
    }))
}

/// Stack `stack` once no operation runs on it (its status is not `*_IN_PROGRESS`, but
/// for `REVIEW_IN_PROGRESS`: a stack with only change sets); `None` when it does not
/// exist. A Plan after an apply the runner was killed in waits here for CloudFormation
/// to finish (or roll back) that apply.
async fn idle(
    client: &Client,
    stack: &str,
    deadline: Instant,
) -> Result<Option<Live>, CloudFormationError> {
    loop {
        let live = live_stack(client, stack).await?;
        match &live {
            Some(l) if l.status.ends_with("_IN_PROGRESS") && l.status != "REVIEW_IN_PROGRESS" => {
                wait(stack, deadline, &l.status).await?;
            }
            _ => return Ok(live),
        }
    }
}

/// Waits for the operation on stack `stack` to end, failing unless it ends in one of
/// [`DONE`].
async fn settle(
    client: &Client,
    stack: &str,
    deadline: Instant,
) -> Result<Live, CloudFormationError> {
    let Some(live) = idle(client, stack, deadline).await? else {
        return Ok(Live {
            status: "DELETE_COMPLETE".into(),
            ..Live::default()
        });
    };
    if DONE.contains(&live.status.as_str()) {
        return Ok(live);
    }
    Err(CloudFormationError::Failed {
        stack: stack.to_owned(),
        reason: format!("{}: {}", live.status, live.reason),
    })
}

/// Sleeps before polling again, failing once `deadline` passed.
async fn wait(stack: &str, deadline: Instant, status: &str) -> Result<(), CloudFormationError> {
    if Instant::now() >= deadline {
        return Err(CloudFormationError::Failed {
            stack: stack.to_owned(),
            reason: format!("still {status} when the step's timeout passed"),
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

/// Values an output must not report: every secret resolved for the step and every value
/// passed to a parameter CloudFormation hides (`NoEcho`: described as `****`).
fn hidden_values(ctx: &StepContext, live: &Live) -> Vec<String> {
    let mut hidden: Vec<String> = ctx
        .env
        .iter()
        .filter(|(k, _)| k.starts_with(crate::secrets::ENV_PREFIX))
        .map(|(_, v)| v.clone())
        .collect();
    if let Ok(wanted) = stack_of(&ctx.desired) {
        for (key, value) in &wanted.parameters {
            if live
                .parameters
                .get(key)
                .is_some_and(|v| v.chars().all(|c| c == '*'))
            {
                hidden.extend(secret_ref::resolve(value, &ctx.env).ok());
            }
        }
    }
    hidden.retain(|v| !v.is_empty());
    hidden
}

/// Whether `value` shows any of `hidden`.
fn shows(value: &str, hidden: &[String]) -> bool {
    hidden.iter().any(|h| value.contains(h.as_str()))
}

/// What drift compares: the stack's status, latest event, parameters and outputs
/// (those showing a hidden value as [`SENSITIVE`]).
fn observed(stack: &str, live: &Live, hidden: &[String]) -> Value {
    let masked = |values: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        values
            .iter()
            .map(|(k, v)| {
                let v = if shows(v, hidden) {
                    SENSITIVE
                } else {
                    v.as_str()
                };
                (k.clone(), v.to_owned())
            })
            .collect()
    };
    let (parameters, outputs) = (masked(&live.parameters), masked(&live.outputs));
    json!({
        "stack": stack,
        "stackId": live.stack_id,
        "status": live.status,
        "latestEvent": live.latest_event,
        "parameters": parameters,
        "outputs": outputs,
    })
}

/// The outputs and drift baseline of the stack as it is.
fn applied(ctx: &StepContext, stack: &str, live: &Live, log: String) -> Applied {
    let hidden = hidden_values(ctx, live);
    Applied {
        outputs: live
            .outputs
            .iter()
            .filter(|(_, v)| !shows(v, &hidden))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect(),
        log,
        last_applied: observed(stack, live, &hidden),
        audit: serde_json::Map::from_iter([("stack".to_owned(), json!(stack))]),
    }
}

fn call_error<E>(
    call: &'static str,
    stack: &str,
    error: &aws_sdk_cloudformation::error::SdkError<
        E,
        aws_sdk_cloudformation::config::http::HttpResponse,
    >,
) -> CloudFormationError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    CloudFormationError::Call {
        call,
        stack: stack.to_owned(),
        reason: crate::aws::describe(error),
        code: error.code().map(str::to_owned),
    }
}

impl Executor for CloudFormationExecutor {
    /// CloudFormation finishes (or rolls back) a stack operation on its own: a re-plan
    /// after a cut apply sees the stack as it ended.
    fn resumable(&self) -> bool {
        true
    }

    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move { Ok(self.plan_step(ctx).await?) })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move {
            match self.apply_step(ctx, diff).await? {
                Ok(applied) => Ok(applied),
                Err(moved) => Err(moved.into()),
            }
        })
    }

    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move { Ok(self.unchanged_step(ctx, diff).await?) })
    }

    fn moved<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Option<Moved>, ExecutorError>> {
        typed(async move { Ok(moved(&Self::client(ctx)?, diff).await?) })
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(async move { Ok(self.observe_step(ctx).await?) })
    }
}
