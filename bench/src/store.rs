//! `outpost bench store`: creates and compare-and-swap updates per second on both store
//! backends, against raw `etcd-client` puts and create transactions in the same run.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use futures::future::try_join_all;

use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, EtcdStore, Store, StoreError};
use outpost_testing::ThrowawayEtcd;

/// The store benchmark: creates ("puts") and compare-and-swap updates per second at
/// several concurrencies, for both backends, next to raw `etcd-client` puts (the
/// baseline of every ratio) and raw create-if-absent transactions measured in the same
/// run, so the figures can be read as ratios on a noisy machine.
#[derive(Clone, Debug)]
pub struct StoreBench {
    /// Operations per measurement.
    pub ops: usize,
    /// Concurrencies to measure at.
    pub concurrency: Vec<usize>,
    /// Bytes per value.
    pub value_size: usize,
    /// An etcd to use (`http://host:port`); a throwaway one is started when empty.
    pub etcd: Vec<String>,
}

impl Default for StoreBench {
    fn default() -> Self {
        StoreBench {
            ops: 5_000,
            concurrency: vec![1, 64],
            value_size: 256,
            etcd: Vec::new(),
        }
    }
}

/// One measured figure.
#[derive(Clone, Debug)]
pub struct BenchRow {
    /// `raw-etcd`, `etcd` or `embedded`.
    pub backend: &'static str,
    /// `put` or `txn` (raw etcd), `create` or `cas`.
    pub operation: &'static str,
    /// Concurrent clients.
    pub concurrency: usize,
    /// Operations per second.
    pub ops_per_sec: f64,
}

/// The benchmark's figures.
#[derive(Clone, Debug)]
pub struct StoreBenchReport {
    /// Operations per measurement.
    pub ops: usize,
    /// Every figure.
    pub rows: Vec<BenchRow>,
}

impl StoreBenchReport {
    /// Raw etcd puts per second at `concurrency`.
    pub fn baseline(&self, concurrency: usize) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.backend == "raw-etcd" && r.operation == "put" && r.concurrency == concurrency
            })
            .map(|r| r.ops_per_sec)
    }
}

impl fmt::Display for StoreBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "store benchmark: {} operations per figure", self.ops)?;
        writeln!(
            f,
            "{:<10} {:<9} {:>5} {:>12} {:>18}",
            "backend", "operation", "conc", "ops/s", "ratio to raw etcd"
        )?;
        for row in &self.rows {
            let ratio = self
                .baseline(row.concurrency)
                .map(|b| format!("{:.2}", row.ops_per_sec / b))
                .unwrap_or_else(|| "-".into());
            writeln!(
                f,
                "{:<10} {:<9} {:>5} {:>12.0} {:>18}",
                row.backend, row.operation, row.concurrency, row.ops_per_sec, ratio
            )?;
        }
        Ok(())
    }
}

impl StoreBench {
    /// Runs every measurement.
    pub async fn run(&self) -> Result<StoreBenchReport, StoreError> {
        let measured = MeasuredEtcd::connect(&self.etcd).await?;
        let (endpoints, raw) = (&measured.endpoints, measured.raw.clone());
        let etcd: Arc<dyn Store> = Arc::new(EtcdStore::connect(endpoints).await?);
        let dir = tempfile::tempdir().map_err(StoreError::backend)?;
        let embedded = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).await?;
        let embedded: Arc<dyn Store> = Arc::new(embedded);
        let value = Bytes::from(vec![b'x'; self.value_size]);

