//! One install: phase, runner health and version, the roles the customer's stack
//! enables, components with their deployed release, the timeline of Plans, drift with a
//! side-by-side field diff, and the audit log with its verification badge.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use maud::{Markup, html};
use outpost_api::audit_chain::{Source, Trust, verify};
use outpost_api::{
    Action, App, AuditEvent, Component, DriftReport, EntityKind, EntityRef, Install, InstallStack,
    Plan, Runner, TriggerKind,
};

use super::layout::{object_page, short, short_hash, when};
use super::plan::{duration, phase_pill, role_text, verdict_pills};
use crate::Dashboard;
use crate::cells::{self, FleetObjects};
use crate::data::{get, list_in, list_of_install};
use crate::session::Session;
use outpost_apiserver::status::ApiError;

/// How many audit events the page lists (the badge verifies all of them).
const AUDIT_ROWS: usize = 50;

/// `GET /ui/installs/{namespace}/{name}`.
pub async fn page(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let rendered = render(&session, &state, &namespace, &name).await;
    let title = format!("{namespace}/{name}");
    object_page(
        &session,
        (&title, "fleet"),
        ("installs", &namespace, &name),
        rendered,
    )
}

fn of<'a, T>(
    items: &'a [T],
    namespace: &str,
    ns: impl Fn(&T) -> Option<&String>,
) -> impl Iterator<Item = &'a T> {
    let namespace = namespace.to_owned();
    items
        .iter()
        .filter(move |i| ns(i).map(String::as_str) == Some(namespace.as_str()))
}

