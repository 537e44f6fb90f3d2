//! The API benchmark's figures and how they print.

use std::fmt;
use std::time::Duration;

use super::fanout::FanOutRow;

/// The goal: HTTP writes at concurrency 64 reach this share of raw etcd puts.
pub const THROUGHPUT_GOAL: f64 = 0.5;
/// The goal: 99 % of watch events reach every watcher within this.
pub const FAN_OUT_GOAL: Duration = Duration::from_millis(100);
/// The concurrency the throughput goal is stated at.
const GOAL_CONCURRENCY: usize = 64;

/// One measured write rate.
#[derive(Clone, Debug)]
pub struct ApiBenchRow {
    /// `raw-etcd`, `etcd` or `embedded`.
    pub backend: &'static str,
    /// `client` (raw `etcd-client`), `store` (the `Store` trait) or `http` (the API).
    pub path: &'static str,
    /// `put` (raw etcd), `create` or `cas` (store), `create` or `update` (HTTP).
    pub operation: &'static str,
    /// Concurrent clients.
    pub concurrency: usize,
    /// Operations per second.
    pub ops_per_sec: f64,
}

/// The API benchmark's figures.
#[derive(Clone, Debug)]
pub struct ApiBenchReport {
    /// Operations per write-rate figure.
    pub ops: usize,
    /// Bytes of one Install as the server stores it (the value of every raw write).
    pub object_bytes: usize,
    /// Milliseconds between the fan-out updates.
    pub spacing: Duration,
    /// Every write rate.
    pub rows: Vec<ApiBenchRow>,
    /// Watch fan-out latencies, per backend.
    pub fan_out: Vec<FanOutRow>,
}

impl ApiBenchReport {
    fn find(&self, backend: &str, path: &str, operation: &str, conc: usize) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.backend == backend
                    && r.path == path
                    && r.operation == operation
                    && r.concurrency == conc
            })
            .map(|r| r.ops_per_sec)
    }

    /// Raw etcd puts per second at `concurrency`: the baseline of every ratio.
    pub fn baseline(&self, concurrency: usize) -> Option<f64> {
        self.find("raw-etcd", "client", "put", concurrency)
    }

    /// The same backend's raw store rate an HTTP figure compares with.
    pub fn store_rate(&self, row: &ApiBenchRow) -> Option<f64> {
        let operation = match (row.path, row.operation) {
            ("http", "create") => "create",
            ("http", "update") => "cas",
            _ => return None,
        };
        self.find(row.backend, "store", operation, row.concurrency)
    }
}

fn ratio(value: f64, base: Option<f64>) -> String {
    base.map(|b| format!("{:.2}", value / b))
        .unwrap_or_else(|| "-".into())
}

fn millis(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
        .unwrap_or_else(|| "-".into())
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

impl fmt::Display for ApiBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "api benchmark: {} operations per figure, Installs of {} bytes as stored",
            self.ops, self.object_bytes
        )?;
        writeln!(
            f,
            "{:<9} {:<6} {:<9} {:>5} {:>10} {:>9} {:>12}",
            "backend", "path", "operation", "conc", "ops/s", "to-store", "to-raw-etcd"
        )?;
        for row in &self.rows {
            writeln!(
                f,
                "{:<9} {:<6} {:<9} {:>5} {:>10.0} {:>9} {:>12}",
                row.backend,
                row.path,
                row.operation,
                row.concurrency,
                row.ops_per_sec,
                ratio(row.ops_per_sec, self.store_rate(row)),
                ratio(row.ops_per_sec, self.baseline(row.concurrency)),
            )?;
        }
        // The goal is stated at 64; with other concurrencies, show the highest.
        let conc = self
            .rows
            .iter()
            .map(|r| r.concurrency)
            .filter(|&c| c <= GOAL_CONCURRENCY)
            .max()
            .or_else(|| self.rows.iter().map(|r| r.concurrency).min());
        if let Some(conc) = conc {
            for row in self
                .rows
                .iter()
                .filter(|r| r.path == "http" && r.concurrency == conc)
            {
                let share = self.baseline(conc).map(|b| row.ops_per_sec / b);
                writeln!(
                    f,
                    "goal: {} {} over HTTP at concurrency {conc} >= {:.2} of raw etcd puts: {} ({})",
                    row.backend,
                    row.operation,
                    THROUGHPUT_GOAL,
                    ratio(row.ops_per_sec, self.baseline(conc)),
                    verdict(share.is_some_and(|s| s >= THROUGHPUT_GOAL)),
                )?;
            }
        }
        if self.fan_out.is_empty() {
            return Ok(());
        }
        let first = &self.fan_out[0];
        writeln!(
            f,
            "\nwatch fan-out: {} watchers, {} updates {} ms apart; latency from just before \
             each write to each watcher reading its event",
            first.watchers,
            first.events,
            self.spacing.as_millis()
        )?;
        writeln!(
            f,
            "{:<9} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8}  goal",
            "backend", "received", "missed", "p50-ms", "p90-ms", "p99-ms", "max-ms"
        )?;
        for row in &self.fan_out {
            let p99 = row.quantile(0.99);
            let met = row.missed() == 0 && p99.is_some_and(|p| p <= FAN_OUT_GOAL);
            writeln!(
                f,
                "{:<9} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8}  p99 <= {} ms: {}",
                row.backend,
                row.latencies.len(),
                row.missed(),
                millis(row.quantile(0.5)),
                millis(row.quantile(0.9)),
                millis(p99),
                millis(row.latencies.last().copied()),
                FAN_OUT_GOAL.as_millis(),
                verdict(met),
            )?;
        }
        Ok(())
    }
}
