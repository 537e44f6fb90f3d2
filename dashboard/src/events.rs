//! `GET /ui/events`: server-sent events that keep the fleet page live.
//!
//! Every stream reads the one live copy of the fleet ([`FleetFeed`](super::fleet_feed::FleetFeed)):
//! when a new snapshot is published (after a burst of changes, or when the clock changed
//! the matrix), each stream sends the matrix its user may see as one `fleet` event, if it
//! changed: `{"cells": {"NS/INSTALL/COMPONENT": {"state", "text"}}, "counts": {STATE:
//! N}, "installs": {"NS/INSTALL": {"phase", "runnerOnline"}}}`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::cells::{self, FleetObjects};
use super::data::{list, list_access};
use super::fleet_feed::{CLOCK, KINDS};
use super::pages::layout::api_error;
use super::session::Session;
use crate::Dashboard;
use outpost_apiserver::auth::{Access, User};
use outpost_apiserver::status::ApiError;

/// What the fleet matrix is computed from, for `user` (the fleet page: read once).
pub async fn load_fleet(state: &Dashboard, user: &User) -> Result<FleetObjects, ApiError> {
    Ok(FleetObjects {
        installs: list(state, user, "installs").await?,
        apps: list(state, user, "apps").await?,
        components: list(state, user, "components").await?,
        plans: list(state, user, "plans").await?,
        runners: list(state, user, "runners").await?,
        drift: list(state, user, "driftreports").await?,
    })
}

/// The `fleet` event's data.
pub fn fleet_payload(fleet: &cells::Fleet) -> Value {
    let mut cells = serde_json::Map::new();
    let mut installs = serde_json::Map::new();
    for row in &fleet.rows {
        for (component, cell) in &row.cells {
            cells.insert(
                row.cell_id(component),
                json!({"state": cell.state.slug(), "text": cell.text}),
            );
        }
        installs.insert(
            row.id(),
            json!({"phase": row.phase, "runnerOnline": row.runner_online}),
        );
    }
    let counts: serde_json::Map<String, Value> = fleet
        .counts()
        .into_iter()
        .map(|(s, n)| (s.slug().to_owned(), json!(n)))
        .collect();
    json!({"cells": cells, "counts": counts, "installs": installs})
}

/// `GET /ui/events`.
pub async fn fleet_events(session: Session, State(state): State<Arc<Dashboard>>) -> Response {
    // Authorized as a list of each kind, as the fleet page is.
    let access = match KINDS
        .into_iter()
        .map(|plural| list_access(&state, &session.user, plural))
        .collect::<Result<Vec<Access>, _>>()
    {
        Ok(access) => access,
        Err(err) => return api_error(Some(&session), &err),
    };
    let share = match state.fleet_feed.join(&state).await {
        Ok(share) => share,
        Err(err) => return api_error(Some(&session), &err),
    };
    // A user who may not see everything gets a matrix of their own, which ages with a
    // clock of its own; everyone else reads the shared one.
    let own_clock = access.iter().any(|a| *a != Access::Full);
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(16);
    tokio::spawn(async move {
        let _open = state.fleet_feed.stream_opened();
        let mut snapshots = share.subscribe();
        let mut last: Option<String> = None;
        let mut clock = tokio::time::interval_at(tokio::time::Instant::now() + CLOCK, CLOCK);
        loop {
            let snapshot = snapshots.borrow_and_update().clone();
            let payload = snapshot.payload_for(&access, &Time(jiff::Timestamp::now()));
            if last.as_deref() != Some(&payload) {
                if tx
                    .send(Ok(Event::default().event("fleet").data(payload.as_ref())))
                    .await
                    .is_err()
                {
                    return;
                }
                last = Some(payload.into_owned());
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = clock.tick(), if own_clock => {}
                changed = snapshots.changed() => {
                    // The feed stopped (the caches restarted): the browser reconnects.
                    if changed.is_err() { return }
                }
            }
        }
    });
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}