async fn render(
    session: &Session,
    state: &Dashboard,
    namespace: &str,
    name: &str,
) -> Result<Option<Markup>, ApiError> {
    let user = &session.user;
    let Some(install) = get::<Install>(state, user, "installs", namespace, name).await? else {
        return Ok(None);
    };
    // Everything else by the install index, or (Apps, Components, Actions: the App's
    // definition) in the namespace: never every object of the fleet.
    let app = &install.spec.app;
    let objects = FleetObjects {
        apps: list_in::<App>(state, user, "apps", namespace)?
            .into_iter()
            .filter(|a| a.metadata.name.as_ref() == Some(app))
            .collect(),
        components: list_in::<Component>(state, user, "components", namespace)?
            .into_iter()
            .filter(|c| &c.spec.app == app)
            .collect(),
        plans: list_of_install(state, user, "plans", namespace, name)?,
        runners: list_of_install(state, user, "runners", namespace, name)?,
        drift: list_of_install(state, user, "driftreports", namespace, name)?,
        installs: vec![install],
    };
    let install = &objects.installs[0];
    let stacks: Vec<InstallStack> = list_of_install(state, user, "installstacks", namespace, name)?;
    let audit: Vec<AuditEvent> = list_of_install(state, user, "auditevents", namespace, name)?;
    let all_actions: Vec<Action> = list_in(state, user, "actions", namespace)?;
    let mut actions: Vec<&Action> = of(&all_actions, namespace, |a| a.metadata.namespace.as_ref())
        .filter(|a| {
            a.spec.app == install.spec.app
                && a.spec
                    .triggers
                    .iter()
                    .any(|t| t.kind() == Some(TriggerKind::Manual))
        })
        .collect();
    actions.sort_by_key(|a| a.metadata.name.clone());
    let now = Time(jiff::Timestamp::now());
    let runners: Vec<&Runner> = of(&objects.runners, namespace, |r| {
        r.metadata.namespace.as_ref()
    })
    .filter(|r| r.spec.install == name)
    .collect();
    let stack =
        of(&stacks, namespace, |s| s.metadata.namespace.as_ref()).find(|s| s.spec.install == name);
    let mut plans: Vec<&Plan> = of(&objects.plans, namespace, |p| p.metadata.namespace.as_ref())
        .filter(|p| p.spec.install == name)
        .collect();
    // Plans waiting for a person come first, then the newest.
    plans.sort_by(|a, b| {
        let created = |p: &Plan| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let waits = |p: &Plan| {
            p.status.as_ref().and_then(|s| s.phase)
                == Some(outpost_api::PlanPhase::AwaitingApproval)
        };
        waits(b)
            .cmp(&waits(a))
            .then_with(|| created(b).cmp(&created(a)))
            .then_with(|| b.metadata.name.cmp(&a.metadata.name))
    });
    let mut drift: Vec<&DriftReport> =
        of(&objects.drift, namespace, |d| d.metadata.namespace.as_ref())
            .filter(|d| d.spec.install == name)
            .collect();
    drift.sort_by_key(|d| (d.spec.in_sync, d.spec.entity.name.clone()));
    let mut events: Vec<&AuditEvent> = of(&audit, namespace, |e| e.metadata.namespace.as_ref())
        .filter(|e| e.spec.install == name)
        .collect();
    events.sort_by_key(|e| e.spec.sequence);
    let online = cells::runner_online(&objects, install, &now);
    let fleet = cells::fleet(&objects, &now);
    let row = fleet
        .rows
        .iter()
        .find(|r| r.namespace == namespace && r.name == name);
    let status = install.status.clone().unwrap_or_default();
    let newest_runner = runners.iter().max_by_key(|r| {
        r.status
            .as_ref()
            .and_then(|s| s.last_heartbeat.as_ref())
            .map(|t| t.0)
    });
    Ok(Some(html! {
        h1 { "Install " (namespace) "/" (name) }
        div.card {
            dl.kv {
                dt { "App" } dd { (install.spec.app) }
                dt { "Phase" } dd #phase { span.pill { (status.phase.map_or("Pending".into(), |p| format!("{p:?}"))) } }
                dt { "Cloud" } dd { (format!("{:?}", install.spec.cloud.provider).to_lowercase()) " " (install.spec.cloud.account_id) " " (install.spec.cloud.region) }
                dt { "Approval" } dd { (format!("{:?}", install.spec.approval_mode())) }
                dt { "Runner" } dd #runner {
                    @if online { span.pill.ok { "online" } } @else { span.pill.bad { "offline" } }
                    @if let Some(r) = newest_runner {
                        " " (r.metadata.name.as_deref().unwrap_or_default()) " · version " code { (r.spec.version) }
                        @if let Some(beat) = r.status.as_ref().and_then(|s| s.last_heartbeat.as_ref()) {
                            " · last heartbeat " (when(beat, &now))
                        }
                    } @else { " no runner registered" }
                }
                dt { "Enabled roles" } dd #roles {
                    @match stack.and_then(|s| s.status.as_ref()) {
                        Some(s) if !s.enabled_roles.is_empty() => {
                            @for role in &s.enabled_roles { span.pill.info { (role) } " " }
                            @if let Some(at) = &s.reported_at { span.muted { " reported " (when(at, &now)) } }
                        }
                        _ => {
                            @if let Some(r) = newest_runner.and_then(|r| r.status.as_ref()).filter(|s| !s.enabled_roles.is_empty()) {
                                @for role in &r.enabled_roles { span.pill.info { (role) } " " }
                                span.muted { " (as the runner reports them)" }
                            } @else { span.muted { "not reported by the customer's stack yet" } }
                        }
                    }
                }
            }
        }
        h2 { "Components" }
        table #components {
            thead { tr { th { "Component" } th { "State" } th { "Phase" } th { "Release" } th { "Latest plan" } } }
            tbody {
                @if let Some(row) = row {
                    @for (component, cell) in &row.cells {
                        @let st = status.components.iter().find(|c| &c.name == component);
                        tr id={ "component-" (component) } {
                            td { (component) }
                            td { span class={ "cell s-" (cell.state.slug()) } data-state=(cell.state.slug()) { (cell.text) } }
                            td { (st.and_then(|s| s.phase).map_or("—".into(), |p| format!("{p:?}"))) }
                            td { code { (st.and_then(|s| s.release.as_deref()).map_or("—", short_hash)) } }
                            td { @if let Some(plan) = &cell.plan { a href={ "/ui/plans/" (namespace) "/" (plan) } { (plan) } } @else { "—" } }
                        }
                    }
                }
            }
        }
        h2 { "Drift" }
        @if drift.is_empty() {
            p.muted { "No drift reports yet: the runner reports after a component's first successful deploy." }
        }
        @for report in &drift { (drift_card(report, namespace, &now)) }
        h2 { "Actions" }
        div.card #trigger {
            @if actions.is_empty() {
                p.muted { "App " (install.spec.app) " has no action with a manual trigger." }
            } @else {
                form.actions method="post" action={ "/ui/installs/" (namespace) "/" (name) "/trigger" } {
                    input type="hidden" name="csrf" value=(session.csrf());
                    select #trigger-action name="action" {
                        @for a in &actions {
                            @let action = a.metadata.name.as_deref().unwrap_or_default();
                            option value=(action) { (action) @if let Some(d) = &a.spec.description { " — " (d) } }
                        }
                    }
                    input #trigger-role type="text" name="role" placeholder="role override (optional)";
                    button #trigger-run type="submit" { "Trigger" }
                }
                p.muted {
                    "Runs the action as a Plan through the gate (approval mode "
                    (format!("{:?}", install.spec.approval_mode()).to_lowercase())
                    "); a role override is step 1 of the role precedence chain and must be a role the App declares."
                    @if !session.is_admin() { " You are logged in as a viewer: only admins may trigger actions." }
                }
            }
        }
        h2 { "Plans" }
        table #plans {
            thead { tr { th { "Created" } th { "Plan" } th { "Operation" } th { "Entity" } th { "Role (level)" } th { "Policies" } th { "Changes" } th { "Duration" } th { "Result" } } }
            tbody {
                @for plan in &plans {
                    tr {
                        td { (plan.metadata.creation_timestamp.as_ref().map(|t| when(t, &now)).unwrap_or_default()) }
                        td { a href={ "/ui/plans/" (namespace) "/" (plan.metadata.name.as_deref().unwrap_or_default()) } { (plan.metadata.name.as_deref().unwrap_or_default()) } }
                        td { (plan.spec.operation) }
                        td { (entity_text(&plan.spec.entity)) }
                        td { (role_text(plan)) }
                        td { (verdict_pills(plan.status.as_ref().map(|s| &s.verdicts[..]).unwrap_or_default())) }
                        td { (plan.status.as_ref().and_then(|s| s.diff.as_ref()).map_or("—", |d| d.short.as_str())) }
                        td { (duration(plan)) }
                        td { (phase_pill(plan)) }
                    }
                }
            }
        }
        h2 { "Audit log" }
        (audit_card(name, &runners, &events, &now))
    }))
}

