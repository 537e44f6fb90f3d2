//! One live copy of the fleet for every `/ui/events` stream.
//!
//! The first stream starts a task that takes the watch caches' objects of the kinds the
//! matrix is made of together with a subscription to their changes, then applies each
//! change to that copy. After each burst of changes it publishes a new
//! [`FleetSnapshot`] (the objects, decoded once, and the matrix of a user who may see
//! all of them) on a `watch` channel that every stream reads; every 5 s it recomputes
//! the matrix (runner heartbeats age) and publishes only if it changed. The last stream
//! to close stops the task. How many snapshots were built, and how many streams read
//! them, is in `/metrics` (`outpost_ui_fleet_snapshots_total`, `outpost_ui_fleet_streams`).
//!
//! Authorization is per stream, as before: each stream's user is authorized for a
//! `list` of each kind ([`list_access`](super::data::list_access)) and sees only the
//! objects that access allows ([`FleetSnapshot::payload_for`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio_stream::StreamMap;

use super::cells::{self, FleetObjects};
use super::data::{decode_all, resource_type, visible};
use super::events::fleet_payload;
use crate::Dashboard;
use outpost_apiserver::auth::Access;
use outpost_apiserver::server::MetricsSource;
use outpost_apiserver::status::ApiError;
use outpost_apiserver::storage::Revision;
use outpost_apiserver::watch_cache::{CachedEvent, CachedObject};

/// The kinds the fleet matrix is computed from.
pub const KINDS: [&str; 6] = [
    "installs",
    "apps",
    "components",
    "plans",
    "runners",
    "driftreports",
];

/// How often the matrix is recomputed without any change (runner heartbeats age).
pub const CLOCK: Duration = Duration::from_secs(5);

/// The objects of every kind in [`KINDS`] at one point, shared by every stream.
pub struct FleetObjectsShared {
    /// Each kind's objects, in [`KINDS`] order (for users who may see only some).
    kinds: Vec<Vec<Arc<CachedObject>>>,
    /// All of them, decoded.
    decoded: FleetObjects,
}

/// What every `/ui/events` stream reads.
pub struct FleetSnapshot {
    objects: Arc<FleetObjectsShared>,
    /// The `fleet` event's data for a user who may see every object.
    payload: String,
}

impl FleetSnapshot {
    /// The `fleet` event's data for a user with `access` (one per kind of [`KINDS`]):
    /// the shared one when the user may see everything, else computed at `now` from
    /// just the objects the user may see (exactly what a list of each kind returns).
    pub fn payload_for<'a>(&'a self, access: &[Access], now: &Time) -> Cow<'a, str> {
        if access.iter().all(|a| *a == Access::Full) {
            return Cow::Borrowed(&self.payload);
        }
        let objects = decode_kinds(&self.objects.kinds, |i, o| visible(&access[i], o));
        Cow::Owned(payload_at(&objects, now))
    }
}

fn payload_at(objects: &FleetObjects, now: &Time) -> String {
    fleet_payload(&cells::fleet(objects, now)).to_string()
}

/// The task's copy of one kind.
#[derive(Default)]
struct Kind {
    objects: BTreeMap<String, Arc<CachedObject>>,
    /// Changes up to this revision are in `objects`.
    seen: Revision,
}

impl Kind {
    fn apply(&mut self, event: &CachedEvent) {
        if event.revision <= self.seen {
            return;
        }
        self.seen = event.revision;
        if event.deleted {
            self.objects.remove(&event.object.key);
        } else {
            self.objects
                .insert(event.object.key.clone(), event.object.clone());
        }
    }
}

fn shared_objects(kinds: &[Kind]) -> FleetObjectsShared {
    let kinds: Vec<Vec<Arc<CachedObject>>> = kinds
        .iter()
        .map(|k| k.objects.values().cloned().collect())
        .collect();
    let decoded = decode_kinds(&kinds, |_, _| true);
    FleetObjectsShared { kinds, decoded }
}

/// The objects of each kind (in [`KINDS`] order) that `keep` accepts, decoded.
fn decode_kinds(
    kinds: &[Vec<Arc<CachedObject>>],
    keep: impl Fn(usize, &CachedObject) -> bool,
) -> FleetObjects {
    let of = |i: usize| {
        kinds[i]
            .iter()
            .filter(|o| keep(i, o))
            .filter_map(|o| o.value().ok())
            .collect::<Vec<_>>()
    };
    FleetObjects {
        installs: decode_all(KINDS[0], of(0)),
        apps: decode_all(KINDS[1], of(1)),
        components: decode_all(KINDS[2], of(2)),
        plans: decode_all(KINDS[3], of(3)),
        runners: decode_all(KINDS[4], of(4)),
        drift: decode_all(KINDS[5], of(5)),
    }
}

