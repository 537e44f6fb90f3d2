//! `GET ...?watch=true`: a chunked stream of watch events, one JSON object per line,
//! flushed per event, served from the type's watch cache.
//!
//! * `resourceVersion=N`: every change after N (410 inside the stream if N is too old);
//! * unset or `0`, or `sendInitialEvents=true`: synthetic `ADDED` events for the current
//!   objects first (then, with `sendInitialEvents`, a BOOKMARK annotated
//!   `k8s.io/initial-events-end`), then changes;
//! * `allowWatchBookmarks`: periodic BOOKMARKs at the watch cache's progress, and one
//!   when the watch ends; `timeoutSeconds`: the server ends it.
//!
//! With selectors, an object that starts matching arrives as `ADDED` and one that stops
//! matching as `DELETED`, as kube-apiserver does.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::dispatch::Call;
use super::list::Filter;
use crate::selectors::Selectable as _;
use crate::status::ApiError;
use crate::storage::Revision;
use crate::table;
use crate::watch_cache::{
    CachedEvent, CachedObject, EventType, Line, LiveEvents, Stopped, encode_line,
};

/// How long a watch that starts with the current state waits for the watch cache to
/// catch up with the store; after that it starts from what the cache has.
const CACHE_WAIT: Duration = Duration::from_secs(3);

/// How one watcher sees events.
struct View {
    rt: Arc<crate::registry::ResourceType>,
    namespace: Option<String>,
    filter: Filter,
    /// `Some` when the client asked for Table rows; column headers go with the first.
    table: Option<table::IncludeObject>,
    headers_sent: std::cell::Cell<bool>,
}

impl View {
    fn sees(&self, object: &CachedObject) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object.field("metadata.namespace") == ns)
            && self.filter.matches(object)
    }

    fn line(&self, event_type: EventType, object: &CachedObject) -> Line {
        match self.table {
            Some(include) => {
                let with_headers = !self.headers_sent.replace(true);
                let value = object.value().unwrap_or_default();
                let row = table::table_row_for_watch(
                    &self.rt,
                    &value,
                    include,
                    with_headers,
                    jiff::Timestamp::now(),
                );
                encode_line(event_type.as_str(), &row)
            }
            None => Line::Event(event_type, object.json()),
        }
    }

    /// The line this watcher gets for a change, if any.
    fn event(&self, event: &CachedEvent) -> Option<Line> {
        let now = self.sees(&event.object);
        let before = event.prev.as_deref().is_some_and(|p| self.sees(p));
        let event_type = match (event.event_type(), before, now) {
            (EventType::Deleted, true, _) => EventType::Deleted,
            (EventType::Deleted, false, _) => return None,
            (_, false, true) => EventType::Added,
            (_, true, true) => EventType::Modified,
            (_, true, false) => EventType::Deleted,
            (_, false, false) => return None,
        };
        if self.table.is_some() || event_type != event.event_type() {
            return Some(self.line(event_type, &event.object));
        }
        Some(event.line(event_type))
    }

    fn bookmark(&self, revision: Revision, initial_end: bool) -> Line {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        encode_line(
            "BOOKMARK",
            &json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": metadata}),
        )
    }
}

/// Sends the changes queued for the watcher, then a BOOKMARK at the revision it has been
/// sent every change up to: the watch cache's progress, not the watcher's own last change.
/// A watcher whose objects are quiet (a runner's watch of its install's Plans) would
/// otherwise keep an old revision while the window moves on, and get 410 and relist when
/// it resumes. `false` when the client is gone.
async fn send_bookmark(
    // `&mut`: a `View` is `Send` but not `Sync`, and this future is held across awaits.
    view: &mut View,
    live: &mut LiveEvents,
    last: &mut Revision,
    tx: &mpsc::Sender<Line>,
) -> bool {
    let (queued, progress) = live.drain();
    for event in queued {
        if event.revision <= *last {
            continue;
        }
        *last = event.revision;
        if let Some(line) = view.event(&event)
            && tx.send(line).await.is_err()
        {
            return false;
        }
    }
    // Lagged (no progress): the changes after `last` are to come from the window.
    if let Some(progress) = progress {
        *last = (*last).max(progress);
    }
    tx.send(view.bookmark(*last, false)).await.is_ok()
}

fn error_line(err: &ApiError) -> Line {
    encode_line("ERROR", &err.status())
}

