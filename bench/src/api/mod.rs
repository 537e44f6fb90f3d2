//! `outpost bench api`: the API server measured through real HTTP over loopback, next to
//! its own store and raw `etcd-client` puts measured in the same run.
//!
//! * [`client`]: one keep-alive HTTP/1.1 connection per worker;
//! * [`fanout`]: watch fan-out latency over many HTTP watch streams;
//! * [`report`]: the figures, printed as ratios.

mod client;
mod fanout;
mod report;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::try_join_all;

use crate::store::MeasuredEtcd;
use client::{Connection, install, next_version};
use outpost_apiserver::server::{ApiServer, ServerConfig};
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, EtcdStore, Store, StoreError};

pub use fanout::FanOutRow;
pub use report::{ApiBenchReport, ApiBenchRow, FAN_OUT_GOAL, THROUGHPUT_GOAL};

/// The API benchmark: Install creates (POST) and updates (PUT with the current
/// `resourceVersion`, each worker its own object) per second through HTTP, at several
/// concurrencies, on both backends; the same backend's raw `Store` creates and
/// compare-and-swaps and raw `etcd-client` puts of the same bytes, measured in the same
/// run; then watch fan-out latency to many concurrent HTTP watchers.
///
/// ```no_run
/// # async fn demo() -> Result<(), outpost_bench::api::ApiBenchError> {
/// # fn server_config(_admin_token: &str) -> outpost_apiserver::server::ServerConfig { todo!() }
/// let report = outpost_bench::api::ApiBench::default().run(server_config).await?;
/// print!("{report}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ApiBench {
    /// Operations per write-rate figure.
    pub ops: usize,
    /// Concurrencies (one connection per worker) to measure writes at.
    pub concurrency: Vec<usize>,
    /// Concurrent watch streams for the fan-out.
    pub watchers: usize,
    /// Updates the watchers receive.
    pub events: usize,
    /// Time between those updates.
    pub spacing: Duration,
    /// An etcd to use (`http://host:port`); a throwaway one is started when empty.
    pub etcd: Vec<String>,
}

impl Default for ApiBench {
    fn default() -> Self {
        ApiBench {
            ops: 2_000,
            concurrency: vec![1, 64],
            watchers: 1_000,
            events: 50,
            spacing: Duration::from_millis(50),
            etcd: Vec::new(),
        }
    }
}

/// Why the API benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum ApiBenchError {
    /// A store failed.
    #[error("store failed")]
    Store(#[from] StoreError),
    /// The API server could not be started or reached.
    #[error("cannot reach the API server")]
    Connect(#[source] std::io::Error),
    /// An HTTP exchange failed.
    #[error("HTTP request failed")]
    Http(#[from] hyper::Error),
    /// The server answered with an unexpected status.
    #[error("{request} answered {status}: {body}")]
    Status {
        /// Method and path.
        request: String,
        /// The status code.
        status: u16,
        /// The response body.
        body: String,
    },
    /// A response could not be decoded.
    #[error("undecodable response")]
    Decode(#[source] serde_json::Error),
    /// The watch fan-out would run out of file descriptors.
    #[error(
        "the watch fan-out needs about {needed} open files but the soft limit is {soft} \
         (hard limit {hard}): raise it with `ulimit -n {needed}` or pass fewer --watchers"
    )]
    OpenFiles {
        /// Descriptors needed.
        needed: u64,
        /// The soft limit.
        soft: u64,
        /// The hard limit.
        hard: String,
    },
    /// Anything else.
    #[error("{0}")]
    Unexpected(String),
}

impl ApiBenchError {
    fn connect(err: std::io::Error) -> Self {
        ApiBenchError::Connect(err)
    }

    fn decode(err: serde_json::Error) -> Self {
        ApiBenchError::Decode(err)
    }
}

/// An API server on `127.0.0.1:0`, stopped when dropped.
struct Served {
    address: SocketAddr,
    token: String,
    store: Arc<dyn Store>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    async fn start(
        store: Arc<dyn Store>,
        config: ServerConfig,
        token: String,
    ) -> Result<Self, ApiBenchError> {
        let server = ApiServer::new(store.clone(), config).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(ApiBenchError::connect)?;
        let address = listener.local_addr().map_err(ApiBenchError::connect)?;
        let task = tokio::spawn(server.serve(listener, std::future::pending()));
        Ok(Served {
            address,
            token,
            store,
            task,
        })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // Open watch streams would hold a graceful shutdown up; nothing is left to save.
        self.task.abort();
    }
}

/// Runs `worker(0..concurrency)` at once and returns the operations per second.
async fn rate<F, Fut>(
    concurrency: usize,
    per_worker: usize,
    worker: F,
) -> Result<f64, ApiBenchError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), ApiBenchError>>,
{
    let started = Instant::now();
    try_join_all((0..concurrency).map(worker)).await?;
    Ok((concurrency * per_worker) as f64 / started.elapsed().as_secs_f64())
}

