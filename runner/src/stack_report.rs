//! Reports what the runner reads of its install stack: on start and every
//! `--stack-refresh-seconds`, the enabled roles go into the `Runner` status and, with the
//! stack's outputs, into the install's `InstallStack` status (`kubectl get installstacks`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::InstallStack;
use serde_json::json;

use crate::session::Session;

/// How soon a failed read or report is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// Reads the stack and reports it, forever. Does nothing without `--stack`.
pub async fn report_stack(session: Arc<Session>) {
    let Some(account) = &session.aws else {
        return std::future::pending().await;
    };
    let stacks: Api<InstallStack> =
        Api::namespaced(session.plans.clone().into_client(), &session.namespace);
    let every = Duration::from_secs(session.args.stack_refresh_seconds.max(1));
    let mut ticks = tokio::time::interval(every);
    let mut reported = None;
    loop {
        ticks.tick().await;
        let stack = match account.refresh().await {
            Ok(stack) => stack,
            Err(e) => {
                tracing::warn!(stack = %account.stack_name, error = %format!("{e:#}"), "cannot read the install stack");
                ticks.reset_after(RETRY);
                continue;
            }
        };
        let enabled = stack.enabled_roles();
        if reported.as_ref() == Some(&stack) {
            continue;
        }
        let runner = json!({"status": {"enabledRoles": enabled}});
        let params = PatchParams::default();
        let runner_patched = session
            .runners
            .patch_status(&session.name, &params, &Patch::Merge(&runner))
            .await;
        let install_stack = json!({"status": {
            "enabledRoles": enabled,
            "outputs": stack.outputs,
            "reportedAt": Time(jiff::Timestamp::now()),
        }});
        let stack_patched = stacks
            .patch_status(&session.install, &params, &Patch::Merge(&install_stack))
            .await;
        match (runner_patched, stack_patched) {
            (Ok(_), Ok(_)) => {
                tracing::info!(roles = ?enabled, "reported the install stack");
                reported = Some(stack);
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot report the install stack; retrying");
                ticks.reset_after(RETRY);
            }
        }
    }
}