/// `component web`, `action migrate`, `sandbox`.
pub fn entity_text(entity: &EntityRef) -> String {
    match entity.kind {
        EntityKind::Sandbox => "sandbox".into(),
        EntityKind::Component => format!("component {}", entity.name),
        EntityKind::Action => format!("action {}", entity.name),
    }
}

fn drift_card(report: &DriftReport, namespace: &str, now: &Time) -> Markup {
    let spec = &report.spec;
    html! {
        div.card id={ "drift-" (spec.entity.name) } data-in-sync=(spec.in_sync) {
            p {
                b { (entity_text(&spec.entity)) } " "
                @if spec.in_sync { span.pill.ok { "in sync" } } @else { span.pill.warn { "drifted" } }
                span.muted {
                    " observed " (when(&spec.observed_at, now))
                    @if let Some(since) = &spec.drifted_since { " · drifted since " (when(since, now)) }
                    @if let Some(plan) = &spec.plan { " · baseline " a href={ "/ui/plans/" (namespace) "/" (plan) } { (plan) } }
                }
            }
            @if !spec.diff.is_empty() {
                table.diff {
                    thead { tr { th { "Field" } th { "Change" } th { "Applied" } th { "Live" } } }
                    tbody {
                        @for entry in &spec.diff {
                            tr {
                                td { (entry.path) }
                                td { (format!("{:?}", entry.op).to_lowercase()) }
                                td.desired { (short(entry.desired.as_ref())) }
                                td.live { (short(entry.live.as_ref())) }
                            }
                        }
                    }
                }
            }
            @if !spec.verdicts.is_empty() {
                p { "Policies: " (verdict_pills(&spec.verdicts)) }
            }
        }
    }
}

fn audit_card(install: &str, runners: &[&Runner], events: &[&AuditEvent], now: &Time) -> Markup {
    // The dashboard is the control plane's view: it checks against the Runner objects'
    // keys. The customer's own trust anchor is `outpost audit verify --key`.
    let keys: Vec<String> = runners.iter().map(|r| r.spec.public_key.clone()).collect();
    let names: Vec<String> = events
        .iter()
        .map(|e| e.metadata.name.clone().unwrap_or_default())
        .collect();
    let specs: Vec<_> = events.iter().map(|e| e.spec.clone()).collect();
    let trust = Trust {
        keys: &keys,
        checkpoint: None,
    };
    let verdict = verify(install, &specs, Source::Objects(&names), &trust);
    html! {
        div.card #audit {
            p {
                @match &verdict {
                    Ok(v) => {
                        span.pill.ok #audit-badge data-verified="true" { "verified" } " " (v.events) " events: hash chain and signatures by the registered runner keys check out"
                        @if !v.flags.is_empty() { ul { @for f in &v.flags { li { "FLAGGED " (f) } } } }
                    }
                    Err(failures) => {
                        span.pill.bad #audit-badge data-verified="false" { "broken" } " " (failures.len()) " failure(s)"
                        ul { @for f in failures { li { (f) } } }
                    }
                }
            }
            @if !events.is_empty() {
                table {
                    thead { tr { th { "Seq" } th { "Time" } th { "Type" } th { "Plan" } th { "Entity" } th { "Role" } } }
                    tbody {
                        @for e in events.iter().rev().take(AUDIT_ROWS) {
                            tr {
                                td.num { (e.spec.sequence) }
                                td { (when(&e.spec.timestamp, now)) }
                                td { (serde_json::to_value(e.spec.type_).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()) }
                                td { (e.spec.plan.as_deref().unwrap_or("—")) }
                                td { (e.spec.entity.as_ref().map(|e| e.name.as_str()).unwrap_or("—")) }
                                td { (e.spec.role.as_deref().unwrap_or("—")) }
                            }
                        }
                    }
                }
                @if events.len() > AUDIT_ROWS { p.muted { "the newest " (AUDIT_ROWS) " of " (events.len()) " events" } }
            }
        }
    }
}