impl ApiBench {
    /// Runs every measurement on servers built by `server`, which is given the bearer
    /// token of an admin of the server it builds.
    pub async fn run(
        &self,
        server: fn(&str) -> ServerConfig,
    ) -> Result<ApiBenchReport, ApiBenchError> {
        let token = uuid::Uuid::new_v4().to_string();
        fanout::check_open_files(self.watchers)?;
        let measured = MeasuredEtcd::connect(&self.etcd).await?;
        let (endpoints, raw) = (&measured.endpoints, measured.raw.clone());
        let dir = tempfile::tempdir().map_err(StoreError::backend)?;
        let embedded = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).await?;
        let servers = [
            (
                "etcd",
                Served::start(
                    Arc::new(EtcdStore::connect(endpoints).await?),
                    server(&token),
                    token.clone(),
                )
                .await?,
            ),
            (
                "embedded",
                Served::start(Arc::new(embedded), server(&token), token.clone()).await?,
            ),
        ];
        // Every raw write carries the bytes of an Install as the server stores it.
        let (name, served) = &servers[0];
        let mut connection = Connection::open(served.address, &served.token).await?;
        connection.create(&install("sample")).await?;
        let installs = server(&token)
            .registry
            .get("outpost.dev", "v1alpha1", "installs")
            .expect("Outpost serves installs.outpost.dev/v1alpha1");
        let key = installs.key(Some("bench"), "sample");
        let value = served
            .store
            .get(&key)
            .await?
            .map(|kv| kv.value)
            .ok_or_else(|| {
                ApiBenchError::Unexpected(format!("{name}: the created Install is not at {key}"))
            })?;

        let run_id = std::process::id();
        let mut rows = Vec::new();
        for (run, &concurrency) in self.concurrency.iter().enumerate() {
            let concurrency = concurrency.max(1);
            let per_worker = (self.ops / concurrency).max(1);
            let mut push = |backend, path, operation, ops_per_sec| {
                rows.push(ApiBenchRow {
                    backend,
                    path,
                    operation,
                    concurrency,
                    ops_per_sec,
                })
            };
            let prefix = format!("/bench/{run_id}/{run}");
            let per_sec = rate(concurrency, per_worker, |w| {
                let (mut kv, value, prefix) = (raw.kv_client(), value.clone(), prefix.clone());
                async move {
                    for i in 0..per_worker {
                        let key = format!("{prefix}/raw/{w}/{i}");
                        kv.put(key, value.to_vec(), None)
                            .await
                            .map_err(StoreError::backend)?;
                    }
                    Ok(())
                }
            })
            .await?;
            push("raw-etcd", "client", "put", per_sec);
            for (backend, served) in &servers {
                let store = &served.store;
                let (create, cas) =
                    store_rates(store, &prefix, &value, concurrency, per_worker).await?;
                push(backend, "store", "create", create);
                push(backend, "store", "cas", cas);
                let (create, update) = http_rates(served, run, concurrency, per_worker).await?;
                push(backend, "http", "create", create);
                push(backend, "http", "update", update);
            }
        }

        let mut fan_out = Vec::new();
        if self.watchers > 0 && self.events > 0 {
            for (backend, served) in &servers {
                let (address, token) = (served.address, served.token.as_str());
                let (watchers, events) = (self.watchers, self.events);
                let row = fanout::measure(backend, address, token, watchers, events, self.spacing)
                    .await?;
                fan_out.push(row);
            }
        }
        Ok(ApiBenchReport {
            ops: self.ops,
            object_bytes: value.len(),
            spacing: self.spacing,
            rows,
            fan_out,
        })
    }
}

/// Raw `Store` creates and compare-and-swap updates per second (each worker its own key).
async fn store_rates(
    store: &Arc<dyn Store>,
    prefix: &str,
    value: &Bytes,
    concurrency: usize,
    per_worker: usize,
) -> Result<(f64, f64), ApiBenchError> {
    let create = rate(concurrency, per_worker, |w| async move {
        for i in 0..per_worker {
            store
                .create(&format!("{prefix}/c/{w}/{i}"), value.clone())
                .await?;
        }
        Ok(())
    })
    .await?;
    let starts = try_join_all((0..concurrency).map(|w| async move {
        let key = format!("{prefix}/u/{w}");
        let revision = store.create(&key, value.clone()).await?.mod_revision;
        Ok::<_, StoreError>((key, revision))
    }))
    .await?;
    let mut starts = starts.into_iter();
    let cas = rate(concurrency, per_worker, |_| {
        let (key, mut revision) = starts.next().expect("one key per worker");
        async move {
            for _ in 0..per_worker {
                revision = store
                    .update(&key, value.clone(), revision)
                    .await?
                    .mod_revision;
            }
            Ok(())
        }
    })
    .await?;
    Ok((create, cas))
}

/// HTTP creates (POST) and updates (PUT) per second, one connection per worker.
async fn http_rates(
    served: &Served,
    run: usize,
    concurrency: usize,
    per_worker: usize,
) -> Result<(f64, f64), ApiBenchError> {
    let open = || Connection::open(served.address, &served.token);
    let mut connections = try_join_all((0..concurrency).map(|_| open()))
        .await?
        .into_iter();
    let create = rate(concurrency, per_worker, |w| {
        let mut connection = connections.next().expect("one connection per worker");
        async move {
            for i in 0..per_worker {
                connection
                    .create(&install(&format!("c{run}-{w}-{i}")))
                    .await?;
            }
            Ok(())
        }
    })
    .await?;
    // Each worker's own object, created before the clock starts.
    let mut workers = try_join_all((0..concurrency).map(|w| async move {
        let mut connection = open().await?;
        let object = install(&format!("u{run}-{w}"));
        let revision = connection.create(&object).await?;
        Ok::<_, ApiBenchError>((connection, object, revision))
    }))
    .await?
    .into_iter();
    let update = rate(concurrency, per_worker, |_| {
        let (mut connection, mut object, mut revision) = workers.next().expect("one per worker");
        async move {
            for seq in 0..per_worker {
                next_version(&mut object, seq, revision);
                revision = connection.update(&object).await?;
            }
            Ok(())
        }
    })
    .await?;
    Ok((create, update))
}