/// The open share of the live fleet: streams hold it; the last one dropped stops the
/// task that keeps it current.
pub struct FleetShare {
    snapshots: watch::Receiver<Arc<FleetSnapshot>>,
    task: AbortHandle,
}

impl FleetShare {
    /// A receiver of the snapshots; it ends (`changed` fails) when the caches stop
    /// the task's subscription (it lagged, or they loaded afresh).
    pub fn subscribe(&self) -> watch::Receiver<Arc<FleetSnapshot>> {
        self.snapshots.clone()
    }
}

impl Drop for FleetShare {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The shared live fleet of the server's `/ui/events` streams.
#[derive(Default)]
pub struct FleetFeed {
    share: tokio::sync::Mutex<Weak<FleetShare>>,
    builds: Arc<AtomicU64>,
    streams: AtomicI64,
}

/// Counts a stream while it is open.
pub struct StreamGuard<'a>(&'a FleetFeed);

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl MetricsSource for FleetFeed {
    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP outpost_ui_fleet_snapshots_total Fleet snapshots built for the dashboard's live updates (shared by every stream).\n# TYPE outpost_ui_fleet_snapshots_total counter\noutpost_ui_fleet_snapshots_total {}\n# HELP outpost_ui_fleet_streams Open /ui/events streams.\n# TYPE outpost_ui_fleet_streams gauge\noutpost_ui_fleet_streams {}",
            self.builds(),
            self.streams()
        );
    }
}

impl FleetFeed {
    /// Snapshots built since the server started (one per burst of changes, and one
    /// per clock tick that changed the matrix), whatever the number of streams.
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    /// Open `/ui/events` streams.
    pub fn streams(&self) -> i64 {
        self.streams.load(Ordering::Relaxed)
    }

    /// Counts one more open stream until the guard is dropped.
    pub fn stream_opened(&self) -> StreamGuard<'_> {
        self.streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self)
    }

    /// The live share: the running one, or a new one when no stream holds one (or its
    /// task stopped).
    pub async fn join(&self, state: &Dashboard) -> Result<Arc<FleetShare>, ApiError> {
        let mut current = self.share.lock().await;
        if let Some(share) = current.upgrade()
            && share.snapshots.has_changed().is_ok()
        {
            return Ok(share);
        }
        let share = Arc::new(self.start(state)?);
        *current = Arc::downgrade(&share);
        Ok(share)
    }

    fn start(&self, state: &Dashboard) -> Result<FleetShare, ApiError> {
        let mut streams = StreamMap::new();
        let mut kinds = Vec::new();
        for (i, plural) in KINDS.into_iter().enumerate() {
            let rt = resource_type(state, plural)?;
            let cache = state.api.cache(&rt)?;
            // The objects and the subscription together: no change falls between them.
            let (snapshot, live) = cache.list_and_subscribe(None, None, |_| true);
            kinds.push(Kind {
                objects: snapshot
                    .objects
                    .into_iter()
                    .map(|o| (o.key.clone(), o))
                    .collect(),
                seen: snapshot.revision,
            });
            // `None` once the cache stops this subscriber: the task ends, and with it
            // every stream (the browsers' EventSources reconnect and start anew).
            let events = futures::stream::unfold(live, |mut live| async move {
                live.recv().await.ok().map(|event| (Some(event), live))
            });
            streams.insert(
                i,
                Box::pin(events.chain(futures::stream::once(async { None }))),
            );
        }
        let objects = Arc::new(shared_objects(&kinds));
        let payload = payload_at(&objects.decoded, &Time(jiff::Timestamp::now()));
        self.builds.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(Arc::new(FleetSnapshot { objects, payload }));
        let builds = self.builds.clone();
        let task = tokio::spawn(async move {
            let mut clock = tokio::time::interval_at(tokio::time::Instant::now() + CLOCK, CLOCK);
            loop {
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = clock.tick() => {
                        let current = tx.borrow().clone();
                        let payload = payload_at(&current.objects.decoded, &Time(jiff::Timestamp::now()));
                        if payload != current.payload {
                            builds.fetch_add(1, Ordering::Relaxed);
                            tx.send_replace(Arc::new(FleetSnapshot { objects: current.objects.clone(), payload }));
                        }
                    }
                    next = streams.next() => {
                        let Some((i, Some(event))) = next else { return };
                        kinds[i].apply(&event);
                        // Take the rest of the burst before rebuilding.
                        while let Some(Some((i, more))) = streams.next().now_or_never() {
                            let Some(more) = more else { return };
                            kinds[i].apply(&more);
                        }
                        let objects = Arc::new(shared_objects(&kinds));
                        let payload = payload_at(&objects.decoded, &Time(jiff::Timestamp::now()));
                        builds.fetch_add(1, Ordering::Relaxed);
                        tx.send_replace(Arc::new(FleetSnapshot { objects, payload }));
                    }
                }
            }
        });
        Ok(FleetShare {
            snapshots: rx,
            task: task.abort_handle(),
        })
    }
}
