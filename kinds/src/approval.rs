//! A Plan's lifecycle on the server: `PATCH plans/NAME/approval` (a person's decision,
//! like a CertificateSigningRequest's approval, [`Approvals`]) and the check of every
//! write of a Plan's status ([`PlanLifecycle`]). The rules are in [`crate::plan`]; this
//! is where they meet the request (who asks, the install's approval mode, the store).

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::plan_lifecycle::{APPROVERS, ApprovalRequest, Writer};
use outpost_apiserver::admission::{Admission, Attributes, Operation, Reads};
use outpost_apiserver::auth::forbidden_message;
use outpost_apiserver::object_meta::{from_store, to_store};
use outpost_apiserver::patch::record_update;
use outpost_apiserver::registry::{PluginSubresource, SubresourceBody};
use outpost_apiserver::request::{ResourceRequest, Verb};
use outpost_apiserver::server::{Call, Current, RETRIES, Subresource, content_type, json};
use outpost_apiserver::status::{ApiError, Subject};
use outpost_apiserver::storage::StoreError;
use serde_json::Value;

use crate::groups::{ADMINS, may_decide};
use crate::plan::{
    InstallPolicy, Refusal, check_create_status, check_status_write, decide as decide_plan,
};
use crate::runner_token::runner_install;

pub use crate::plan::{APPROVAL_SUBRESOURCE as SUBRESOURCE, has_lifecycle as serves};

/// How Plans declare the subresource: in discovery and the OpenAPI document, with the
/// body a decision is.
pub fn subresource() -> PluginSubresource {
    PluginSubresource {
        name: SUBRESOURCE.into(),
        described: Some(SubresourceBody {
            summary: "approve or deny the diff of the specified".into(),
            schema: serde_json::json!({
                "type": "object",
                "description": "A decision on the Plan's diff. The approver and the time are taken from the authenticated user and the server's clock.",
                "required": ["decision", "diffHash"],
                "properties": {
                    "decision": {"type": "string", "enum": ["approve", "deny"]},
                    "diffHash": {"type": "string", "description": "The Plan's status.diff.hash the person reviewed."},
                    "reason": {"type": "string", "description": "Why (required to deny)."},
                },
            }),
            content_types: vec![
                "application/merge-patch+json".into(),
                "application/json".into(),
                "application/apply-patch+yaml".into(),
            ],
        }),
    }
}

/// The admission plugin holding every write of a Plan's status to its lifecycle.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanLifecycle;

#[async_trait::async_trait]
impl Admission for PlanLifecycle {
    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        object: &mut Value,
        reads: &Reads<'_>,
    ) -> Result<(), ApiError> {
        match attributes.old {
            Some(old) if attributes.operation == Operation::Update && attributes.is_status() => {
                admit_status(attributes, reads, old, object)
            }
            None if attributes.operation == Operation::Create => {
                admit_create(attributes, reads, object)
            }
            _ => Ok(()),
        }
    }
}

/// `plans/NAME/approval`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Approvals;

#[async_trait::async_trait]
impl Subresource for Approvals {
    fn name(&self) -> &'static str {
        SUBRESOURCE
    }

    async fn answer(&self, call: &Call, body: Body) -> Result<Response, ApiError> {
        answer(call, body).await
    }
}

fn refused(refusal: Refusal, subject: Subject) -> ApiError {
    match refusal {
        Refusal::Forbidden(reason) => ApiError::Forbidden(reason),
        Refusal::Conflict(reason) => ApiError::Refused { subject, reason },
        Refusal::Invalid(cause) => ApiError::Invalid {
            subject,
            causes: vec![cause],
        },
    }
}

/// Checks a write of a Plan's status against its lifecycle, for the writer of the
/// request (a runner token is [`Writer::Runner`], anyone else [`Writer::Operator`]).
/// Other kinds pass.
fn admit_status(
    attributes: &Attributes<'_>,
    reads: &Reads<'_>,
    old: &Value,
    new: &mut Value,
) -> Result<(), ApiError> {
    if !serves(attributes.rt) {
        return Ok(());
    }
    let writer = writer_of(attributes);
    let install = old
        .pointer("/spec/install")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let policy = install_policy(reads, attributes.namespace(), install);
    check_status_write(writer, policy, old, new)
        .map_err(|r| refused(r, Subject::of(attributes.rt, attributes.name)))
}

/// Checks the status a Plan is created with: only its gate's decision
/// ([`check_create_status`]), and only from a writer who may also write `plans/status`
/// (the decision is the status write the create saves). Other kinds pass.
fn admit_create(
    attributes: &Attributes<'_>,
    reads: &Reads<'_>,
    new: &Value,
) -> Result<(), ApiError> {
    if !serves(attributes.rt) || new.get("status").is_none() {
        return Ok(());
    }
    check_create_status(writer_of(attributes), new)
        .map_err(|r| refused(r, Subject::of(attributes.rt, attributes.name)))?;
    let status_write = ResourceRequest {
        verb: Verb::Update,
        name: Some(attributes.name.to_owned()),
        subresource: Some("status".into()),
        ..attributes.request.clone()
    };
    if !reads.may(attributes.user, &status_write) {
        return Err(ApiError::Forbidden(format!(
            "{}: creating a Plan with a status needs update on plans/status too",
            forbidden_message(attributes.user, &status_write)
        )));
    }
    Ok(())
}

