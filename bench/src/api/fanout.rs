//! Watch fan-out latency: many HTTP watch streams on one server, a series of updates to
//! one object, and for every (watcher, update) pair the time from just before the
//! update was sent to the watcher reading its event.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use http::{Method, StatusCode};

use super::ApiBenchError;
use super::client::{Connection, INSTALLS, Lines, event_revision, install, next_version};
use outpost_apiserver::storage::Revision;

/// How long a watcher waits for its next event before giving up on the rest.
const SILENCE: Duration = Duration::from_secs(30);
/// Watch streams opened at once (the listener's backlog is finite).
const OPENING: usize = 64;

/// Fan-out latencies on one backend.
#[derive(Clone, Debug)]
pub struct FanOutRow {
    /// `etcd` or `embedded`.
    pub backend: &'static str,
    /// Concurrent watchers.
    pub watchers: usize,
    /// Updates made.
    pub events: usize,
    /// Every (watcher, update) latency, sorted.
    pub latencies: Vec<Duration>,
}

impl FanOutRow {
    /// Pairs that never arrived.
    pub fn missed(&self) -> usize {
        (self.watchers * self.events).saturating_sub(self.latencies.len())
    }

    /// The `q` quantile (`0.0..=1.0`) by the nearest-rank method.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
        self.latencies.get(rank - 1).copied()
    }
}

/// Fails early, with what to do, when `watchers` streams (two sockets each: ours and
/// the server's) would not fit under the process's open-file limit.
pub(super) fn check_open_files(watchers: usize) -> Result<(), ApiBenchError> {
    let needed = 2 * watchers as u64 + 256;
    // Linux only; elsewhere an exhausted limit shows up as a connect error.
    let Ok(limits) = std::fs::read_to_string("/proc/self/limits") else {
        return Ok(());
    };
    let Some(line) = limits.lines().find(|l| l.starts_with("Max open files")) else {
        return Ok(());
    };
    let mut fields = line["Max open files".len()..].split_whitespace();
    let soft = fields.next().and_then(|s| s.parse::<u64>().ok());
    let hard = fields.next().unwrap_or("unknown").to_owned();
    match soft {
        Some(soft) if soft < needed => Err(ApiBenchError::OpenFiles { needed, soft, hard }),
        _ => Ok(()),
    }
}

/// Measures fan-out on the server at `address`.
pub(super) async fn measure(
    backend: &'static str,
    address: SocketAddr,
    token: &str,
    watchers: usize,
    events: usize,
    spacing: Duration,
) -> Result<FanOutRow, ApiBenchError> {
    let mut writer = Connection::open(address, token).await?;
    let mut object = install("fanout");
    let mut revision = writer.create(&object).await?;

    // Every watcher's stream is open (and subscribed: the server subscribes before it
    // answers) before the first update.
    let path = format!("{INSTALLS}?watch=true&resourceVersion={revision}");
    let streams: Vec<Lines> = futures::stream::iter(0..watchers)
        .map(|_| {
            let path = path.clone();
            async move {
                let mut connection = Connection::open(address, token).await?;
                let body = connection
                    .send(Method::GET, &path, Default::default(), StatusCode::OK)
                    .await?;
                // The connection's task ends when the body is dropped.
                Ok::<_, ApiBenchError>(Lines::new(body))
            }
        })
        .buffer_unordered(OPENING)
        .try_collect()
        .await?;
    let readers: Vec<_> = streams
        .into_iter()
        .map(|lines| tokio::spawn(receive(lines, events)))
        .collect();

    let mut sent: HashMap<Revision, Instant> = HashMap::with_capacity(events);
    let mut ticks = tokio::time::interval(spacing);
    for seq in 0..events {
        ticks.tick().await;
        next_version(&mut object, seq, revision);
        let before = Instant::now();
        revision = writer.update(&object).await?;
        sent.insert(revision, before);
    }

    let mut latencies = Vec::with_capacity(watchers * events);
    for reader in readers {
        let received = reader
            .await
            .map_err(|e| ApiBenchError::Unexpected(format!("a watcher failed: {e}")))??;
        latencies.extend(
            received
                .into_iter()
                .filter_map(|(rv, at)| sent.get(&rv).map(|before| at - *before)),
        );
    }
    latencies.sort();
    Ok(FanOutRow {
        backend,
        watchers,
        events,
        latencies,
    })
}

/// Reads events until `events` have arrived, the stream ends, or it stays silent for
/// [`SILENCE`]; returns each event's revision and arrival time.
async fn receive(
    mut lines: Lines,
    events: usize,
) -> Result<Vec<(Revision, Instant)>, ApiBenchError> {
    let mut received = Vec::with_capacity(events);
    while received.len() < events {
        let Ok(next) = tokio::time::timeout(SILENCE, lines.next()).await else {
            break;
        };
        let Some(line) = next? else {
            break;
        };
        let at = Instant::now();
        received.push((event_revision(&line)?, at));
    }
    Ok(received)
}
