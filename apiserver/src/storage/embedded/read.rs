//! Reads from a redb snapshot: current values, pages at an older revision (current
//! values with the changes made since rolled back from the log), and log ranges for
//! watches.

use std::collections::BTreeMap;

use redb::{Database, ReadTransaction, ReadableDatabase};

use super::codec::{decode_event, decode_record};
use super::{KV, LOG, META, META_COMPACTED, META_REVISION};
use crate::storage::continue_token::key_after;
use crate::storage::{
    ContinueToken, KeyValue, ListOptions, ListPage, Revision, StoreError, WatchEvent,
};

fn backend(err: impl Into<redb::Error>) -> StoreError {
    StoreError::backend(err.into())
}

/// The snapshot's current and compacted revisions.
fn revisions(txn: &ReadTransaction) -> Result<(Revision, Revision), StoreError> {
    let meta = txn.open_table(META).map_err(backend)?;
    let current = meta.get(META_REVISION).map_err(backend)?.map(|v| v.value());
    let compacted = meta
        .get(META_COMPACTED)
        .map_err(backend)?
        .map(|v| v.value());
    Ok((current.unwrap_or(1), compacted.unwrap_or(0)))
}

pub(super) fn get(db: &Database, key: &str) -> Result<Option<KeyValue>, StoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let kv = txn.open_table(KV).map_err(backend)?;
    let value = kv.get(key).map_err(backend)?;
    value.map(|v| decode_record(key, v.value())).transpose()
}

pub(super) fn list(
    db: &Database,
    prefix: &str,
    options: &ListOptions,
) -> Result<ListPage, StoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let (current, compacted) = revisions(&txn)?;
    let (start, at) = match &options.continue_token {
        Some(token) => {
            let token = ContinueToken::decode(token, prefix)?;
            (token.start, token.revision)
        }
        None => (
            prefix.to_owned(),
            options.revision.filter(|r| *r > 0).unwrap_or(current),
        ),
    };
    if at < compacted {
        return Err(StoreError::Expired { requested: at });
    }
    if at > current {
        return Err(StoreError::FutureRevision {
            requested: at,
            current,
        });
    }

    // The value at `at` of every key changed since: the `prev` of its first later change.
    let mut rolled_back: BTreeMap<String, Option<KeyValue>> = BTreeMap::new();
    if at < current {
        let log = txn.open_table(LOG).map_err(backend)?;
        for entry in log.range(at + 1..=current).map_err(backend)? {
            let (_, value) = entry.map_err(backend)?;
            let event = decode_event(value.value())?;
            let key = event.key().to_owned();
            if key.starts_with(prefix) && key >= start {
                let before = match event {
                    WatchEvent::Put { prev, .. } => prev,
                    WatchEvent::Delete { prev, .. } => Some(prev),
                };
                rolled_back.entry(key).or_insert(before);
            }
        }
    }

    let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let kv = txn.open_table(KV).map_err(backend)?;
    let mut live = kv.range(start.as_str()..).map_err(backend)?.peekable();
    let mut old = rolled_back.into_iter().peekable();
    let mut items = Vec::new();
    let mut more = false;
    loop {
        let live_key: Option<String> = match live.peek() {
            Some(Ok((k, _))) if k.value().starts_with(prefix) => Some(k.value().to_string()),
            Some(Err(_)) => return Err(StoreError::backend("embedded store read failed")),
            _ => None,
        };
        let old_key = old.peek().map(|(k, _)| k.clone());
        let value = match (live_key, old_key) {
            (None, None) => break,
            (Some(l), Some(o)) if o <= l => {
                if o == l {
                    live.next();
                }
                old.next().expect("peeked").1
            }
            (Some(l), _) => {
                let (_, v) = live.next().expect("peeked").map_err(backend)?;
                Some(decode_record(&l, v.value())?)
            }
            (None, Some(_)) => old.next().expect("peeked").1,
        };
        if let Some(value) = value {
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(value);
        }
    }
    let continue_token = match (more, items.last()) {
        (true, Some(last)) => Some(
            ContinueToken {
                revision: at,
                start: key_after(&last.key),
            }
            .encode(),
        ),
        _ => None,
    };
    Ok(ListPage {
        items,
        revision: at,
        continue_token,
    })
}

/// The changes under `prefix` after `after`, at most `max` revisions' worth, and the
/// revision up to which the log was read.
pub(super) fn log_after(
    db: &Database,
    prefix: &str,
    after: Revision,
    max: i64,
) -> Result<(Vec<WatchEvent>, Revision), StoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let (current, compacted) = revisions(&txn)?;
    if after < compacted {
        return Err(StoreError::Expired { requested: after });
    }
    let until = current.min(after + max);
    let log = txn.open_table(LOG).map_err(backend)?;
    let mut events = Vec::new();
    for entry in log.range(after + 1..=until).map_err(backend)? {
        let (_, value) = entry.map_err(backend)?;
        let event = decode_event(value.value())?;
        if event.key().starts_with(prefix) {
            events.push(event);
        }
    }
    Ok((events, until))
}
