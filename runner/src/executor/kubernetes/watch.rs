//! Drift's wake-up: a watch on each object the last apply wrote.

use super::*;

/// A stream that yields whenever one of the `last_applied` objects is changed or
/// deleted, so drift is checked within seconds of an out-of-band edit. It also yields
/// once each object's watch is established (and again after each reconnection), since
/// changes made before then were not seen: check drift then too. Watches reconnect with
/// backoff and never end. Like every stream, it does nothing until polled.
pub async fn watch_objects(
    client: kube_client::Client,
    last_applied: &Value,
) -> anyhow::Result<impl Stream<Item = ()> + Send + use<>> {
    let objects = last_applied
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let targets = KubernetesExecutor::new(client.clone())
        .referenced(objects)
        .await?;
    let watches = targets.into_iter().map(|target| {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
        watcher(target.api(&client), config)
            .default_backoff()
            .filter_map(|event| async move {
                matches!(
                    event,
                    Ok(watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone)
                )
                .then_some(())
            })
            .boxed()
    });
    Ok(futures::stream::select_all(watches))
}
