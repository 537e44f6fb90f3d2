//! Approve and deny buttons: each is the same `PATCH plans/NAME/approval` that `outpost
//! approve`/`deny` sends, with the diff hash the page showed, made as the logged-in user
//! through the API's own request handler — so the API's authorizer decides (a viewer
//! gets its 403) and the one approval function records who decided, on which diff.

use std::sync::Arc;

use axum::Form;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use outpost_api::plan_lifecycle::{ApprovalDecision, ApprovalRequest};
use serde::Deserialize;
use serde_json::Value;

use super::pages::layout::error_page;
use super::session::Session;
use crate::Dashboard;

/// The approve and deny forms' fields.
#[derive(Deserialize)]
pub struct Decision {
    csrf: String,
    /// The diff (`status.diff.hash`) the user saw.
    diff_hash: String,
    /// Why (deny only).
    #[serde(default)]
    reason: String,
}

/// `POST /ui/plans/{namespace}/{name}/approve`.
pub async fn approve(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Path((namespace, name)): Path<(String, String)>,
    Form(form): Form<Decision>,
) -> Response {
    decide(session, state, namespace, name, form, true).await
}

/// `POST /ui/plans/{namespace}/{name}/deny`.
pub async fn deny(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Path((namespace, name)): Path<(String, String)>,
    Form(form): Form<Decision>,
) -> Response {
    decide(session, state, namespace, name, form, false).await
}

/// Sends one request through the API's handler as the session's user.
pub(super) async fn api_call(
    state: &Arc<Dashboard>,
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
    let response = state.api.call(request).await;
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
    state: Arc<Dashboard>,
    namespace: String,
    name: String,
    form: Decision,
    approve: bool,
) -> Response {
    if !session.csrf_matches(&form.csrf) {
        return error_page(
            Some(&session),
            StatusCode::FORBIDDEN,
            "the form's CSRF token does not match your session: reload the page and try again",
        );
    }
    let reason = form.reason.trim();
    let decision = ApprovalRequest {
        decision: if approve {
            ApprovalDecision::Approve
        } else {
            ApprovalDecision::Deny
        },
        diff_hash: form.diff_hash.clone(),
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
    };
    let body = serde_json::to_value(&decision).expect("an ApprovalRequest serialises");
    let path = format!("/apis/outpost.dev/v1alpha1/namespaces/{namespace}/plans/{name}/approval");
    let (status, object) = api_call(&state, &session, Method::PATCH, &path, Some(body)).await;
    if !status.is_success() {
        return refused(&session, status, &object);
    }
    let verb = if approve { "approve" } else { "deny" };
    tracing::info!(user = %session.user.name, plan = %format!("{namespace}/{name}"), verb, "plan decided on the dashboard");
    Redirect::to(&format!("/ui/plans/{namespace}/{name}")).into_response()
}

/// The page for a refused API call, with the API's own message.
pub(super) fn refused(session: &Session, status: StatusCode, object: &Value) -> Response {
    let message = object
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the API server refused the request");
    error_page(Some(session), status, message)
}
