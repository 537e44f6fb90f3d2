use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions,
    Identity, KvClient, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchClient,
    WatchOptions,
};
use futures::StreamExt as _;

use super::continue_token::key_after;
use super::{
    ContinueToken, KeyValue, ListOptions, ListPage, Revision, Store, StoreError, WatchEvent,
    WatchStream,
};

/// The production backend: an etcd cluster through `etcd-client`.
///
/// Revisions, compare-and-swap, paging and watches are etcd's own; this type only
/// translates them. Any number of endpoints may be given; the client balances between
/// them, and a request a member could not serve (gRPC `UNAVAILABLE`: the member is dead
/// or between leaders) is tried again, so that the store fails over (see [`failover`]).
#[derive(Clone)]
pub struct EtcdStore {
    kv: KvClient,
    watch: WatchClient,
}

/// How the API server speaks TLS to etcd, like kube-apiserver's `--etcd-cafile`,
/// `--etcd-certfile` and `--etcd-keyfile`: the CA that signed the members' serving
/// certificates, and the client certificate and key etcd's `--client-cert-auth` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM CA bundle the members' certificates are checked against.
    pub ca_file: std::path::PathBuf,
    /// PEM client certificate and its key, when etcd authenticates clients by
    /// certificate.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl EtcdTls {
    /// The TLS options: the files read now, so a missing or unreadable one is named at
    /// start-up, not at the first request.
    fn options(&self) -> Result<TlsOptions, StoreError> {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| {
                StoreError::backend(std::io::Error::new(
                    e.kind(),
                    format!("cannot read {}: {e}", path.display()),
                ))
            })
        };
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&self.ca_file)?));
        if let Some((cert, key)) = &self.client {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(tls)
    }
}

impl EtcdStore {
    /// Connects to the cluster (`http://host:port` endpoints).
    pub async fn connect(endpoints: &[String]) -> Result<Self, StoreError> {
        Self::connect_with(endpoints, None).await
    }

    /// Connects to the cluster, over TLS when `tls` is given (the endpoints' `http://`
    /// becomes `https://`).
    pub async fn connect_with(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
    ) -> Result<Self, StoreError> {
        // A ping every 30 s, the connection given up when one goes unanswered for 10 s:
        // kube-apiserver's (`keepaliveTime`, `keepaliveTimeout`). A ping unanswered fails
        // every request on the connection; 5 s was once too short on a loaded machine.
        let mut options = ConnectOptions::new()
            .with_connect_timeout(std::time::Duration::from_secs(5))
            .with_keep_alive(
                std::time::Duration::from_secs(30),
                std::time::Duration::from_secs(10),
            );
        let mut endpoints = endpoints.to_vec();
        if let Some(tls) = tls {
            options = options.with_tls(tls.options()?);
            for endpoint in &mut endpoints {
                if let Some(rest) = endpoint.strip_prefix("http://") {
                    *endpoint = format!("https://{rest}");
                }
            }
        }
        let client = Client::connect(&endpoints, Some(options))
            .await
            .map_err(StoreError::backend)?;
        Ok(EtcdStore {
            kv: client.kv_client(),
            watch: client.watch_client(),
        })
    }
}

/// gRPC's `UNAVAILABLE` status code.
const UNAVAILABLE: i32 = 14;
/// gRPC's `UNKNOWN` status code.
const UNKNOWN: i32 = 2;
/// Tries of one request while members answer `UNAVAILABLE`.
const ATTEMPTS: u64 = 8;

/// Runs `call` again (up to [`ATTEMPTS`] times, 50 ms more apart each time) while it
/// fails with `UNAVAILABLE`. The balanced channel keeps a killed member and fails every
/// request it routes there at once, so without this a third of the requests to a
/// 3-member cluster fail for as long as the member is down; etcd also answers
/// `UNAVAILABLE` while it elects a new leader.
async fn failover<T, F, Fut>(call: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    failover_write(call).await.map(|(answer, _)| answer)
}

