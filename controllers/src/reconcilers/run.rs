//! The controllers process: take part in the leader election and, while leader, run
//! every controller; stop them as soon as leadership is lost.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use kube_client::Client;
use tokio::task::JoinHandle;

use crate::reconcilers::leader::{Election, Role};

/// Starts the controllers; the future runs until they stop.
pub type Start = Box<dyn Fn(Client) -> BoxFuture<'static, ()> + Send + Sync>;

/// Runs `start` while this replica leads `election`, until `shutdown` completes.
pub async fn run_while_leader(
    client: Client,
    election: Election,
    start: Start,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut running: Option<JoinHandle<()>> = None;
    loop {
        let role = election.round(&client).await;
        match (&role, running.is_some()) {
            (Ok(Role::Leader), false) => {
                tracing::info!(identity = %election.identity, "became leader; starting controllers");
                running = Some(tokio::spawn(start(election.fenced(client.clone()))));
            }
            (Ok(Role::Follower), true) | (Err(_), true) => {
                tracing::warn!(identity = %election.identity, "lost leadership; stopping controllers");
                if let Some(handle) = running.take() {
                    handle.abort();
                }
            }
            _ => {}
        }
        if let Err(err) = role {
            tracing::warn!(error = %err, "leader election round failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(election.retry_period().max(Duration::from_millis(200))) => {}
            _ = &mut shutdown => break,
        }
    }
    if let Some(handle) = running.take() {
        handle.abort();
    }
}

/// Every controller this crate has, run together until they all stop. `public_urls` are
/// the API server addresses runners dial (written into install stacks): one, or each
/// replica's.
pub fn all_controllers(public_urls: Vec<String>) -> Start {
    Box::new(move |client| {
        let stack_options = crate::logic::install_stack::StackOptions {
            server_urls: public_urls.clone(),
        };
        Box::pin(async move {
            let policies: crate::reconcilers::plan_gate::PolicyCheck =
                std::sync::Arc::new(crate::logic::plan_policies::check_plan);
            // One watch of Installs for every controller that reads them; its followers
            // are taken before it runs.
            let mut installs = crate::caches::installs::InstallCache::default();
            let store = installs.store();
            let (for_installs, for_stacks, for_rollouts) =
                (installs.follow(), installs.follow(), installs.follow());
            tokio::join!(
                installs.watch(client.clone()),
                crate::reconcilers::app_controller::run(client.clone()),
                crate::reconcilers::plan_gate::run(client.clone(), policies.clone(), store.clone()),
                crate::reconcilers::install_controller::run(
                    client.clone(),
                    policies,
                    store.clone(),
                    for_installs
                ),
                crate::reconcilers::drift_controller::run(client.clone()),
                crate::reconcilers::rollout_controller::run(client.clone(), for_rollouts),
                crate::reconcilers::install_stack_controller::run(
                    client,
                    stack_options,
                    store,
                    for_stacks
                ),
            );
        })
    })
}
