//! Waits and pollers: poll with a deadline instead of sleeping "long enough".

use std::time::{Duration, Instant};

use outpost_api::{Plan, PlanPhase};

/// Polls `check` every 50 ms until it returns `Some`, or `None` once `timeout` has
/// passed (for callers that report the timeout themselves).
pub async fn wait_for<T>(
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `secs` naming `what`.
pub async fn eventually<T>(secs: u64, what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    wait_for(Duration::from_secs(secs), check)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// A Plan's phase, `None` before the API server set one.
pub fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
}

/// Calls `check` every 100 ms until it returns `Some`, or `None` once `timeout` has
/// passed: [`wait_for`] for tests without an async runtime.
pub fn wait_for_blocking<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Calls `check` every 100 ms until it returns `Some`, or panics after `secs` naming
/// `what`: [`eventually`] for tests without an async runtime.
pub fn eventually_blocking<T>(secs: u64, what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for_blocking(Duration::from_secs(secs), check)
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}
