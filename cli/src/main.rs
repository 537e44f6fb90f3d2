//! `outpost`: the control plane's processes and the command-line verbs.

mod bench;
mod client;
mod controllers;
mod manifests;
mod server;
mod up;

use clap::{Parser, Subcommand};

/// Outpost: a control plane for Bring Your Own Cloud software.
#[derive(Parser)]
#[command(name = "outpost", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run Outpost on this machine on the embedded store (state in ./.outpost/).
    Up(up::UpArgs),
    /// Run the API server (what the Helm chart runs), on etcd or the embedded store.
    Server(server::ServerArgs),
    /// Run the controllers against an API server; replicas elect one leader.
    Controllers(controllers::ControllersArgs),
    /// Measure Outpost against baselines measured in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Up(args) => up::run(args).await,
        Command::Server(args) => server::run(args).await,
        Command::Controllers(args) => controllers::run(args).await,
        Command::Bench(command) => bench::run(command).await,
    }
}