        let mut rows = Vec::new();
        for (run, &concurrency) in self.concurrency.iter().enumerate() {
            let concurrency = concurrency.max(1);
            let per_worker = (self.ops / concurrency).max(1);
            let prefix = format!("/bench/{}/{run}", std::process::id());
            let started = Instant::now();
            try_join_all((0..concurrency).map(|w| {
                let (mut kv, value, prefix) = (raw.kv_client(), value.clone(), prefix.clone());
                async move {
                    for i in 0..per_worker {
                        let key = format!("{prefix}/raw/{w}/{i}");
                        kv.put(key, value.to_vec(), None)
                            .await
                            .map_err(StoreError::backend)?;
                    }
                    Ok::<_, StoreError>(())
                }
            }))
            .await?;
            rows.push(row("raw-etcd", "put", concurrency, per_worker, started));
            // etcd's own cost of a create-if-absent transaction, which is what a create is.
            let started = Instant::now();
            create_txns(
                &raw,
                &format!("{prefix}/rawtxn"),
                per_worker,
                concurrency,
                &value,
            )
            .await?;
            rows.push(row("raw-etcd", "txn", concurrency, per_worker, started));
            for (name, store) in [("etcd", &etcd), ("embedded", &embedded)] {
                let started = Instant::now();
                try_join_all((0..concurrency).map(|w| {
                    let (store, value, prefix) = (store.clone(), value.clone(), prefix.clone());
                    async move {
                        for i in 0..per_worker {
                            store
                                .create(&format!("{prefix}/{name}/c/{w}/{i}"), value.clone())
                                .await?;
                        }
                        Ok::<_, StoreError>(())
                    }
                }))
                .await?;
                rows.push(row(name, "create", concurrency, per_worker, started));
                let started = Instant::now();
                try_join_all((0..concurrency).map(|w| {
                    let (store, value, prefix) = (store.clone(), value.clone(), prefix.clone());
                    async move {
                        let key = format!("{prefix}/{name}/u/{w}");
                        let mut revision = store.create(&key, value.clone()).await?.mod_revision;
                        for _ in 0..per_worker {
                            revision = store
                                .update(&key, value.clone(), revision)
                                .await?
                                .mod_revision;
                        }
                        Ok::<_, StoreError>(())
                    }
                }))
                .await?;
                rows.push(row(name, "cas", concurrency, per_worker, started));
            }
        }
        Ok(StoreBenchReport {
            ops: self.ops,
            rows,
        })
    }
}

/// The etcd a benchmark measures: the endpoints it was given, or a throwaway etcd it
/// started (stopped when this is dropped), and a raw `etcd-client` of it.
pub(crate) struct MeasuredEtcd {
    pub(crate) endpoints: Vec<String>,
    pub(crate) raw: etcd_client::Client,
    _throwaway: Option<ThrowawayEtcd>,
}

impl MeasuredEtcd {
    /// Connects to `given`, or to a throwaway etcd started here when it is empty.
    pub(crate) async fn connect(given: &[String]) -> Result<MeasuredEtcd, StoreError> {
        let throwaway = if given.is_empty() {
            Some(ThrowawayEtcd::start().await.map_err(StoreError::backend)?)
        } else {
            None
        };
        let endpoints = match &throwaway {
            Some(etcd) => vec![etcd.endpoint().to_owned()],
            None => given.to_vec(),
        };
        let raw = etcd_client::Client::connect(&endpoints, None)
            .await
            .map_err(StoreError::backend)?;
        Ok(MeasuredEtcd {
            endpoints,
            raw,
            _throwaway: throwaway,
        })
    }
}

/// Raw etcd create-if-absent transactions per second (what a create is), straight
/// through `etcd-client`: `ops` transactions of `value_size` bytes from `concurrency`
/// workers, against `endpoints`, or a throwaway etcd when none is given. The baseline
/// of the benchmarks' store write rates.
pub async fn raw_etcd_create_txns(
    endpoints: &[String],
    ops: usize,
    concurrency: usize,
    value_size: usize,
) -> Result<f64, StoreError> {
    let measured = MeasuredEtcd::connect(endpoints).await?;
    let raw = measured.raw.clone();
    let concurrency = concurrency.max(1);
    let per_worker = (ops / concurrency).max(1);
    let prefix = format!("/bench/{}/rawtxn-{}", std::process::id(), uuid_like());
    let value = Bytes::from(vec![b'x'; value_size]);
    let started = Instant::now();
    create_txns(&raw, &prefix, per_worker, concurrency, &value).await?;
    Ok((per_worker * concurrency) as f64 / started.elapsed().as_secs_f64())
}

/// A short random suffix, so repeated runs against one etcd use fresh keys.
fn uuid_like() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// `per_worker` create-if-absent transactions from each of `concurrency` workers.
async fn create_txns(
    raw: &etcd_client::Client,
    prefix: &str,
    per_worker: usize,
    concurrency: usize,
    value: &Bytes,
) -> Result<(), StoreError> {
    try_join_all((0..concurrency).map(|w| {
        let mut kv = raw.kv_client();
        async move {
            for i in 0..per_worker {
                let key = format!("{prefix}/{w}/{i}");
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key, value.to_vec(), None)]);
                kv.txn(txn).await.map_err(StoreError::backend)?;
            }
            Ok::<_, StoreError>(())
        }
    }))
    .await?;
    Ok(())
}

fn row(
    backend: &'static str,
    operation: &'static str,
    concurrency: usize,
    per_worker: usize,
    started: Instant,
) -> BenchRow {
    let ops = (concurrency * per_worker) as f64;
    BenchRow {
        backend,
        operation,
        concurrency,
        ops_per_sec: ops / started.elapsed().as_secs_f64(),
    }
}
