//! The single writer: every mutation goes through one thread that applies a batch of
//! queued requests in one redb transaction (group commit) and fsyncs once per batch.
//! A request is acknowledged only after its batch is durable, and its events are
//! published to watchers before that acknowledgement.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use redb::{ReadableTable, Table};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::codec::{decode_record, encode_event, encode_record};
use super::{KV, LOG, META, META_COMPACTED, META_REVISION, Shared};
use crate::storage::{KeyValue, Revision, StoreError, WatchEvent};

/// Most requests applied in one transaction.
const MAX_BATCH: usize = 512;
/// How long a batch waits for more requests once the previous batch held several (the
/// store is busy): a commit costs the same for one write as for dozens, and under load
/// the writer is what every write waits for. A lone writer never waits.
const GATHER: std::time::Duration = std::time::Duration::from_micros(300);

/// Revisions of history a batch removes per write it makes, once the history is longer
/// than the store keeps: one keeps it at its length, the second drains a backlog (a
/// store reopened with a shorter history).
const COMPACTED_PER_WRITE: Revision = 2;

/// A batch that takes longer than this from its transaction's start to durable is logged
/// with where its time went, as etcd warns of an apply that "took too long" (its
/// default is 100 ms too): a request's tail latency is then told from the disk (the
/// commit, which fsyncs) or from the batch's own work.
const SLOW_BATCH: std::time::Duration = std::time::Duration::from_millis(100);

/// One mutation.
pub(super) enum WriteOp {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
    Compact {
        revision: Revision,
    },
}

/// What a mutation did.
pub(super) enum WriteOutcome {
    Written(KeyValue),
    Deleted(KeyValue, Revision),
    Compacted,
}

pub(super) struct WriteRequest {
    pub op: WriteOp,
    pub reply: oneshot::Sender<Result<WriteOutcome, StoreError>>,
}

/// Runs until every sender is gone.
pub(super) fn run(
    shared: Arc<Shared>,
    mut requests: mpsc::Receiver<WriteRequest>,
    events: broadcast::Sender<Arc<Vec<WatchEvent>>>,
    history: Revision,
) {
    let mut busy = false;
    while let Some(first) = requests.blocking_recv() {
        let mut batch = vec![first];
        let gather_until = busy.then(|| std::time::Instant::now() + GATHER);
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => match gather_until {
                    // A dedicated thread, not a runtime worker: sleeping blocks nothing else.
                    Some(until) if std::time::Instant::now() < until => {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    _ => break,
                },
            }
        }
        busy = batch.len() > 1;
        let ops: Vec<&WriteOp> = batch.iter().map(|r| &r.op).collect();
        match apply(&shared, &ops, history) {
            Ok(applied) => {
                let (timing, requests) = (applied.timing, batch.len());
                shared.revision.store(applied.revision, Ordering::SeqCst);
                shared.compacted.store(applied.compacted, Ordering::SeqCst);
                if !applied.events.is_empty() {
                    // No receivers is fine: nobody is watching.
                    let _ = events.send(Arc::new(applied.events));
                }
                for (request, outcome) in batch.into_iter().zip(applied.outcomes) {
                    let _ = request.reply.send(outcome);
                }
                // After the answers: the log line delays none of them.
                if let Some(took) = timing.slow(SLOW_BATCH) {
                    tracing::warn!(
                        took_ms = millis(took),
                        writes_ms = millis(timing.writes),
                        compaction_ms = millis(timing.compaction),
                        commit_ms = millis(timing.commit),
                        requests,
                        compacted = timing.compacted,
                        "embedded store: a batch took longer than {} ms to be durable",
                        SLOW_BATCH.as_millis(),
                    );
                }
            }
            Err(err) => {
                tracing::error!(error = %err, "embedded store write failed");
                let message = err.to_string();
                for request in batch {
                    let _ = request
                        .reply
                        .send(Err(StoreError::backend(message.clone())));
                }
            }
        }
    }
}

struct Applied {
    outcomes: Vec<Result<WriteOutcome, StoreError>>,
    events: Vec<WatchEvent>,
    revision: Revision,
    compacted: Revision,
    timing: Timing,
}

