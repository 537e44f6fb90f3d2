//! `outpost-runner`: the runner alone, a small binary for the customer's VM.
//!
//! It takes the same flags as `outpost runner` and runs the same code with the same
//! built-in executors; it only leaves out the control plane the `outpost` binary also
//! carries. One install's runner executes one Plan at a time, so it runs on tokio's
//! current-thread runtime (executors' blocking work goes to tokio's blocking pool).

use clap::Parser;
use outpost_runner::{Executors, RunnerArgs};

/// Outpost's runner: the egress-only agent that executes an install's approved Plans in
/// the customer's account, exactly once, under the customer's local policies, and signs
/// an audit log of every step.
///
/// It listens on no port: it dials `--server`, registers its `Runner` (public key,
/// capabilities), heartbeats, watches the install's Plans and takes approved ones one at
/// a time. Given several API server replicas (`--server A,B`), it uses one and moves to
/// the next when that one fails, without running any Plan twice. Its signing key,
/// journal and audit log live in `--state-dir`; results and audit events are buffered
/// there while the control plane is unreachable. Same flags as `outpost runner`.
#[derive(Parser)]
#[command(name = "outpost-runner", version)]
struct Cli {
    #[command(flatten)]
    runner: RunnerArgs,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Cli::parse().runner;
    let executors = Executors::standard(&args).await?;
    outpost_runner::run(args, executors).await
}