pub async fn watch(call: Call) -> Result<Response, ApiError> {
    let mut view = View {
        rt: call.rt.clone(),
        namespace: call.namespace().map(str::to_owned),
        filter: Filter::from_call(&call)?,
        table: if table::wants_table(call.accept()) {
            Some(table::IncludeObject::from_query(
                call.param("includeObject"),
            )?)
        } else {
            None
        },
        headers_sent: std::cell::Cell::new(false),
    };
    let timeout = call
        .param("timeoutSeconds")
        .map(|t| {
            t.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid timeoutSeconds {t:?}")))
        })
        .transpose()?
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = call.flag("allowWatchBookmarks");
    let send_initial = call.flag("sendInitialEvents");
    let requested = match call.param("resourceVersion").filter(|rv| *rv != "0") {
        Some(rv) => Some(crate::request::parse_resource_version(rv)?),
        None => None,
    };
    let state = call.state.clone();
    let cache = state.cache(&call.rt)?.clone();
    let index = view.filter.index_key().map(str::to_owned);

    let mut initial = Vec::new();
    let (start, subscription) = match requested {
        Some(rv) if !send_initial => (
            rv,
            cache
                .subscribe(rv, index.as_deref())
                .map(|s| (s.backlog, s.live)),
        ),
        _ => {
            // Synthetic ADDED events for the current state, then its changes.
            let current = state
                .store
                .current_revision()
                .await
                .map_err(|e| ApiError::from_store(e, call.subject()))?;
            if !state.progress.wait_for(current, CACHE_WAIT).await {
                tracing::warn!(
                    current,
                    "the watch cache is behind the store: watching from what it has"
                );
            }
            let (snapshot, live) =
                cache.list_and_subscribe(call.namespace(), index.as_deref(), |o| view.sees(o));
            for object in &snapshot.objects {
                initial.push(view.line(EventType::Added, object));
            }
            if send_initial {
                initial.push(view.bookmark(snapshot.revision, true));
            }
            (snapshot.revision, Ok((Vec::new(), live)))
        }
    };
    let (tx, rx) = mpsc::channel::<Line>(256);
    let interval = state.config.bookmark_interval;
    state.metrics.watch_started(&call.rt.plural);
    tokio::spawn(async move {
        let _guard = WatchGuard(state.clone(), view.rt.plural.clone());
        let (backlog, mut live): (Vec<Arc<CachedEvent>>, LiveEvents) = match subscription {
            Ok(subscribed) => subscribed,
            Err(too_old) => {
                let err = ApiError::Gone(format!("{start} ({})", too_old.oldest));
                let _ = tx.send(error_line(&err)).await;
                return;
            }
        };
        for line in initial {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let mut last = start;
        for event in backlog {
            last = event.revision;
            if let Some(line) = view.event(&event)
                && tx.send(line).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tokio::select! {
                _ = &mut deadline => {
                    // A last BOOKMARK, so the client resumes from now, not from its own
                    // last change (kube-apiserver sends one just before the deadline).
                    if bookmarks {
                        send_bookmark(&mut view, &mut live, &mut last, &tx).await;
                    }
                    return;
                }
                _ = tx.closed() => return,
                _ = ticker.tick(), if bookmarks => {
                    if !send_bookmark(&mut view, &mut live, &mut last, &tx).await {
                        return;
                    }
                }
                next = live.recv() => match next {
                    Ok(event) => {
                        if event.revision <= last {
                            continue;
                        }
                        last = event.revision;
                        if let Some(line) = view.event(&event)
                            && tx.send(line).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(Stopped::Lagged) => {
                        // Catch up from the window, or tell the client to relist.
                        match cache.subscribe(last, index.as_deref()) {
                            Ok(caught_up) => {
                                live = caught_up.live;
                                for event in caught_up.backlog {
                                    last = event.revision;
                                    if let Some(line) = view.event(&event)
                                        && tx.send(line).await.is_err()
                                    {
                                        return;
                                    }
                                }
                            }
                            Err(too_old) => {
                                let err = ApiError::Gone(format!("{last} ({})", too_old.oldest));
                                let _ = tx.send(error_line(&err)).await;
                                return;
                            }
                        }
                    }
                    Err(Stopped::Closed) => return,
                },
            }
        }
    });
    let mut response = Response::new(Body::from_stream(ReceiverStream::new(rx).flat_map(
        |line| futures::stream::iter(line.chunks().map(Ok::<_, std::convert::Infallible>)),
    )));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// Counts a watch as open until its task ends.
struct WatchGuard(Arc<super::ServerState>, String);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.metrics.watch_ended(&self.1);
    }
}

use futures::StreamExt as _;