/// Where a batch's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Timing {
    /// Applying its requests to the tables (reads, checks, inserts, log entries).
    writes: std::time::Duration,
    /// Removing history past the store's length.
    compaction: std::time::Duration,
    /// redb's commit: writing the changed pages and fsyncing them.
    commit: std::time::Duration,
    /// Revisions of history the batch removed.
    compacted: Revision,
}

impl Timing {
    /// The batch's whole time, if it is longer than `limit`.
    fn slow(&self, limit: std::time::Duration) -> Option<std::time::Duration> {
        let took = self.writes + self.compaction + self.commit;
        (took > limit).then_some(took)
    }
}

fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

/// Applies `ops` in order in one durable transaction, and removes the oldest history
/// past the newest `history` revisions, [`COMPACTED_PER_WRITE`] for each revision written.
///
/// Compaction goes with the writes, a little in each batch, rather than in transactions
/// of its own: each log entry holds an object, and removing one frees its pages (20 to
/// 60 µs each at fleet scale), so removing many at once (12,500, a quarter of the default
/// history, as before) held the batches behind it for hundreds of milliseconds.
fn apply(shared: &Shared, ops: &[&WriteOp], history: Revision) -> Result<Applied, redb::Error> {
    let started = std::time::Instant::now();
    let txn = shared.db.begin_write()?;
    let mut applied = {
        let mut kv = txn.open_table(KV)?;
        let mut log = txn.open_table(LOG)?;
        let mut meta = txn.open_table(META)?;
        let mut revision = meta.get(META_REVISION)?.map(|v| v.value()).unwrap_or(1);
        let first = revision;
        let mut compacted = meta.get(META_COMPACTED)?.map(|v| v.value()).unwrap_or(0);
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut events = Vec::new();
        for op in ops {
            let outcome = match op {
                WriteOp::Compact { revision: target } => {
                    compact(&mut log, *target, revision, &mut compacted)?
                        .map(|()| WriteOutcome::Compacted)
                }
                _ => match mutate(&mut kv, op, revision + 1)? {
                    Ok((event, outcome)) => {
                        revision += 1;
                        log.insert(revision, encode_event(&event).as_slice())?;
                        events.push(event);
                        Ok(outcome)
                    }
                    Err(err) => Err(err),
                },
            };
            outcomes.push(outcome);
        }
        let written = std::time::Instant::now();
        let before = compacted;
        let target = (revision - history).min(compacted + COMPACTED_PER_WRITE * (revision - first));
        if target > compacted {
            // Below the current revision, so the store's own refusal cannot happen.
            let _ = compact(&mut log, target, revision, &mut compacted)?;
        }
        meta.insert(META_REVISION, revision)?;
        meta.insert(META_COMPACTED, compacted)?;
        Applied {
            outcomes,
            events,
            revision,
            compacted,
            timing: Timing {
                writes: written - started,
                compaction: written.elapsed(),
                commit: std::time::Duration::ZERO,
                compacted: compacted - before,
            },
        }
    };
    let committing = std::time::Instant::now();
    txn.commit()?;
    applied.timing.commit = committing.elapsed();
    Ok(applied)
}

fn compact(
    log: &mut Table<i64, &[u8]>,
    target: Revision,
    revision: Revision,
    compacted: &mut Revision,
) -> Result<Result<(), StoreError>, redb::Error> {
    if target > revision {
        return Ok(Err(StoreError::FutureRevision {
            requested: target,
            current: revision,
        }));
    }
    if target > *compacted {
        log.retain_in(..=target, |_, _| false)?;
        *compacted = target;
    }
    Ok(Ok(()))
}

