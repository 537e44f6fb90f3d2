//! `GET /ui/events`: server-sent events that keep the fleet page live.
//!
//! Like an informer: subscribe to the watch caches of the kinds the matrix is made of,
//! list them once, then apply each cached watch event to that copy (no polling of the
//! store). After every burst of changes, and every few seconds (a runner goes offline
//! without any event), the matrix is recomputed and, when it changed, sent as one
//! `fleet` event: `{"cells": {"NS/INSTALL/COMPONENT": {"state", "text"}}, "counts":
//! {STATE: N}, "installs": {"NS/INSTALL": {"phase", "runnerOnline"}}}`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::ReceiverStream;

use super::cells::{self, FleetObjects};
use super::data::{decode_all, list_access, list_values, resource_type, visible};
use super::pages::layout::api_error;
use super::session::Session;
use crate::auth::{Access, User};
use crate::selectors::Selectable as _;
use crate::server::ServerState;
use crate::status::ApiError;
use crate::storage::Revision;
use crate::watch_cache::CachedEvent;

/// The kinds the fleet matrix is computed from.
const KINDS: [&str; 6] = [
    "installs",
    "apps",
    "components",
    "plans",
    "runners",
    "driftreports",
];

/// How often the matrix is recomputed without any change (runner heartbeats age).
const CLOCK: Duration = Duration::from_secs(5);

/// The user's copy of one kind.
struct Kind {
    plural: &'static str,
    access: Access,
    objects: BTreeMap<String, Value>,
    /// Changes up to this revision are in `objects`.
    seen: Revision,
}

impl Kind {
    async fn load(
        state: &ServerState,
        user: &User,
        plural: &'static str,
    ) -> Result<Kind, ApiError> {
        let access = list_access(state, user, plural)?;
        let (values, seen) = list_values(state, user, plural).await?;
        Ok(Kind {
            plural,
            access,
            objects: values.into_iter().map(|v| (object_key(&v), v)).collect(),
            seen,
        })
    }

    fn apply(&mut self, event: &CachedEvent) {
        if event.revision <= self.seen {
            return;
        }
        self.seen = event.revision;
        let object = &event.object;
        let key = format!("{}/{}", object.namespace(), object.field("metadata.name"));
        if event.deleted || !visible(&self.access, object.as_ref()) {
            self.objects.remove(&key);
        } else if let Ok(value) = object.value() {
            self.objects.insert(key, value);
        }
    }

    fn decode<K: serde::de::DeserializeOwned>(&self) -> Vec<K> {
        decode_all(self.plural, self.objects.values().cloned())
    }
}

fn object_key(object: &Value) -> String {
    let field = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!(
        "{}/{}",
        field("/metadata/namespace"),
        field("/metadata/name")
    )
}

/// The user's copy of every kind in [`KINDS`].
struct Model {
    kinds: Vec<Kind>,
}

impl Model {
    async fn load(state: &ServerState, user: &User) -> Result<Model, ApiError> {
        let mut kinds = Vec::new();
        for plural in KINDS {
            kinds.push(Kind::load(state, user, plural).await?);
        }
        Ok(Model { kinds })
    }

    fn objects(&self) -> FleetObjects {
        let [installs, apps, components, plans, runners, drift] = &self.kinds[..] else {
            unreachable!("one Kind per entry of KINDS");
        };
        FleetObjects {
            installs: installs.decode(),
            apps: apps.decode(),
            components: components.decode(),
            plans: plans.decode(),
            runners: runners.decode(),
            drift: drift.decode(),
        }
    }
}

/// What the fleet matrix is computed from, for `user`.
pub async fn load_fleet(state: &ServerState, user: &User) -> Result<FleetObjects, ApiError> {
    Ok(Model::load(state, user).await?.objects())
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
pub async fn fleet_events(session: Session, State(state): State<Arc<ServerState>>) -> Response {
    // Subscribe before listing, so no change falls between the list and the watch.
    let mut streams = StreamMap::new();
    for (i, plural) in KINDS.into_iter().enumerate() {
        let cache = match resource_type(&state, plural).and_then(|rt| state.cache(&rt).cloned()) {
            Ok(cache) => cache,
            Err(err) => return api_error(Some(&session), &err),
        };
        match cache.subscribe(cache.revision(), None) {
            Ok(subscription) => {
                // `None` once the cache stops this watcher (it lagged, or the cache
                // loaded afresh): the stream ends and the browser's EventSource
                // reconnects and lists again.
                let events = futures::stream::unfold(subscription.live, |mut live| async move {
                    live.recv().await.ok().map(|event| (Some(event), live))
                });
                let stream = events.chain(futures::stream::once(async { None }));
                streams.insert(i, Box::pin(stream));
            }
            Err(_) => {
                return api_error(
                    Some(&session),
                    &ApiError::Internal("the watch cache restarted: retry".into()),
                );
            }
        }
    }
    let mut model = match Model::load(&state, &session.user).await {
        Ok(model) => model,
        Err(err) => return api_error(Some(&session), &err),
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(16);
    tokio::spawn(async move {
        let mut last: Option<String> = None;
        let mut clock = tokio::time::interval(CLOCK);
        loop {
            let fleet = cells::fleet(&model.objects(), &Time(jiff::Timestamp::now()));
            let payload = fleet_payload(&fleet).to_string();
            if last.as_ref() != Some(&payload) {
                if tx
                    .send(Ok(Event::default().event("fleet").data(&payload)))
                    .await
                    .is_err()
                {
                    return;
                }
                last = Some(payload);
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = clock.tick() => {}
                next = streams.next() => {
                    let Some((i, Some(event))) = next else { return };
                    let mut pending = vec![(i, event)];
                    // Take the rest of the burst before recomputing.
                    while let Some(Some((i, more))) = streams.next().now_or_never() {
                        let Some(more) = more else { return };
                        pending.push((i, more));
                    }
                    for (i, event) in pending {
                        model.kinds[i].apply(&event);
                    }
                }
            }
        }
    });
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

use futures::FutureExt as _;
