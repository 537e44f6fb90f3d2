//! A Plan's lifecycle on the server: `PATCH plans/NAME/approval` (a person's decision,
//! like a CertificateSigningRequest's approval) and the check of every write of a
//! Plan's status ([`admit_status`]). The rules are in [`crate::admission::plan`]; this
//! is where they meet the request (who asks, the install's approval mode, the store).

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::plan_lifecycle::{APPROVERS, ApprovalRequest, Writer};
use serde_json::Value;

use super::ServerState;
use super::body::{content_type, json, read};
use super::dispatch::Call;
use super::objects::{Current, RETRIES};
use crate::admission::plan::{InstallPolicy, Refusal, check_status_write, decide as decide_plan};
use crate::auth::{ADMINS, User, forbidden_message, runner_install};
use crate::object_meta::{from_store, to_store};
use crate::patch::record_update;
use crate::request::Verb;
use crate::status::{ApiError, Subject};
use crate::storage::StoreError;

pub use crate::admission::plan::{APPROVAL_SUBRESOURCE as SUBRESOURCE, has_lifecycle as serves};

/// Whether `user` may decide on Plans: an approver or an admin.
pub fn may_decide(user: &User) -> bool {
    user.groups.iter().any(|g| g == APPROVERS || g == ADMINS)
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
pub(super) fn admit_status(call: &Call, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    if !serves(&call.rt) {
        return Ok(());
    }
    let writer = match runner_install(&call.user) {
        Some(_) => Writer::Runner,
        None => Writer::Operator,
    };
    let install = old
        .pointer("/spec/install")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let policy = install_policy(&call.state, call.namespace(), install);
    check_status_write(writer, policy, old, new).map_err(|r| refused(r, call.subject()))
}

/// The install's approval mode, from the watch cache (no store read). An install that
/// is not found (or says nothing) prompts: `prompt` is the default.
fn install_policy(state: &ServerState, namespace: Option<&str>, install: &str) -> InstallPolicy {
    #[derive(serde::Deserialize)]
    struct Stored {
        spec: Option<StoredSpec>,
    }
    #[derive(serde::Deserialize)]
    struct StoredSpec {
        #[serde(rename = "approvalMode")]
        approval_mode: Option<outpost_api::ApprovalMode>,
    }
    let mode = state
        .outpost_type("installs")
        .and_then(|rt| state.cache(&rt).ok())
        .and_then(|cache| cache.get(namespace, install))
        .and_then(|cached| serde_json::from_slice::<Stored>(cached.json()).ok())
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
        Verb::Get => return super::objects::get(call).await,
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
    let bytes = read(body, call.state.config.limits.max_request_body_bytes).await?;
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
        &crate::object_meta::now(),
    );
    if call.dry_run() {
        return Ok(Some(decided));
    }
    match call
        .state
        .store
        .update(&call.key(), to_store(&decided), current.revision)
        .await
    {
        Ok(written) => Ok(Some(from_store(&written)?)),
        Err(StoreError::Conflict { .. }) => Ok(None),
        Err(err) => Err(ApiError::from_store(err, call.subject())),
    }
}
