//! The fleet: a matrix of installs × components, each cell coloured by its
//! [`CellState`], with counts, filters (app, label, state), search, and live updates
//! from `/ui/events`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;

use super::layout::{api_error, error_page, page as shell};
use crate::Dashboard;
use crate::cells::{self, CellState, Fleet, Row};
use crate::events::load_fleet;
use crate::session::Session;
use outpost_apiserver::selectors::LabelSelector;

/// The fleet page's filters (`GET` form fields).
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    /// Only installs of this App.
    #[serde(default)]
    pub app: String,
    /// A label selector on Installs (`tier=gold,region!=us-east-1`).
    #[serde(default)]
    pub label: String,
    /// Only installs with a cell in this state (its slug).
    #[serde(default)]
    pub state: String,
    /// Free text: install, namespace, App or component names containing it.
    #[serde(default)]
    pub q: String,
}

/// Applied filters.
struct Filter {
    app: Option<String>,
    labels: Option<LabelSelector>,
    state: Option<CellState>,
    q: Option<String>,
}

impl Filter {
    fn parse(f: &Filters) -> Result<Filter, String> {
        let non_empty = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let labels = non_empty(&f.label)
            .map(|l| {
                LabelSelector::parse(&l).map_err(|e| format!("invalid label selector {l:?}: {e}"))
            })
            .transpose()?;
        let state = non_empty(&f.state)
            .map(|s| {
                CellState::from_slug(&s).ok_or_else(|| {
                    let known: Vec<&str> = CellState::ALL.iter().map(|s| s.slug()).collect();
                    format!("unknown state {s:?}: one of {}", known.join(", "))
                })
            })
            .transpose()?;
        Ok(Filter {
            app: non_empty(&f.app),
            labels,
            state,
            q: non_empty(&f.q).map(|q| q.to_lowercase()),
        })
    }

    fn keeps(&self, row: &Row) -> bool {
        self.app.as_ref().is_none_or(|a| *a == row.app)
            && self.labels.as_ref().is_none_or(|l| l.matches(&row.labels))
            && self
                .state
                .is_none_or(|s| row.cells.values().any(|c| c.state == s))
            && self.q.as_ref().is_none_or(|q| {
                row.name.to_lowercase().contains(q)
                    || row.namespace.to_lowercase().contains(q)
                    || row.app.to_lowercase().contains(q)
                    || row.cells.keys().any(|c| c.to_lowercase().contains(q))
            })
    }
}

/// `GET /ui`.
pub async fn page(
    session: Session,
    State(state): State<Arc<Dashboard>>,
    Query(filters): Query<Filters>,
) -> Response {
    let filter = match Filter::parse(&filters) {
        Ok(f) => f,
        Err(message) => return error_page(Some(&session), StatusCode::BAD_REQUEST, &message),
    };
    let objects = match load_fleet(&state, &session.user).await {
        Ok(o) => o,
        Err(err) => return api_error(Some(&session), &err),
    };
    let fleet = cells::fleet(&objects, &Time(jiff::Timestamp::now()));
    let apps: std::collections::BTreeSet<&str> =
        fleet.rows.iter().map(|r| r.app.as_str()).collect();
    let body = html! {
        h1 { span.live-dot title="live updates" {} "Fleet" }
        (legend(&fleet))
        form.filters method="get" action="/ui" {
            label { "Search" input type="search" name="q" value=(filters.q) placeholder="install, app, component"; }
            label { "App" select name="app" {
                option value="" { "all" }
                @for app in &apps { option value=(app) selected[filters.app == *app] { (app) } }
            } }
            label { "Labels" input type="text" name="label" value=(filters.label) placeholder="tier=gold"; }
            label { "State" select name="state" {
                option value="" { "any" }
                @for s in CellState::ALL { option value=(s.slug()) selected[filters.state == s.slug()] { (s.label()) } }
            } }
            button type="submit" { "Filter" }
            a href="/ui" { "clear" }
        }
        (matrix(&fleet, &filter))
        script { (PreEscaped(LIVE)) }
    };
    shell("Fleet", "fleet", Some(&session), body).into_response()
}

fn legend(fleet: &Fleet) -> Markup {
    let counts = fleet.counts();
    html! {
        div.legend #counts {
            @for s in CellState::ALL {
                a class={ "cell s-" (s.slug()) } href={ "/ui?state=" (s.slug()) } {
                    (s.label()) b data-count=(s.slug()) { (counts.get(&s).copied().unwrap_or(0)) }
                }
            }
        }
    }
}

fn matrix(fleet: &Fleet, filter: &Filter) -> Markup {
    let rows: Vec<&Row> = fleet.rows.iter().filter(|r| filter.keeps(r)).collect();
    let columns: Vec<&String> = fleet
        .columns
        .iter()
        .filter(|c| rows.iter().any(|r| r.cells.contains_key(*c)))
        .collect();
    html! {
        @if rows.is_empty() {
            div.card #empty {
                @if fleet.rows.is_empty() {
                    "No installs yet: apply one with " code { "kubectl apply -f install.yaml" } "."
                } @else {
                    "No install matches these filters."
                }
            }
        } @else {
            table #fleet {
                thead { tr {
                    th { "Install" } th { "App" } th { "Phase" } th { "Runner" }
                    @for c in &columns { th { (c) } }
                } }
                tbody {
                    @for row in &rows {
                        tr data-install=(row.id()) {
                            td { a href={ "/ui/installs/" (row.namespace) "/" (row.name) } { (row.id()) } }
                            td { (row.app) }
                            td data-phase=(row.id()) { (row.phase) }
                            td data-runner=(row.id()) { (if row.runner_online { "online" } else { "offline" }) }
                            @for c in &columns {
                                td {
                                    @if let Some(cell) = row.cells.get(*c) {
                                        a class={ "cell s-" (cell.state.slug()) }
                                            href={ "/ui/installs/" (row.namespace) "/" (row.name) "#component-" (c) }
                                            data-cell=(row.cell_id(c)) data-state=(cell.state.slug()) { (cell.text) }
                                    } @else {
                                        span.muted { "—" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Applies `fleet` events from `/ui/events` to the page: cells, counts, phases, runners.
const LIVE: &str = r#"
(function () {
  var es = new EventSource('/ui/events');
  es.addEventListener('fleet', function (e) {
    var d = JSON.parse(e.data);
    document.body.dataset.live = 'connected';
    Object.keys(d.cells).forEach(function (id) {
      var c = d.cells[id];
      var el = document.querySelector('[data-cell="' + CSS.escape(id) + '"]');
      if (!el || el.dataset.state === c.state && el.textContent === c.text) return;
      el.className = 'cell s-' + c.state;
      el.dataset.state = c.state;
      el.textContent = c.text;
    });
    document.querySelectorAll('[data-count]').forEach(function (el) {
      el.textContent = d.counts[el.dataset.count] || 0;
    });
    Object.keys(d.installs).forEach(function (id) {
      var i = d.installs[id];
      var p = document.querySelector('[data-phase="' + CSS.escape(id) + '"]');
      if (p) p.textContent = i.phase;
      var r = document.querySelector('[data-runner="' + CSS.escape(id) + '"]');
      if (r) r.textContent = i.runnerOnline ? 'online' : 'offline';
    });
  });
  es.onerror = function () { document.body.dataset.live = 'reconnecting'; };
})();
"#;
