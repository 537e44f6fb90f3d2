//! Retrying calls to the control plane with jittered exponential backoff (`backon`).

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};

/// Whether an API error may go away by itself (network, 5xx, 429) rather than being
/// the server's answer (4xx).
pub fn is_transient(error: &kube_client::Error) -> bool {
    match error {
        kube_client::Error::Api(status) => status.code >= 500 || status.code == 429,
        _ => true,
    }
}

/// The backoff every call uses: 100 ms doubling to 5 s, with jitter, `attempts` tries.
pub fn backoff(attempts: usize) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .with_max_times(attempts)
}

/// Runs `call`, retrying transient failures up to `attempts` times.
pub async fn retry<T, F, Fut>(attempts: usize, call: F) -> Result<T, kube_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube_client::Error>>,
{
    call.retry(backoff(attempts))
        .sleep(tokio::time::sleep)
        .when(is_transient)
        .notify(|err, after| tracing::debug!(error = %err, ?after, "control plane call failed; retrying"))
        .await
}
