//! One Plan: what it does and under which role (and which level of the precedence
//! chain chose it), the rendered desired state, the real diff the runner computed,
//! policy results, its log, and approve/deny while it is `AwaitingApproval`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use maud::{Markup, html};
use outpost_api::plan_lifecycle::{ApprovalDecision, PlanDiff};
use outpost_api::{AuditEvent, AuditEventType, Enforcement, Plan, PlanPhase, RoleLevel, Verdict};

use super::install::entity_text;
use super::layout::{object_page, pretty, when, yaml};
use crate::Dashboard;
use crate::data::{get, list_of_install};
use crate::session::Session;
use outpost_apiserver::status::ApiError;

/// `GET /ui/plans/{namespace}/{name}`.
pub async fn page(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let rendered = render(&session, &state, &namespace, &name).await;
    let title = format!("plan {name}");
    object_page(
        &session,
        (&title, "fleet"),
        ("plans", &namespace, &name),
        rendered,
    )
}

/// Where the role came from: the level of the precedence chain, numbered as documented.
pub fn level_text(level: RoleLevel) -> &'static str {
    match level {
        RoleLevel::Override => "1 · runtime override",
        RoleLevel::BreakGlass => "2 · break-glass role",
        RoleLevel::Entity => "3 · entity role",
        RoleLevel::Matrix => "4 · matrix rule",
        RoleLevel::Default => "5 · default role",
    }
}

/// `ROLE (LEVEL)` of a Plan, or `—` before the gate resolved it.
pub fn role_text(plan: &Plan) -> Markup {
    html! {
        @if let Some(role) = plan.status.as_ref().and_then(|s| s.role.as_ref()) {
            code { (role.name) } " " span.muted { "(" (level_text(role.level)) @if let Some(rule) = &role.rule { ": " (rule) } ")" }
        } @else { "—" }
    }
}

/// One pill per policy verdict.
pub fn verdict_pills(verdicts: &[Verdict]) -> Markup {
    html! {
        @if verdicts.is_empty() { span.muted { "no policy applies" } }
        @for v in verdicts {
            @let class = if v.denied { "pill bad" } else if v.messages.is_empty() { "pill ok" } else { "pill warn" };
            @let what = if v.denied { "denied" } else if v.messages.is_empty() { "passed" } else { "warned" };
            span class=(class) title=(v.messages.join("\n")) { (v.policy) ": " (what) } " "
        }
    }
}

/// The diff as `outpost diff` prints it: one line per resource (`+`, `~`, `-/+`, `-`),
/// its changed fields, the summary and the policies' verdicts on it.
pub fn diff_view(diff: &PlanDiff) -> Markup {
    html! {
        pre #diff-text {
            @for r in &diff.resources {
                "  " (r.action.sign()) " " (r.address) "\n"
                @for f in &r.fields {
                    "      " (f.path) ": " (f.before.as_deref().unwrap_or("(none)")) " → " (f.after.as_deref().unwrap_or("(none)")) "\n"
                }
            }
            @if diff.truncated { "  … (more changes than shown)\n" }
            "\nPlan: " (diff.summary) ".\n"
        }
        @if !diff.verdicts.is_empty() { p { "Policies on the diff: " (verdict_pills(&diff.verdicts)) } }
        p.muted { "diff " code #diff-hash { (diff.hash) } }
    }
}

/// How long the Plan ran.
pub fn duration(plan: &Plan) -> String {
    let status = plan.status.as_ref();
    match (
        status.and_then(|s| s.started_at.as_ref()),
        status.and_then(|s| s.finished_at.as_ref()),
    ) {
        (Some(start), Some(end)) => {
            let ms = end.0.as_millisecond() - start.0.as_millisecond();
            format!("{:.1} s", ms as f64 / 1000.0)
        }
        (Some(_), None) => "running".into(),
        _ => "—".into(),
    }
}

/// The Plan's phase as a coloured pill.
pub fn phase_pill(plan: &Plan) -> Markup {
    let phase = plan.status.as_ref().and_then(|s| s.phase);
    let class = match phase {
        Some(PlanPhase::Succeeded) => "pill ok",
        Some(PlanPhase::Failed | PlanPhase::Denied) => "pill bad",
        Some(PlanPhase::AwaitingApproval) => "pill warn",
        _ => "pill info",
    };
    html! { span class=(class) data-phase=(phase.map_or("Pending".into(), |p| format!("{p:?}"))) { (phase.map_or("Pending".into(), |p| format!("{p:?}"))) } }
}

