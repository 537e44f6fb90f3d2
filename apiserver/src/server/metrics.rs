//! `/metrics` in the Prometheus text format: requests by verb, resource and code with
//! latency histograms, open and total watches, and store latency. Names are
//! kube-apiserver's where it has the same metric (`apiserver_request_total`,
//! `apiserver_storage_objects`, …), else `apiserver_` and what it counts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::ServerState;
use crate::storage::Observation;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (bound, count) in BUCKETS.iter().zip(self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Default)]
struct Counters {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<(String, String), Histogram>,
    watches_open: BTreeMap<String, i64>,
    watches_total: BTreeMap<String, u64>,
}

/// Store latency by operation, and writes by operation, resource and result.
#[derive(Default)]
pub struct StoreMetrics {
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    writes: Mutex<BTreeMap<(&'static str, String, &'static str), u64>>,
}

impl StoreMetrics {
    /// Records one operation.
    pub fn observe(&self, op: Observation<'_>) {
        self.latency
            .lock()
            .expect("metrics lock")
            .entry(op.operation)
            .or_default()
            .observe(op.took.as_secs_f64());
        if matches!(op.operation, "create" | "update" | "delete") {
            // Keys are /registry/<group>/<plural>/...: the plural names the resource.
            let resource = op.key.split('/').nth(3).unwrap_or_default();
            let result = if op.ok { "ok" } else { "refused" };
            *self
                .writes
                .lock()
                .expect("metrics lock")
                .entry((op.operation, resource.to_owned(), result))
                .or_default() += 1;
        }
    }

    fn render(&self, out: &mut String) {
        out.push_str("# HELP apiserver_store_request_duration_seconds Store latency by operation.\n# TYPE apiserver_store_request_duration_seconds histogram\n");
        for (op, h) in self.latency.lock().expect("metrics lock").iter() {
            h.render(
                out,
                "apiserver_store_request_duration_seconds",
                &format!("operation=\"{op}\""),
            );
        }
        out.push_str("# HELP apiserver_store_writes_total Store writes by operation, resource and result (refused: a failed precondition or an error).\n# TYPE apiserver_store_writes_total counter\n");
        for ((op, resource, result), n) in self.writes.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "apiserver_store_writes_total{{operation=\"{op}\",resource=\"{resource}\",result=\"{result}\"}} {n}"
            );
        }
    }
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

/// The in-flight limits' gauges and refusals, and connections closed by their clock.
fn render_limits(out: &mut String, state: &ServerState) {
    use super::inflight::Refusal;
    let (reads, mutations) = state.inflight.in_flight();
    let _ = writeln!(
        out,
        "# HELP apiserver_current_inflight_requests Requests in flight by kind (watches are not counted).\n# TYPE apiserver_current_inflight_requests gauge\napiserver_current_inflight_requests{{request_kind=\"readOnly\"}} {reads}\napiserver_current_inflight_requests{{request_kind=\"mutating\"}} {mutations}"
    );
    out.push_str("# HELP apiserver_rejected_requests_total Requests answered 429 by the limit that refused them.\n# TYPE apiserver_rejected_requests_total counter\n");
    for refusal in [Refusal::Reads, Refusal::Mutations, Refusal::Watches] {
        let _ = writeln!(
            out,
            "apiserver_rejected_requests_total{{reason=\"{}\"}} {}",
            refusal.label(),
            state.inflight.rejected(refusal)
        );
    }
    let (header, idle) = state.connection_metrics.closed();
    let _ = writeln!(
        out,
        "# HELP apiserver_connections_closed_total Connections the server closed by their clock.\n# TYPE apiserver_connections_closed_total counter\napiserver_connections_closed_total{{reason=\"header_timeout\"}} {header}\napiserver_connections_closed_total{{reason=\"idle_timeout\"}} {idle}"
    );
}

impl Metrics {
    pub(crate) fn observe_request(
        &self,
        verb: &str,
        resource: &str,
        code: StatusCode,
        took: Duration,
    ) {
        let mut c = self.counters.lock().expect("metrics lock");
        *c.requests
            .entry((verb.to_owned(), resource.to_owned(), code.as_u16()))
            .or_default() += 1;
        c.latency
            .entry((verb.to_owned(), resource.to_owned()))
            .or_default()
            .observe(took.as_secs_f64());
    }

    pub(crate) fn watch_started(&self, resource: &str) {
        let mut c = self.counters.lock().expect("metrics lock");
        *c.watches_open.entry(resource.to_owned()).or_default() += 1;
        *c.watches_total.entry(resource.to_owned()).or_default() += 1;
    }