/// Who writes, for the lifecycle: a runner token is [`Writer::Runner`], anyone else
/// [`Writer::Operator`].
fn writer_of(attributes: &Attributes<'_>) -> Writer {
    match runner_install(attributes.user) {
        Some(_) => Writer::Runner,
        None => Writer::Operator,
    }
}

/// The install's approval mode, from the watch cache (no store read). An install that
/// is not found (or says nothing) prompts: `prompt` is the default.
fn install_policy(reads: &Reads<'_>, namespace: Option<&str>, install: &str) -> InstallPolicy {
    #[derive(serde::Deserialize)]
    struct Stored {
        spec: Option<StoredSpec>,
    }
    #[derive(serde::Deserialize)]
    struct StoredSpec {
        #[serde(rename = "approvalMode")]
        approval_mode: Option<outpost_api::ApprovalMode>,
    }
    let mode = reads
        .resource(outpost_api::GROUP, outpost_api::VERSION, "installs")
        .and_then(|rt| reads.cached(&rt, namespace, install))
        .and_then(|cached| serde_json::from_slice::<Stored>(&cached.json()).ok())
        .and_then(|i| i.spec?.approval_mode)
        .unwrap_or_default();
    InstallPolicy {
        prompts: mode == outpost_api::ApprovalMode::Prompt,
    }
}

/// `PATCH` (or `PUT`) `plans/NAME/approval` with an [`ApprovalRequest`] (merge patch,
/// JSON or apply content types): records the decision of the authenticated user at the
/// server's time and answers the Plan. `GET` answers the Plan.
pub async fn answer(call: &Call, body: Body) -> Result<Response, ApiError> {
    match call.request.verb {
        Verb::Get => return call.get_object().await,
        Verb::Patch | Verb::Update => {}
        _ => return Err(ApiError::MethodNotAllowed),
    }
    if !may_decide(&call.user) {
        return Err(ApiError::Forbidden(format!(
            "{}: only members of {APPROVERS} or {ADMINS} decide on Plans",
            forbidden_message(&call.user, &call.request)
        )));
    }
    let media = content_type(&call.headers);
    let bytes = call.read_body(body).await?;
    let body = match media.as_str() {
        "application/merge-patch+json" | "application/json" | "" => serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::BadRequest(format!("error decoding the approval: {e}")))?,
        // The decision is read as it is: an apply body need not name apiVersion and kind.
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            serde_json::from_slice(&bytes).or_else(|_| {
                std::str::from_utf8(&bytes)
                    .map_err(|e| e.to_string())
                    .and_then(|text| serde_saphyr::from_str(text).map_err(|e| e.to_string()))
                    .map_err(|e| ApiError::BadRequest(format!("error decoding the approval: {e}")))
            })?
        }
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the approval is sent as application/merge-patch+json, application/json or application/apply-patch+yaml, not {other:?}"
            )));
        }
    };
    let request: ApprovalRequest = serde_json::from_value::<ApprovalRequest>(body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the approval must be {{\"decision\": \"approve\"|\"deny\", \"diffHash\": \"sha256:…\", \"reason\": \"…\"}}: {e}"
        ))
    })?;
    let plan = decide(call, &request).await?;
    Ok(json(StatusCode::OK, &plan))
}

/// Records `request` by the call's user on the named Plan, fenced by the resourceVersion
/// read (a lost race is read and checked again). The first try starts from the watch
/// cache's copy and is trusted only when its write lands ([`Call::current`]).
async fn decide(call: &Call, request: &ApprovalRequest) -> Result<Value, ApiError> {
    let mut from_cache = !call.dry_run();
    for _ in 0..RETRIES {
        let current = call
            .current(from_cache)
            .await?
            .ok_or_else(|| ApiError::NotFound(call.subject()))?;
        from_cache = false;
        match decide_on(call, request, &current).await {
            Ok(Some(decided)) => return Ok(decided),
            Ok(None) => continue,
            Err(_) if current.cached => continue, // the copy may be behind
            Err(err) => return Err(err),
        }
    }
    Err(ApiError::Conflict {
        subject: call.subject(),
        reason: "the Plan kept changing; look again".into(),
    })
}

/// One try of [`decide`] on `current`: the Plan decided, or `None` when it changed
/// meanwhile.
async fn decide_on(
    call: &Call,
    request: &ApprovalRequest,
    current: &Current,
) -> Result<Option<Value>, ApiError> {
    let plan = &current.object;
    call.check_access(plan)?;
    let now = jiff::Timestamp::now();
    let at = Time(now.round(jiff::Unit::Second).unwrap_or(now));
    let mut decided =
        decide_plan(plan, request, &call.user.name, at).map_err(|r| refused(r, call.subject()))?;
    record_update(
        Some(plan),
        &mut decided,
        &call.field_manager(),
        "Update",
        &outpost_apiserver::object_meta::now(),
    );
    if call.dry_run() {
        return Ok(Some(decided));
    }
    match call
        .reads()
        .store()
        .update(&call.key(), to_store(&decided), current.revision)
        .await
    {
        Ok(written) => Ok(Some(from_store(&written)?)),
        Err(StoreError::Conflict { .. }) => Ok(None),
        Err(err) => Err(ApiError::from_store(err, call.subject())),
    }
}
