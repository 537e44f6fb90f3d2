//! `outpost runner`: the agent the install stack boots on the customer's VM.

use outpost_runner::{Executors, RunnerArgs};

/// Runs the runner until it is stopped.
pub async fn run(args: RunnerArgs) -> anyhow::Result<()> {
    let executors = Executors::standard(&args).await?;
    outpost_runner::run(args, executors).await
}
