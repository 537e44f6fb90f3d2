//! Every policy, with its violations across the fleet: denials and warnings on Plans
//! (control plane, before dispatch) and on drift (what the runners observed).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use maud::html;
use outpost_api::{DriftReport, Enforcement, Plan, Policy};

use super::layout::{api_error, page as shell, when};
use crate::Dashboard;
use crate::data::list;
use crate::session::Session;

/// One violation of a policy.
struct Violation {
    namespace: String,
    install: String,
    /// `plan NAME` or `drift of ENTITY`.
    place: maud::Markup,
    denied: bool,
    messages: Vec<String>,
    at: Option<Time>,
}

/// `GET /ui/policies`.
pub async fn page(session: Session, State(state): State<Arc<Dashboard>>) -> Response {
    let loaded = async {
        Ok::<_, outpost_apiserver::status::ApiError>((
            list::<Policy>(&state, &session.user, "policies").await?,
            list::<Plan>(&state, &session.user, "plans").await?,
            list::<DriftReport>(&state, &session.user, "driftreports").await?,
        ))
    }
    .await;
    let (mut policies, plans, drift) = match loaded {
        Ok(l) => l,
        Err(err) => return api_error(Some(&session), &err),
    };
    policies.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let now = Time(jiff::Timestamp::now());
    let violations = |policy: &Policy| -> Vec<Violation> {
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        let mut found = Vec::new();
        for plan in plans
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(&namespace))
        {
            for v in plan.status.iter().flat_map(|s| &s.verdicts) {
                if v.policy == name && (v.denied || !v.messages.is_empty()) {
                    let plan_name = plan.metadata.name.clone().unwrap_or_default();
                    found.push(Violation {
                        namespace: namespace.clone(),
                        install: plan.spec.install.clone(),
                        place: html! { "plan " a href={ "/ui/plans/" (namespace) "/" (plan_name) } { (plan_name) } },
                        denied: v.denied,
                        messages: v.messages.clone(),
                        at: plan.metadata.creation_timestamp.clone(),
                    });
                }
            }
        }
        for report in drift
            .iter()
            .filter(|d| d.metadata.namespace.as_deref() == Some(&namespace))
        {
            for v in &report.spec.verdicts {
                if v.policy == name && (v.denied || !v.messages.is_empty()) {
                    found.push(Violation {
                        namespace: namespace.clone(),
                        install: report.spec.install.clone(),
                        place: html! { "drift of " a href={ "/ui/installs/" (namespace) "/" (report.spec.install) "#drift-" (report.spec.entity.name) } { (report.spec.entity.name) } },
                        denied: v.denied,
                        messages: v.messages.clone(),
                        at: Some(report.spec.observed_at.clone()),
                    });
                }
            }
        }
        found
    };
    let body = html! {
        h1 { "Policies" }
        @if policies.is_empty() { div.card { "No policies: apply some with " code { "kubectl apply -R -f manifests/policies" } "." } }
        @for policy in &policies {
            @let found = violations(policy);
            @let name = policy.metadata.name.clone().unwrap_or_default();
            div.card id={ "policy-" (name) } {
                p {
                    b { (policy.metadata.namespace.as_deref().unwrap_or_default()) "/" (name) } " "
                    @match policy.spec.enforcement.unwrap_or(Enforcement::Deny) {
                        Enforcement::Deny => span.pill.bad { "deny" },
                        Enforcement::Warn => span.pill.warn { "warn" },
                        Enforcement::Approve => span.pill.warn { "approve" },
                    }
                    span.muted {
                        " app " (policy.spec.app.as_deref().unwrap_or("any"))
                        " · inputs " (policy.spec.inputs.iter().map(|i| serde_json::to_value(i).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()).collect::<Vec<_>>().join(", "))
                    }
                    " · " @if found.is_empty() { span.pill.ok { "no violations" } } @else { span.pill.warn data-violations=(found.len()) { (found.len()) " violation(s)" } }
                }
                @if !found.is_empty() {
                    table {
                        thead { tr { th { "Install" } th { "Where" } th { "Verdict" } th { "Messages" } th { "When" } } }
                        tbody {
                            @for v in &found {
                                tr {
                                    td { a href={ "/ui/installs/" (v.namespace) "/" (v.install) } { (v.namespace) "/" (v.install) } }
                                    td { (v.place) }
                                    td { @if v.denied { span.pill.bad { "denied" } } @else { span.pill.warn { "warned" } } }
                                    td { @for m in &v.messages { div { (m) } } }
                                    td { (v.at.as_ref().map(|t| when(t, &now)).unwrap_or_default()) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    shell("Policies", "policies", Some(&session), body).into_response()
}