/// Applies one key mutation at revision `next`; the caller logs the event.
/// The outer error is the storage failing (the batch is abandoned), the inner one
/// the request's own failure (conflict, not found, ...).
fn mutate(
    kv: &mut Table<&str, &[u8]>,
    op: &WriteOp,
    next: Revision,
) -> Result<Result<(WatchEvent, WriteOutcome), StoreError>, redb::Error> {
    let key = match op {
        WriteOp::Create { key, .. } | WriteOp::Update { key, .. } | WriteOp::Delete { key, .. } => {
            key.as_str()
        }
        WriteOp::Compact { .. } => unreachable!("compaction is not a key mutation"),
    };
    let current = match kv
        .get(key)?
        .map(|v| decode_record(key, v.value()))
        .transpose()
    {
        Ok(current) => current,
        Err(corrupt) => return Ok(Err(corrupt)),
    };
    let not_found = || StoreError::NotFound {
        key: key.to_owned(),
    };
    match op {
        WriteOp::Create { value, .. } => {
            if current.is_some() {
                return Ok(Err(StoreError::AlreadyExists {
                    key: key.to_owned(),
                }));
            }
            let new = KeyValue {
                key: key.to_owned(),
                value: value.clone(),
                create_revision: next,
                mod_revision: next,
                version: 1,
            };
            kv.insert(key, encode_record(&new).as_slice())?;
            Ok(Ok((
                WatchEvent::Put {
                    kv: new.clone(),
                    prev: None,
                },
                WriteOutcome::Written(new),
            )))
        }
        WriteOp::Update {
            value, expected, ..
        } => {
            let Some(current) = current else {
                return Ok(Err(not_found()));
            };
            if current.mod_revision != *expected {
                return Ok(Err(StoreError::Conflict {
                    key: key.to_owned(),
                    expected: *expected,
                    actual: current.mod_revision,
                }));
            }
            let new = KeyValue {
                key: key.to_owned(),
                value: value.clone(),
                create_revision: current.create_revision,
                mod_revision: next,
                version: current.version + 1,
            };
            kv.insert(key, encode_record(&new).as_slice())?;
            Ok(Ok((
                WatchEvent::Put {
                    kv: new.clone(),
                    prev: Some(current),
                },
                WriteOutcome::Written(new),
            )))
        }
        WriteOp::Delete { expected, .. } => {
            let Some(current) = current else {
                return Ok(Err(not_found()));
            };
            if let Some(expected) = expected
                && current.mod_revision != *expected
            {
                return Ok(Err(StoreError::Conflict {
                    key: key.to_owned(),
                    expected: *expected,
                    actual: current.mod_revision,
                }));
            }
            kv.remove(key)?;
            Ok(Ok((
                WatchEvent::Delete {
                    prev: current.clone(),
                    revision: next,
                },
                WriteOutcome::Deleted(current, next),
            )))
        }
        WriteOp::Compact { .. } => unreachable!("handled by the caller"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;
    use std::time::Duration;

    use super::*;

    fn create(key: &str) -> WriteOp {
        WriteOp::Create {
            key: key.to_owned(),
            value: Bytes::from_static(b"{}"),
        }
    }

    /// A batch says where its time went and how much history it removed, which the
    /// slow-batch warning reports.
    #[test]
    fn a_batch_is_timed_by_part_and_counts_what_it_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared {
            db: redb::Database::create(dir.path().join("store.redb")).unwrap(),
            revision: AtomicI64::new(1),
            compacted: AtomicI64::new(0),
        };
        let ops: Vec<WriteOp> = (0..10).map(|i| create(&format!("/k/{i}"))).collect();
        let refs: Vec<&WriteOp> = ops.iter().collect();
        // History of 4: revisions 2 to 11 written, everything up to 7 removed (the
        // per-write allowance, 20, is more than the backlog).
        let applied = apply(&shared, &refs, 4).unwrap();
        assert_eq!((applied.revision, applied.compacted), (11, 7));
        assert_eq!(applied.timing.compacted, 7);
        assert!(
            applied.timing.commit > Duration::ZERO,
            "{:?}",
            applied.timing
        );

        let whole = applied.timing.writes + applied.timing.compaction + applied.timing.commit;
        assert_eq!(applied.timing.slow(Duration::ZERO), Some(whole));
        assert_eq!(applied.timing.slow(Duration::from_secs(3600)), None);

        // Nothing to remove: the next batch compacts only what its own writes allow.
        let more = [create("/k/a")];
        let refs: Vec<&WriteOp> = more.iter().collect();
        let applied = apply(&shared, &refs, 4).unwrap();
        assert_eq!((applied.revision, applied.timing.compacted), (12, 1));
    }
}
