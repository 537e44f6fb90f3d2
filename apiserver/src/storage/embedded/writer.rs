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
                shared.revision.store(applied.revision, Ordering::SeqCst);
                shared.compacted.store(applied.compacted, Ordering::SeqCst);
                if !applied.events.is_empty() {
                    // No receivers is fine: nobody is watching.
                    let _ = events.send(Arc::new(applied.events));
                }
                for (request, outcome) in batch.into_iter().zip(applied.outcomes) {
                    let _ = request.reply.send(outcome);
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
}

/// Applies `ops` in order in one durable transaction, and removes the oldest history
/// past the newest `history` revisions, [`COMPACTED_PER_WRITE`] for each revision written.
///
/// Compaction goes with the writes, a little in each batch, rather than in transactions
/// of its own: each log entry holds an object, and removing one frees its pages (20 to
/// 60 µs each at fleet scale), so removing many at once (12,500, a quarter of the default
/// history, as before) held the batches behind it for hundreds of milliseconds.
fn apply(shared: &Shared, ops: &[&WriteOp], history: Revision) -> Result<Applied, redb::Error> {
    let txn = shared.db.begin_write()?;
    let applied = {
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
        }
    };
    txn.commit()?;
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
