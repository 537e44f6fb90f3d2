//! The install page's "Trigger" form: the same request `outpost trigger` makes — a
//! [`PlanRequest`] added to the Install's `spec.requests`, fenced by its
//! resourceVersion — sent as the logged-in user through the API's own request handler,
//! so the API's authorizer decides (a viewer gets its 403). The Install controller makes
//! the Plan `<install>-<id>`, which goes through the gate like any other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use http::{Method, StatusCode};
use outpost_api::{Action, Install, Operation, PlanRequest, TriggerKind};
use serde::Deserialize;
use serde_json::json;

use super::decide::{api_call, refused};
use super::pages::layout::error_page;
use super::session::Session;
use crate::Dashboard;

/// How long the handler waits for the Install controller's Plan before it says so.
const PLAN_WITHIN: Duration = Duration::from_secs(10);

/// The trigger form's fields.
#[derive(Deserialize)]
pub struct TriggerForm {
    csrf: String,
    /// The action, one with a `manual` trigger.
    action: String,
    /// Runtime role override (step 1 of the role precedence chain); none when empty.
    #[serde(default)]
    role: String,
}

/// `POST /ui/installs/{namespace}/{name}/trigger`: requests the Plan and opens it.
pub async fn trigger(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Path((namespace, install)): Path<(String, String)>,
    Form(form): Form<TriggerForm>,
) -> Response {
    if !session.csrf_matches(&form.csrf) {
        return error_page(
            Some(&session),
            StatusCode::FORBIDDEN,
            "the form's CSRF token does not match your session: reload the page and try again",
        );
    }
    let api = "/apis/outpost.dev/v1alpha1/namespaces";
    let action_path = format!("{api}/{namespace}/actions/{}", form.action);
    let (status, object) = api_call(&state, &session, Method::GET, &action_path, None).await;
    if !status.is_success() {
        return refused(&session, status, &object);
    }
    let install_path = format!("{api}/{namespace}/installs/{install}");
    let action: Option<Action> = serde_json::from_value(object).ok();
    let manual = action.as_ref().is_some_and(|a| {
        a.spec
            .triggers
            .iter()
            .any(|t| t.kind() == Some(TriggerKind::Manual))
    });
    let role = Some(form.role.trim().to_owned()).filter(|r| !r.is_empty());
    let request = PlanRequest::new(
        Operation::Trigger,
        &form.action,
        role,
        Some(session.user.name.clone()),
    );
    // Fenced by the Install's resourceVersion; another writer meanwhile means read and
    // try again.
    for _ in 0..5 {
        let (status, object) = api_call(&state, &session, Method::GET, &install_path, None).await;
        if !status.is_success() {
            return refused(&session, status, &object);
        }
        let current: Install = match serde_json::from_value(object) {
            Ok(install) => install,
            Err(err) => {
                return error_page(
                    Some(&session),
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("install {namespace}/{install} cannot be read: {err}"),
                );
            }
        };
        if !manual || action.as_ref().map(|a| &a.spec.app) != Some(&current.spec.app) {
            return error_page(
                Some(&session),
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!(
                    "action {namespace}/{} is not a manual action of app {}: only actions with a `manual` trigger can be run from here",
                    form.action, current.spec.app
                ),
            );
        }
        let mut requests = Vec::new();
        for r in &current.spec.requests {
            // Requests already served (their Plan exists) go, as `outpost trigger` does.
            let plan = format!("{api}/{namespace}/plans/{install}-{}", r.id);
            let (status, _) = api_call(&state, &session, Method::GET, &plan, None).await;
            if status == StatusCode::NOT_FOUND {
                requests.push(r.clone());
            }
        }
        requests.push(request.clone());
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"requests": requests},
        });
        let (status, object) =
            api_call(&state, &session, Method::PATCH, &install_path, Some(patch)).await;
        if status == StatusCode::CONFLICT {
            continue;
        }
        if !status.is_success() {
            return refused(&session, status, &object);
        }
        tracing::info!(user = %session.user.name, install = %format!("{namespace}/{install}"), action = %form.action, "action triggered on the dashboard");
        let plan = format!("{install}-{}", request.id);
        let deadline = Instant::now() + PLAN_WITHIN;
        while Instant::now() < deadline {
            let path = format!("{api}/{namespace}/plans/{plan}");
            if api_call(&state, &session, Method::GET, &path, None)
                .await
                .0
                .is_success()
            {
                return Redirect::to(&format!("/ui/plans/{namespace}/{plan}")).into_response();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        return error_page(
            Some(&session),
            StatusCode::ACCEPTED,
            &format!(
                "requested: the install controller has not made plan {namespace}/{plan} within {} s; it appears on the install page once it does (check that `outpost controllers` runs)",
                PLAN_WITHIN.as_secs()
            ),
        );
    }
    error_page(
        Some(&session),
        StatusCode::CONFLICT,
        &format!(
            "install {namespace}/{install} kept changing while the request was added: try again"
        ),
    )
}
