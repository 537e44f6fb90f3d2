//! Approve and deny buttons: each is the same status patch `outpost approve`/`deny`
//! sends ([`PlanStatus::approval_patch`]), fenced by the Plan's resourceVersion, made
//! as the logged-in user through the API's own request handler — so the API's
//! authorizer decides (a viewer gets its 403) and admission and validation apply.

use std::sync::Arc;

use axum::Form;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::{Plan, PlanPhase, PlanStatus};
use serde::Deserialize;
use serde_json::{Value, json};

use super::pages::layout::error_page;
use super::session::Session;
use crate::server::ServerState;
use crate::server::dispatch::dispatch;

/// The approve and deny forms' fields.
#[derive(Deserialize)]
pub struct Decision {
    csrf: String,
    /// The Plan's resourceVersion the user saw.
    resource_version: String,
    /// Why (deny only).
    #[serde(default)]
    reason: String,
}

/// `POST /ui/plans/{namespace}/{name}/approve`.
pub async fn approve(
    session: Session,
    State(state): State<Arc<ServerState>>,
    Path((namespace, name)): Path<(String, String)>,
    Form(form): Form<Decision>,
) -> Response {
    decide(session, state, namespace, name, form, true).await
}

/// `POST /ui/plans/{namespace}/{name}/deny`.
pub async fn deny(
    session: Session,
    State(state): State<Arc<ServerState>>,
    Path((namespace, name)): Path<(String, String)>,
    Form(form): Form<Decision>,
) -> Response {
    decide(session, state, namespace, name, form, false).await
}

/// Sends one request through the API's handler as the session's user.
pub(super) async fn api_call(
    state: &Arc<ServerState>,
    session: &Session,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {}", session.token))
        .header(header::ACCEPT, "application/json");
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/merge-patch+json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let request = request
        .body(body)
        .expect("a request built from a valid path and headers");
    let response = dispatch(state.clone(), request).await;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn decide(
    session: Session,
    state: Arc<ServerState>,
    namespace: String,
    name: String,
    form: Decision,
    approve: bool,
) -> Response {
    let verb = if approve { "approve" } else { "deny" };
    if !session.csrf_matches(&form.csrf) {
        return error_page(
            Some(&session),
            StatusCode::FORBIDDEN,
            "the form's CSRF token does not match your session: reload the page and try again",
        );
    }
    let path = format!("/apis/outpost.dev/v1alpha1/namespaces/{namespace}/plans/{name}");
    let (status, object) = api_call(&state, &session, Method::GET, &path, None).await;
    if !status.is_success() {
        return refused(&session, status, &object);
    }
    let plan: Plan = match serde_json::from_value(object) {
        Ok(plan) => plan,
        Err(err) => {
            return error_page(
                Some(&session),
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("plan {namespace}/{name} cannot be read: {err}"),
            );
        }
    };
    let phase = plan.status.as_ref().and_then(|s| s.phase);
    if phase != Some(PlanPhase::AwaitingApproval) {
        let phase = phase.map_or("not gated yet (Pending)".to_owned(), |p| format!("{p:?}"));
        return error_page(
            Some(&session),
            StatusCode::CONFLICT,
            &format!(
                "plan {namespace}/{name} is {phase}, not AwaitingApproval, so there is nothing to {verb}"
            ),
        );
    }
    let now = Time(jiff::Timestamp::now());
    let by = &session.user.name;
    let status_patch = if approve {
        let Some(hash) = plan.spec.content_hash.as_deref() else {
            return error_page(
                Some(&session),
                StatusCode::CONFLICT,
                &format!(
                    "plan {namespace}/{name} has no content hash, so an approval could not bind to it: deny it and make a new one"
                ),
            );
        };
        PlanStatus::approval_patch(by, hash, now)
    } else {
        let reason = form.reason.trim();
        PlanStatus::denial_patch(
            by,
            if reason.is_empty() {
                "no reason given"
            } else {
                reason
            },
            now,
        )
    };
    // Fenced by the version the user looked at: a decision made meanwhile is never
    // overwritten.
    let patch = json!({
        "metadata": {"resourceVersion": form.resource_version},
        "status": status_patch,
    });
    let (status, object) = api_call(
        &state,
        &session,
        Method::PATCH,
        &format!("{path}/status"),
        Some(patch),
    )
    .await;
    if !status.is_success() {
        return refused(&session, status, &object);
    }
    tracing::info!(user = %by, plan = %format!("{namespace}/{name}"), verb, "plan decided on the dashboard");
    Redirect::to(&format!("/ui/plans/{namespace}/{name}")).into_response()
}

/// The page for a refused API call, with the API's own message.
pub(super) fn refused(session: &Session, status: StatusCode, object: &Value) -> Response {
    let message = object
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the API server refused the request");
    let message = match status {
        StatusCode::CONFLICT => format!("{message}: someone decided meanwhile; look again"),
        _ => message.to_owned(),
    };
    error_page(Some(session), status, &message)
}
