//! `/metrics` in the Prometheus text format: requests by verb, resource and code with
//! latency histograms, open and total watches, and store latency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::ServerState;

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

/// Store latency by operation.
#[derive(Default)]
pub struct StoreMetrics {
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
}

impl StoreMetrics {
    /// Records one operation.
    pub fn observe(&self, operation: &'static str, took: Duration) {
        self.latency
            .lock()
            .expect("metrics lock")
            .entry(operation)
            .or_default()
            .observe(took.as_secs_f64());
    }

    fn render(&self, out: &mut String) {
        for (op, h) in self.latency.lock().expect("metrics lock").iter() {
            h.render(
                out,
                "outpost_store_request_duration_seconds",
                &format!("operation=\"{op}\""),
            );
        }
    }
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
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
        out.push_str("# HELP outpost_store_request_duration_seconds Store latency by operation.\n# TYPE outpost_store_request_duration_seconds histogram\n");
        state.store_metrics.render(&mut out);
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