    pub(crate) fn watch_ended(&self, resource: &str) {
        let mut c = self.counters.lock().expect("metrics lock");
        *c.watches_open.entry(resource.to_owned()).or_default() -= 1;
    }

    pub(crate) fn render(&self, state: &ServerState) -> Response {
        let mut out = String::new();
        {
            let c = self.counters.lock().expect("metrics lock");
            out.push_str("# HELP apiserver_request_total Requests by verb, resource and HTTP code.\n# TYPE apiserver_request_total counter\n");
            for ((verb, resource, code), n) in &c.requests {
                let _ = writeln!(
                    out,
                    "apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {n}"
                );
            }
            out.push_str("# HELP apiserver_request_duration_seconds Request latency by verb and resource.\n# TYPE apiserver_request_duration_seconds histogram\n");
            for ((verb, resource), h) in &c.latency {
                h.render(
                    &mut out,
                    "apiserver_request_duration_seconds",
                    &format!("verb=\"{verb}\",resource=\"{resource}\""),
                );
            }
            out.push_str("# HELP apiserver_registered_watchers Open watches by resource.\n# TYPE apiserver_registered_watchers gauge\n");
            for (resource, n) in &c.watches_open {
                let _ = writeln!(
                    out,
                    "apiserver_registered_watchers{{resource=\"{resource}\"}} {n}"
                );
            }
            out.push_str("# HELP apiserver_watches_total Watches opened by resource.\n# TYPE apiserver_watches_total counter\n");
            for (resource, n) in &c.watches_total {
                let _ = writeln!(
                    out,
                    "apiserver_watches_total{{resource=\"{resource}\"}} {n}"
                );
            }
        }
        render_limits(&mut out, state);
        for source in state
            .extra_metrics
            .read()
            .expect("metrics sources lock")
            .iter()
        {
            source.render(&mut out);
        }
        state.store_metrics.render(&mut out);
        out.push_str("# HELP apiserver_storage_objects Stored objects by resource (the watch cache holds every one).\n# TYPE apiserver_storage_objects gauge\n");
        let mut stats: Vec<_> = state
            .served
            .current()
            .caches
            .values()
            .map(|c| (c.resource_type().plural.clone(), c.stats()))
            .collect();
        stats.sort_by(|a, b| a.0.cmp(&b.0));
        for (resource, s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_storage_objects{{resource=\"{resource}\"}} {}",
                s.objects
            );
        }
        out.push_str("# HELP apiserver_watch_cache_bytes Bytes of cached objects by resource.\n# TYPE apiserver_watch_cache_bytes gauge\n");
        for (resource, s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_watch_cache_bytes{{resource=\"{resource}\"}} {}",
                s.bytes
            );
        }
        out.push_str("# HELP apiserver_watch_cache_window Recent changes kept for watches by resource.\n# TYPE apiserver_watch_cache_window gauge\n");
        for (resource, s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_watch_cache_window{{resource=\"{resource}\"}} {}",
                s.window
            );
        }
        out.push_str("# HELP apiserver_watch_cache_window_bytes Bytes of the objects the window's changes carry, by resource.\n# TYPE apiserver_watch_cache_window_bytes gauge\n");
        for (resource, s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_watch_cache_window_bytes{{resource=\"{resource}\"}} {}",
                s.window_bytes
            );
        }
        out.push_str("# HELP apiserver_watch_cache_objects_read_total Objects lists and gets looked at in the cache by resource (one index value's when the request pins it).\n# TYPE apiserver_watch_cache_objects_read_total counter\n");
        for (resource, s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_watch_cache_objects_read_total{{resource=\"{resource}\"}} {}",
                s.objects_read
            );
        }
        out.push_str("# HELP apiserver_watch_cache_watchers Watchers by resource, filed under one index value (indexed) or of every change.\n# TYPE apiserver_watch_cache_watchers gauge\n");
        for (resource, s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_watch_cache_watchers{{resource=\"{resource}\",filed=\"indexed\"}} {}",
                s.indexed_watchers
            );
            let _ = writeln!(
                out,
                "apiserver_watch_cache_watchers{{resource=\"{resource}\",filed=\"all\"}} {}",
                s.other_watchers
            );
        }
        let _ = writeln!(
            out,
            "# HELP apiserver_watch_cache_synced_revision Every store change up to this revision is in the caches.\n# TYPE apiserver_watch_cache_synced_revision gauge\napiserver_watch_cache_synced_revision {}",
            state.progress.synced()
        );
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            )],
            out,
        )
            .into_response()
    }
}