async fn render(
    session: &Session,
    state: &Dashboard,
    namespace: &str,
    name: &str,
) -> Result<Option<Markup>, ApiError> {
    let Some(plan) = get::<Plan>(state, &session.user, "plans", namespace, name).await? else {
        return Ok(None);
    };
    let plan = &plan;
    // The Plan's events are in its install's audit log: read that install's events by
    // the index, not every event of the fleet.
    let audit: Vec<AuditEvent> = list_of_install(
        state,
        &session.user,
        "auditevents",
        namespace,
        &plan.spec.install,
    )?;
    let mut events: Vec<&AuditEvent> = audit
        .iter()
        .filter(|e| e.spec.plan.as_deref() == Some(name))
        .collect();
    events.sort_by_key(|e| e.spec.sequence);
    let now = Time(jiff::Timestamp::now());
    let spec = &plan.spec;
    let status = plan.status.clone().unwrap_or_default();
    let awaiting = status.phase == Some(PlanPhase::AwaitingApproval);
    let diff_hash = status
        .diff
        .as_ref()
        .map(|d| d.hash.clone())
        .unwrap_or_default();
    let runner_diffs: Vec<&AuditEvent> = events
        .iter()
        .copied()
        .filter(|e| e.spec.type_ == AuditEventType::Plan)
        .collect();
    let runner_verdicts: Vec<&AuditEvent> = events
        .iter()
        .copied()
        .filter(|e| e.spec.type_ == AuditEventType::Verdict)
        .collect();
    Ok(Some(html! {
        h1 { "Plan " (name) " " (phase_pill(plan)) }
        div.card {
            dl.kv {
                dt { "Install" } dd { a href={ "/ui/installs/" (namespace) "/" (spec.install) } { (namespace) "/" (spec.install) } }
                dt { "Operation" } dd { (spec.operation) " of " (entity_text(&spec.entity)) }
                @if let Some(reason) = &spec.reason { dt { "Reason" } dd { (reason) } }
                dt { "Role" } dd #role { (role_text(plan)) }
                dt { "Content hash" } dd { code { (spec.content_hash.as_deref().unwrap_or("—")) } }
                @if let Some(a) = &status.approval {
                    dt { (match a.decision { ApprovalDecision::Approve => "Approved", ApprovalDecision::Deny => "Denied" }) }
                    dd #approval { "by " b { (a.by) } " " (when(&a.at, &now)) ", bound to " code { (a.content_hash) }
                        @if let Some(d) = &a.diff_hash { " and the diff " code { (d) } }
                        @if let Some(r) = &a.reason { ": " (r) } }
                }
                @if let Some(by) = &status.claimed_by { dt { "Claimed by" } dd { (by) } }
                @if let Some(t) = &plan.metadata.creation_timestamp { dt { "Created" } dd { (when(t, &now)) } }
                dt { "Duration" } dd { (duration(plan)) }
                @if let Some(message) = &status.message { dt { "Message" } dd #message { (message) } }
            }
        }
        h2 { "The diff" }
        div.card #diff {
            @if let Some(diff) = &status.diff { (diff_view(diff)) }
            @else { p.muted { "The runner has not planned this yet." } }
        }
        @if awaiting {
            div.card #decide {
                p { "This Plan waits for an approver's decision on exactly the diff above (" code { (diff_hash) } ")." }
                div.actions {
                    form method="post" action={ "/ui/plans/" (namespace) "/" (name) "/approve" } {
                        input type="hidden" name="csrf" value=(session.csrf());
                        input type="hidden" name="diff_hash" value=(diff_hash);
                        button #approve type="submit" { "Approve" }
                    }
                    form method="post" action={ "/ui/plans/" (namespace) "/" (name) "/deny" } {
                        input type="hidden" name="csrf" value=(session.csrf());
                        input type="hidden" name="diff_hash" value=(diff_hash);
                        input type="text" name="reason" placeholder="reason for denying";
                        button.danger #deny type="submit" { "Deny" }
                    }
                }
                @if !session.may_decide() { p.muted { "You are logged in as a viewer: only approvers and admins may approve or deny." } }
            }
        }
        h2 { "Policy results" }
        div.card #verdicts {
            p { "Control plane, on the rendered desired state: " (verdict_pills(&status.verdicts)) }
            @for v in &status.verdicts {
                @for m in &v.messages {
                    p.muted { (v.policy) " (" (match v.enforcement { Enforcement::Deny => "deny", Enforcement::Warn => "warn", Enforcement::Approve => "approve" }) "): " (m) }
                }
            }
            @if !runner_verdicts.is_empty() {
                p { "Runner, on the real diff:" }
                pre { @for e in &runner_verdicts { (e.spec.details.as_ref().map(pretty).unwrap_or_default()) "\n" } }
            }
        }
        h2 { "The runner's audit of the diff" }
        @if runner_diffs.is_empty() {
            p.muted { "The runner has not planned this yet." }
        } @else {
            @for e in &runner_diffs {
                @let details = e.spec.details.clone().unwrap_or_default();
                @let text = |key: &str| details.get(key).and_then(|v| v.as_str()).unwrap_or("—").to_owned();
                @if let Some(summary) = details.get("summary") {
                    p.muted { "event " (e.spec.sequence) " · " (text("executor")) " · "
                        (if details.get("changes").and_then(serde_json::Value::as_bool).unwrap_or(false) { "changes" } else { "no changes" }) }
                    pre #runner-diff { (summary.as_str().map(str::to_owned).unwrap_or_else(|| pretty(summary))) }
                } @else if details.get("awaitingApproval").is_some() {
                    p.muted { "event " (e.spec.sequence) " · asked for a person's approval of the diff " code { (text("diffHash")) } }
                } @else if details.get("applied") == Some(&serde_json::Value::Bool(false)) {
                    p.muted { "event " (e.spec.sequence) " · did not apply the approved diff " code { (text("approvedDiff")) } ": " (text("reason")) }
                } @else {
                    p.muted { "event " (e.spec.sequence) }
                    pre { (pretty(&details)) }
                }
            }
        }
        h2 { "Rendered desired state" }
        pre #desired-state { (spec.desired_state.as_ref().map(yaml).unwrap_or_else(|| "—".into())) }
        h2 { "Log" }
        pre #log { (status.log.as_deref().unwrap_or("(nothing yet)")) }
    }))
}
