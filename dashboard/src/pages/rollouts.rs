//! Rollouts: every Rollout with its phase and progress, and one Rollout's waves with
//! each install's state in it (pending, moving, held, done, failed, denied), as the
//! Rollout controller records them in `status.waves[].progress`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use maud::{Markup, html};
use outpost_api::{
    Install, InstallProgress, InstallProgressState, Rollout, RolloutPhase, WaveStatus,
};

use super::layout::{age, api_error, object_page, page as shell, short, short_hash, when};
use crate::Dashboard;
use crate::data::{get, list};
use crate::session::Session;
use outpost_apiserver::status::ApiError;

/// `GET /ui/rollouts`.
pub async fn list_page(session: Session, State(state): State<Arc<Dashboard>>) -> Response {
    let mut rollouts = match list::<Rollout>(&state, &session.user, "rollouts").await {
        Ok(r) => r,
        Err(err) => return api_error(Some(&session), &err),
    };
    // Newest first.
    rollouts.sort_by(|a, b| {
        let created = |r: &Rollout| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(b)
            .cmp(&created(a))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let now = Time(jiff::Timestamp::now());
    let body = html! {
        h1 { "Rollouts" }
        @if rollouts.is_empty() {
            div.card #empty { "No rollouts yet: create one with " code { "kubectl apply -f rollout.yaml" } "." }
        } @else {
            table #rollouts {
                thead { tr {
                    th { "Rollout" } th { "App" } th { "Moves" } th { "Phase" } th { "Wave" }
                    th { "Updated" } th { "Halt" } th { "Age" }
                } }
                tbody {
                    @for rollout in &rollouts {
                        @let key = id(rollout);
                        @let status = rollout.status.clone().unwrap_or_default();
                        tr data-rollout=(key) {
                            td { a href={ "/ui/rollouts/" (key) } { (key) } }
                            td { (rollout.spec.app) }
                            td { (moves(rollout)) }
                            td data-phase=(phase_name(rollout)) { (phase_pill(rollout)) }
                            td data-wave=(format!("{}/{}", status.current_wave, status.wave_count)) { (status.current_wave) " of " (status.wave_count) }
                            td data-updated=(format!("{}/{}", status.updated, status.total)) { (progress_bar(status.updated, status.total)) }
                            td {
                                @if let Some(halt) = &status.halt {
                                    span.pill.bad title=(halt.message) { (halt.reason) }
                                } @else { span.muted { "—" } }
                            }
                            td { (rollout.metadata.creation_timestamp.as_ref().map(|t| age(t, &now)).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    };
    shell("Rollouts", "rollouts", Some(&session), body).into_response()
}

/// `GET /ui/rollouts/{namespace}/{name}`.
pub async fn page(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let rendered = render(&session, &state, &namespace, &name).await;
    let title = format!("rollout {namespace}/{name}");
    object_page(
        &session,
        (&title, "rollouts"),
        ("rollouts", &namespace, &name),
        rendered,
    )
}

async fn render(
    session: &Session,
    state: &Dashboard,
    namespace: &str,
    name: &str,
) -> Result<Option<Markup>, ApiError> {
    let Some(rollout) = get::<Rollout>(state, &session.user, "rollouts", namespace, name).await?
    else {
        return Ok(None);
    };
    let rollout = &rollout;
    let installs: Vec<Install> = list(state, &session.user, "installs").await?;
    let order_value = |install: &str| -> Option<String> {
        let label = rollout.spec.order_by.as_deref()?;
        installs
            .iter()
            .find(|i| {
                i.metadata.namespace.as_deref() == Some(namespace)
                    && i.metadata.name.as_deref() == Some(install)
            })?
            .metadata
            .labels
            .as_ref()?
            .get(label)
            .map(|v| format!("{label}={v}"))
    };
    let now = Time(jiff::Timestamp::now());
    let spec = &rollout.spec;
    let status = rollout.status.clone().unwrap_or_default();
    let release = status.release.as_ref().or(spec.release.as_ref());
    Ok(Some(html! {
        h1 { "Rollout " (namespace) "/" (name) }
        div.card {
            dl.kv {
                dt { "App" } dd { (spec.app) }
                dt { "Moves" } dd #moves { (what(rollout)) }
                dt { "Release" } dd { @if let Some(r) = release { code title=(r) { (short_hash(r)) } } @else { span.muted { "the App's, when it starts" } } }
                dt { "Phase" } dd #phase data-phase=(phase_name(rollout)) { (phase_pill(rollout)) }
                dt { "Wave" } dd #wave { (status.current_wave) " of " (status.wave_count) }
                dt { "Updated" } dd #updated { (progress_bar(status.updated, status.total)) }
                dt { "Waves" } dd {
                    (wave_size_text(spec.wave_size.as_ref()))
                    @if let Some(label) = &spec.order_by { ", ordered by " code { (label) } }
                    ", " (spec.pause_seconds()) " s apart, at most "
                    (spec.max_failures.as_ref().map_or("0".into(), int_or_string)) " failed or denied per wave"
                }
            }
        }
        @if let Some(halt) = &status.halt {
            div.card.error #halt {
                p { span.pill.bad { (halt.reason) } " wave " (halt.wave) " · " (when(&halt.at, &now)) }
                p { (halt.message) }
                p.muted { "Fix the installs (e.g. delete a failed Plan so it is planned again) or raise spec.maxFailures, then " code { "outpost rollout resume " (name) } "." }
            }
        }
        h2 { "Waves" }
        (legend())
        @for (i, wave) in status.waves.iter().enumerate() {
            (wave_card(i + 1, wave, namespace, &order_value, &now))
        }
        @if status.waves.is_empty() { p.muted { "The waves are formed when the rollout starts." } }
    }))
}

/// One wave: when it started and completed, its counts, and each install's state.
fn wave_card(
    number: usize,
    wave: &WaveStatus,
    namespace: &str,
    order_value: &impl Fn(&str) -> Option<String>,
    now: &Time,
) -> Markup {
    let progress: Vec<InstallProgress> = if wave.progress.is_empty() {
        // Recorded before per-install progress existed: the names only.
        wave.installs
            .iter()
            .map(|i| InstallProgress {
                install: i.clone(),
                state: InstallProgressState::Pending,
                message: None,
            })
            .collect()
    } else {
        wave.progress.clone()
    };
    html! {
        div.card.wave id={ "wave-" (number) } {
            p {
                b { "Wave " (number) } " "
                @if wave.completed_at.is_some() { span.pill.ok { "completed" } }
                @else if wave.started_at.is_some() { span.pill.info { "in progress" } }
                @else { span.pill { "not started" } }
                span.muted {
                    " " (count(wave.installs.len(), "install")) " · "
                    (wave.succeeded) " done · " (wave.failed) " failed · " (wave.denied) " denied · " (wave.pending) " pending"
                    @if let Some(t) = &wave.started_at { " · started " (when(t, now)) }
                    @if let Some(t) = &wave.completed_at { " · completed " (when(t, now)) }
                }
            }
            table {
                thead { tr { th { "Install" } th { "Order" } th { "State" } th { "Why" } } }
                tbody {
                    @for p in &progress {
                        tr data-install=(p.install) {
                            td { a href={ "/ui/installs/" (namespace) "/" (p.install) } { (p.install) } }
                            td.muted { (order_value(&p.install).unwrap_or_default()) }
                            td { (state_pill(p.state)) }
                            td { (p.message.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

/// What each state means, as pills.
fn legend() -> Markup {
    use InstallProgressState::*;
    html! {
        p.muted {
            @for state in [Pending, Moving, Held, Done, Failed, Denied] { (state_pill(state)) " " }
            "· pending: its wave has not started; moving: its Plans are under way; held: a Plan awaits approval or the install's maintenance window"
        }
    }
}

fn state_pill(state: InstallProgressState) -> Markup {
    use InstallProgressState::*;
    let (class, text) = match state {
        Pending => ("pill", "pending"),
        Moving => ("pill info", "moving"),
        Held => ("pill warn", "held"),
        Done => ("pill ok", "done"),
        Failed => ("pill bad", "failed"),
        Denied => ("pill bad", "denied"),
        Gone => ("pill", "deleted"),
    };
    html! { span class=(class) data-state=(text) { (text) } }
}

/// `NAMESPACE/NAME`.
fn id(rollout: &Rollout) -> String {
    format!(
        "{}/{}",
        rollout.metadata.namespace.as_deref().unwrap_or_default(),
        rollout.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `component web` or `whole release`.
fn what(rollout: &Rollout) -> Markup {
    let component = rollout.status.as_ref().and_then(|s| s.component.as_ref());
    html! {
        @if let Some(c) = component.or(rollout.spec.component.as_ref()) {
            "component " b { (c) }
        } @else { "whole release" }
    }
}

/// [`what`] it moves, and the release's short hash once fixed.
fn moves(rollout: &Rollout) -> Markup {
    let release = rollout.status.as_ref().and_then(|s| s.release.as_ref());
    html! {
        (what(rollout))
        @if let Some(r) = release.or(rollout.spec.release.as_ref()) { " " code title=(r) { (short_hash(r)) } }
    }
}

/// `1 install each`, `3 installs each`, `25% of the installs each`.
fn wave_size_text(size: Option<&IntOrString>) -> String {
    let size = size.map_or("1".into(), int_or_string);
    match size.strip_suffix('%') {
        Some(percent) => format!("{percent}% of the installs each"),
        None => format!("{} each", count(size.parse().unwrap_or(0), "install")),
    }
}

/// `1 install`, `3 installs`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn phase_name(rollout: &Rollout) -> String {
    let phase = rollout.status.as_ref().and_then(|s| s.phase);
    phase.map_or("Pending".into(), |p| format!("{p:?}"))
}

fn phase_pill(rollout: &Rollout) -> Markup {
    let class = match rollout.status.as_ref().and_then(|s| s.phase) {
        Some(RolloutPhase::Completed) => "pill ok",
        Some(RolloutPhase::Halted | RolloutPhase::Aborted) => "pill bad",
        Some(RolloutPhase::Paused) => "pill warn",
        Some(RolloutPhase::Progressing) => "pill info",
        _ => "pill",
    };
    html! { span class=(class) { (phase_name(rollout)) } }
}

/// `3/6` with a bar.
fn progress_bar(updated: u32, total: u32) -> Markup {
    let percent = (updated * 100).checked_div(total).unwrap_or(0);
    html! {
        span.bar title={ (percent) "%" } { span style={ "width:" (percent) "%" } {} }
        " " (updated) "/" (total)
    }
}

/// `2` or `25%`.
fn int_or_string(value: &IntOrString) -> String {
    short(serde_json::to_value(value).ok().as_ref())
}
