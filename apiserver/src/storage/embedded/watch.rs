//! A watch: replay the log after the requested revision, then follow the writer's
//! broadcast of committed batches, skipping what the replay already delivered. A
//! watcher that falls behind the broadcast replays from the log again.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::Shared;
use super::read::log_after;
use crate::storage::{Revision, StoreError, WatchEvent, WatchStream};

/// Revisions replayed from the log per read transaction.
const REPLAY_CHUNK: i64 = 10_000;

pub(super) fn spawn(
    shared: Arc<Shared>,
    mut live: broadcast::Receiver<Arc<Vec<WatchEvent>>>,
    prefix: String,
    after: Revision,
) -> WatchStream {
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        let mut last = after;
        loop {
            // Replay from the log until it is exhausted.
            loop {
                let (db, p) = (shared.clone(), prefix.clone());
                let read =
                    tokio::task::spawn_blocking(move || log_after(&db.db, &p, last, REPLAY_CHUNK))
                        .await
                        .unwrap_or_else(|e| Err(StoreError::backend(e)));
                let (events, until) = match read {
                    Ok(read) => read,
                    Err(err) => {
                        let _ = tx.send(Err(err)).await;
                        return;
                    }
                };
                for event in events {
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                if until == last {
                    break;
                }
                last = until;
            }
            // Follow live batches.
            loop {
                match live.recv().await {
                    Ok(batch) => {
                        for event in batch.iter() {
                            if event.revision() <= last {
                                continue;
                            }
                            last = event.revision();
                            if event.key().starts_with(&prefix)
                                && tx.send(Ok(event.clone())).await.is_err()
                            {
                                return;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}
