//! Limits on what one server answers at once, as kube-apiserver's max-in-flight
//! filter: requests in flight (reads and mutations counted apart; watches are
//! long-running and not counted) and open watches per user. Beyond a limit the answer
//! is 429 `TooManyRequests` with `Retry-After: 1`, which clients retry.
//!
//! A request holds its slot until its response body is dropped (written out or the
//! connection gone), so a client reading a large list slowly holds it too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::response::Response;

use crate::status::ApiError;

/// The limits (the server's `--max-requests-inflight`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InflightLimits {
    /// Reads (get, list, discovery) answered at once; 0 is no limit.
    pub reads: usize,
    /// Mutations (create, update, patch, delete) answered at once; 0 is no limit.
    pub mutations: usize,
    /// Watches one user has open at once; 0 is no limit.
    pub watches_per_user: usize,
}

impl Default for InflightLimits {
    /// kube-apiserver's `--max-requests-inflight 400` and
    /// `--max-mutating-requests-inflight 200`; 250 watches per user (see `SECURITY.md`).
    fn default() -> Self {
        InflightLimits {
            reads: 400,
            mutations: 200,
            watches_per_user: 250,
        }
    }
}

/// Which limit refused a request (the `reason` label of
/// `apiserver_rejected_requests_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `--max-requests-inflight`.
    Reads,
    /// `--max-mutating-requests-inflight`.
    Mutations,
    /// `--max-watches-per-user`.
    Watches,
}

impl Refusal {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Reads => "max_requests_inflight",
            Refusal::Mutations => "max_mutating_requests_inflight",
            Refusal::Watches => "max_watches_per_user",
        }
    }
}

/// The counters behind the limits, shared by every request.
#[derive(Default)]
pub struct Inflight {
    limits: InflightLimits,
    reads: Arc<AtomicUsize>,
    mutations: Arc<AtomicUsize>,
    watches: Arc<Mutex<HashMap<String, usize>>>,
    rejected: [AtomicU64; 3],
}

/// A held slot: released when dropped.
pub struct Slot {
    _held: Box<dyn Send + Sync + 'static>,
}

impl Slot {
    /// A slot releasing `held` when dropped.
    pub(crate) fn new(held: impl Send + Sync + 'static) -> Self {
        Slot {
            _held: Box::new(held),
        }
    }
}

struct CountSlot(Arc<AtomicUsize>);

impl Drop for CountSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

struct WatchSlot {
    watches: Arc<Mutex<HashMap<String, usize>>>,
    user: String,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut watches = self.watches.lock().expect("watch counts lock");
        if let Some(n) = watches.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                watches.remove(&self.user);
            }
        }
    }
}

impl Inflight {
    /// Counters enforcing `limits`.
    pub fn new(limits: InflightLimits) -> Self {
        Inflight {
            limits,
            ..Inflight::default()
        }
    }

    /// A slot for a request that is not long-running, or 429.
    pub fn admit(&self, mutating: bool) -> Result<Slot, ApiError> {
        let (count, limit, refusal) = if mutating {
            (&self.mutations, self.limits.mutations, Refusal::Mutations)
        } else {
            (&self.reads, self.limits.reads, Refusal::Reads)
        };
        let held = count.fetch_add(1, Ordering::AcqRel) + 1;
        let slot = CountSlot(count.clone());
        if limit > 0 && held > limit {
            drop(slot);
            return Err(self.refuse(
                refusal,
                "Too many requests, please try again later.".to_owned(),
            ));
        }
        Ok(Slot::new(slot))
    }

    /// A slot for one more watch of `user`, or 429.
    pub fn open_watch(&self, user: &str) -> Result<Slot, ApiError> {
        let limit = self.limits.watches_per_user;
        let mut watches = self.watches.lock().expect("watch counts lock");
        let open = watches.entry(user.to_owned()).or_default();
        if limit > 0 && *open >= limit {
            let open = *open;
            drop(watches);
            return Err(self.refuse(
                Refusal::Watches,
                format!(
                    "Too many watches: user {user:?} has {open} open, the limit is {limit}; close some and try again."
                ),
            ));
        }
        *open += 1;
        Ok(Slot::new(WatchSlot {
            watches: self.watches.clone(),
            user: user.to_owned(),
        }))
    }

    fn refuse(&self, refusal: Refusal, message: String) -> ApiError {
        self.rejected[refusal as usize].fetch_add(1, Ordering::Relaxed);
        ApiError::TooManyRequests(message)
    }

    /// Requests refused so far by `refusal`.
    pub fn rejected(&self, refusal: Refusal) -> u64 {
        self.rejected[refusal as usize].load(Ordering::Relaxed)
    }

    /// Reads and mutations in flight now.
    pub fn in_flight(&self) -> (usize, usize) {
        (
            self.reads.load(Ordering::Acquire),
            self.mutations.load(Ordering::Acquire),
        )
    }
}

/// `response` holding `slot` until its body is dropped.
pub fn hold(response: Response, slot: Slot) -> Response {
    response.map(|body| Body::new(Held { body, _slot: slot }))
}

/// A body and the slot it holds. Its length stays known (a `map_frame` wrapper hid it,
/// so every answer went out chunked instead of with a `Content-Length`).
struct Held {
    body: Body,
    _slot: Slot,
}

impl http_body::Body for Held {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_limited_and_released() {
        let inflight = Inflight::new(InflightLimits {
            reads: 1,
            mutations: 1,
            watches_per_user: 2,
        });
        let read = inflight.admit(false).expect("first read");
        let err = inflight.admit(false).err().expect("second read refused");
        assert_eq!(err.code(), http::StatusCode::TOO_MANY_REQUESTS);
        // Mutations are counted apart.
        let _write = inflight.admit(true).expect("a mutation");
        drop(read);
        let _read = inflight.admit(false).expect("a read once the first ended");
        assert_eq!(inflight.rejected(Refusal::Reads), 1);

        let _a = inflight.open_watch("alice").expect("watch 1");
        let b = inflight.open_watch("alice").expect("watch 2");
        assert!(inflight.open_watch("alice").is_err());
        let _other = inflight.open_watch("admin").expect("another user's watch");
        drop(b);
        let _c = inflight
            .open_watch("alice")
            .expect("a watch once one closed");
        assert_eq!(inflight.rejected(Refusal::Watches), 1);
    }

    #[test]
    fn zero_is_no_limit() {
        let inflight = Inflight::new(InflightLimits {
            reads: 0,
            mutations: 0,
            watches_per_user: 0,
        });
        let held: Vec<_> = (0..1000)
            .map(|_| inflight.admit(false).expect("unlimited"))
            .collect();
        assert_eq!(inflight.in_flight().0, held.len());
    }
}