/// [`failover`], also telling whether a try failed before the one answered.
///
/// Trying a write again is safe because every write is a compare-and-swap: if the first
/// try did commit (etcd answers `UNAVAILABLE` "request timed out" for a proposal that may
/// still commit, and a broken connection loses the answer of one that did), the next one
/// fails its comparison, never writes twice. The write's caller then asks etcd whether
/// the change that beat it is its own ([`EtcdStore::own_create`],
/// [`EtcdStore::first_change_after`]), so that a write that committed is answered as
/// done, not as already-exists, conflict or not-found.
async fn failover_write<T, F, Fut>(mut call: F) -> Result<(T, bool), etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(etcd_client::Error::GRpcStatus(status))
                if attempt < ATTEMPTS
                    && match i32::from(status.code()) {
                        UNAVAILABLE => true,
                        UNKNOWN => over_io_error(&status),
                        _ => false,
                    } =>
            {
                tracing::debug!(attempt, error = %status, "etcd did not answer: trying again");
                tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
                attempt += 1;
            }
            other => return other.map(|answer| (answer, attempt > 1)),
        }
    }
}

/// Whether an I/O error lies under `error`: with gRPC `UNKNOWN`, the connection broke
/// under the request (the member died or the network failed; it may have been served).
fn over_io_error(error: &dyn std::error::Error) -> bool {
    let mut source = error.source();
    while let Some(error) = source {
        if error.is::<std::io::Error>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// The key just past every key starting with `prefix` (etcd's `range_end`).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn to_kv(kv: &etcd_client::KeyValue) -> Result<KeyValue, StoreError> {
    Ok(KeyValue {
        key: kv.key_str().map_err(StoreError::backend)?.to_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
    })
}

/// Maps etcd's errors onto the store's, recognising compaction and future revisions.
fn map_err(err: etcd_client::Error, requested: Revision) -> StoreError {
    if let etcd_client::Error::GRpcStatus(status) = &err {
        let message = status.message();
        if message.contains("required revision has been compacted") {
            return StoreError::Expired { requested };
        }
        if message.contains("required revision is a future revision") {
            return StoreError::FutureRevision {
                requested,
                current: 0,
            };
        }
    }
    StoreError::backend(err)
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map(|h| h.revision()).unwrap_or_default()
}

/// What a compare-and-swap came to, and whether an earlier try of it failed (its answer
/// lost: it may have committed).
struct Swapped {
    outcome: Result<(Revision, Vec<TxnOpResponse>), Option<KeyValue>>,
    retried: bool,
}

/// How long a write whose comparison failed after a lost answer looks for its own
/// change in the key's history before it reports the failure as it is.
const OWN_CHANGE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl EtcdStore {
    /// Runs `txn`; on failure returns the key's current value read in the same txn.
    async fn txn_or_current(&self, key: &str, txn: Txn) -> Result<Swapped, StoreError> {
        let txn = txn.or_else([TxnOp::get(key, None)]);
        let (response, retried) = failover_write(|| {
            let (mut kv, txn) = (self.kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(StoreError::backend)?;
        let revision = header_revision(response.header());
        if response.succeeded() {
            return Ok(Swapped {
                outcome: Ok((revision, response.op_responses())),
                retried,
            });
        }
        let current = match response.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(to_kv).transpose()?,
            _ => None,
        };
        Ok(Swapped {
            outcome: Err(current),
            retried,
        })
    }

    /// Whether `current`, found by a create tried again, is that create's own object: the
    /// key as it was created holds `value`. `None` when it does not, or when its creation
    /// is compacted away.
    async fn own_create(&self, value: &[u8], current: &KeyValue) -> Option<KeyValue> {
        if current.version == 1 {
            return (current.value == value).then(|| current.clone());
        }
        let created = failover(|| {
            let mut kv = self.kv.clone();
            let options = GetOptions::new().with_revision(current.create_revision);
            let key = current.key.clone();
            async move { kv.get(key, Some(options)).await }
        })
        .await
        .ok()?;
        let created = created.kvs().first().map(to_kv)?.ok()?;
        (created.create_revision == current.create_revision && created.value == value).then(|| {
            KeyValue {
                mod_revision: created.create_revision,
                version: 1,
                ..created
            }
        })
    }

    /// The first change of `key` after revision `after`, from etcd's history; `None` when
    /// that history is compacted or does not answer within [`OWN_CHANGE_WAIT`]. A write
    /// compared against `after` whose answer was lost is that change, or never committed.
    async fn first_change_after(&self, key: &str, after: Revision) -> Option<WatchEvent> {
        let options = WatchOptions::new()
            .with_start_revision(after + 1)
            .with_prev_key();
        let first = async {
            let mut watch = self.watch.clone();
            let mut stream = watch.watch(key, Some(options)).await.ok()?;
            loop {
                let response = stream.message().await.ok()??;
                if response.compact_revision() > 0 || response.canceled() {
                    return None;
                }
                if let Some(event) = response.events().first() {
                    return to_event(event).ok();
                }
            }
        };
        tokio::time::timeout(OWN_CHANGE_WAIT, first)
            .await
            .ok()
            .flatten()
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        let response = failover(|| {
            let mut kv = self.kv.clone();
            async move { kv.get(key, None).await }
        })
        .await
        .map_err(StoreError::backend)?;
        response.kvs().first().map(to_kv).transpose()
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError> {
        let (start, revision) = match &options.continue_token {
            Some(token) => {
                let token = ContinueToken::decode(token, prefix)?;
                (token.start, token.revision)
            }
            None => (prefix.to_owned(), options.revision.unwrap_or(0)),
        };
        let mut get = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_revision(revision);
        if let Some(limit) = options.limit.filter(|l| *l > 0) {
            get = get.with_limit(limit as i64);
        }
        let response = failover(|| {
            let (mut kv, start, get) = (self.kv.clone(), start.clone(), get.clone());
            async move { kv.get(start, Some(get)).await }
        })
        .await
        .map_err(|e| map_err(e, revision))?;
        let read_at = if revision > 0 {
            revision
        } else {
            header_revision(response.header())
        };
        let items = response
            .kvs()
            .iter()
            .map(to_kv)
            .collect::<Result<Vec<_>, _>>()?;
        let continue_token = match (response.more(), items.last()) {
            (true, Some(last)) => Some(
                ContinueToken {
                    revision: read_at,
                    start: key_after(&last.key),
                }
                .encode(),
            ),
            _ => None,
        };
        Ok(ListPage {
            items,
            revision: read_at,
            continue_token,
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.to_vec(), None)]);
        let swapped = self.txn_or_current(key, txn).await?;
        match swapped.outcome {
            Ok((revision, _)) => Ok(KeyValue {
                key: key.to_owned(),
                value,
                create_revision: revision,
                mod_revision: revision,
                version: 1,
            }),
            Err(current) => {
                if let Some(current) = current.filter(|_| swapped.retried)
                    && let Some(own) = self.own_create(&value, &current).await
                {
                    return Ok(own);
                }
                Err(StoreError::AlreadyExists {
                    key: key.to_owned(),
                })
            }
        }
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::put(
                key,
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )]);
        let swapped = self.txn_or_current(key, txn).await?;
        if swapped.retried
            && swapped.outcome.is_err()
            && let Some(WatchEvent::Put { kv, .. }) = self.first_change_after(key, expected).await
            && kv.value == value
        {
            return Ok(kv);
        }
        match swapped.outcome {
            Ok((revision, responses)) => {
                let prev = match responses.into_iter().next() {
                    Some(TxnOpResponse::Put(put)) => put.prev_key().map(to_kv).transpose()?,
                    _ => None,
                };
                let prev = prev.ok_or_else(|| {
                    StoreError::backend("etcd returned no previous value for a compared put")
                })?;
                Ok(KeyValue {
                    key: key.to_owned(),
                    value,
                    create_revision: prev.create_revision,
                    mod_revision: revision,
                    version: prev.version + 1,
                })
            }
            Err(None) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            Err(Some(current)) => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected,
                actual: current.mod_revision,
            }),
        }
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError> {
        let compare = match expected {
            Some(expected) => Compare::mod_revision(key, CompareOp::Equal, expected),
            None => Compare::create_revision(key, CompareOp::Greater, 0),
        };
        let txn = Txn::new().when([compare]).and_then([TxnOp::delete(
            key,
            Some(DeleteOptions::new().with_prev_key()),
        )]);
        let swapped = self.txn_or_current(key, txn).await?;
        if let Some(expected) = expected.filter(|_| swapped.retried && swapped.outcome.is_err())
            && let Some(WatchEvent::Delete { prev, revision }) =
                self.first_change_after(key, expected).await
        {
            return Ok((prev, revision));
        }
        match swapped.outcome {
            Ok((revision, responses)) => {
                let prev = match responses.into_iter().next() {
                    Some(TxnOpResponse::Delete(delete)) => {
                        delete.prev_kvs().first().map(to_kv).transpose()?
                    }
                    _ => None,
                };
                let prev = prev.ok_or_else(|| StoreError::NotFound {
                    key: key.to_owned(),
                })?;
                Ok((prev, revision))
            }
            Err(None) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            Err(Some(current)) => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected: expected.unwrap_or_default(),
                actual: current.mod_revision,
            }),
        }
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        // The empty prefix is every key: etcd spells that "from \0 to the end" ("\0").
        let (key, end) = if prefix.is_empty() {
            (vec![0u8], vec![0u8])
        } else {
            (prefix.as_bytes().to_vec(), prefix_end(prefix))
        };
        let options = WatchOptions::new()
            .with_range(end)
            .with_start_revision(after + 1)
            .with_prev_key();
        let stream = failover(|| {
            let (mut watch, options, key) = (self.watch.clone(), options.clone(), key.clone());
            async move { watch.watch(key, Some(options)).await }
        })
        .await
        .map_err(StoreError::backend)?;
        let events = futures::stream::unfold(Some(stream), move |state| async move {
            let mut stream = state?;
            loop {
                let response = match stream.message().await {
                    Ok(Some(response)) => response,
                    Ok(None) => return None,
                    Err(err) => return Some((vec![Err(StoreError::backend(err))], None)),
                };
                if response.compact_revision() > 0 || response.canceled() {
                    let err = if response.compact_revision() > 0 {
                        StoreError::Expired { requested: after }
                    } else {
                        StoreError::backend(format!(
                            "etcd cancelled the watch: {}",
                            response.cancel_reason()
                        ))
                    };
                    return Some((vec![Err(err)], None));
                }
                if response.events().is_empty() {
                    continue;
                }
                let batch = response.events().iter().map(to_event).collect();
                return Some((batch, Some(stream)));
            }
        });
        Ok(Box::pin(events.flat_map(futures::stream::iter)))
    }

    async fn current_revision(&self) -> Result<Revision, StoreError> {
        let response = failover(|| {
            let mut kv = self.kv.clone();
            async move {
                kv.get("\0", Some(GetOptions::new().with_count_only()))
                    .await
            }
        })
        .await
        .map_err(StoreError::backend)?;
        Ok(header_revision(response.header()))
    }

    async fn holds_revision(&self, revision: Revision) -> Result<bool, StoreError> {
        // A count at `revision` of a key that never exists: etcd refuses it once the
        // revision is compacted, and reads nothing otherwise.
        let counted = failover(|| {
            let mut kv = self.kv.clone();
            async move {
                kv.get(
                    "\0",
                    Some(GetOptions::new().with_revision(revision).with_count_only()),
                )
                .await
            }
        })
        .await;
        match counted.map_err(|e| map_err(e, revision)) {
            Ok(_) => Ok(true),
            Err(StoreError::Expired { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        let compacted = failover(|| {
            let mut kv = self.kv.clone();
            async move { kv.compact(revision, None).await }
        })
        .await;
        match compacted {
            Ok(_) => Ok(()),
            // Compacting to a revision that is already compacted is a no-op.
            Err(err) => match map_err(err, revision) {
                StoreError::Expired { .. } => Ok(()),
                other => Err(other),
            },
        }
    }
}

fn to_event(event: &etcd_client::Event) -> Result<WatchEvent, StoreError> {
    let kv = event
        .kv()
        .ok_or_else(|| StoreError::backend("etcd watch event without a key"))?;
    let prev = event.prev_kv().map(to_kv).transpose()?;
    Ok(match event.event_type() {
        EventType::Put => WatchEvent::Put {
            kv: to_kv(kv)?,
            prev,
        },
        EventType::Delete => {
            let prev = prev.ok_or_else(|| StoreError::backend("etcd delete without prev_kv"))?;
            WatchEvent::Delete {
                prev,
                revision: kv.mod_revision(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end("ab"), b"ac".to_vec());
    }
}
