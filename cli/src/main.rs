//! `outpost`: the control plane's processes and the command-line verbs.

mod audit;
mod bench;
mod bench_controllers;
mod bench_runner;
mod bench_runner_footprint;
mod client;
mod controllers;
mod manifests;
mod policy;
mod runner;
mod server;
mod stack;
mod token;
mod up;

use std::process::ExitCode;

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
    /// Print an install's CloudFormation install stack (JSON) for the customer to create.
    ///
    /// The stack's `RunnerToken` parameter takes the install's runner token: mint it with
    /// `outpost token NS/INSTALL` and give it to the customer with the template.
    Stack(stack::StackArgs),
    /// Mint an install's runner token (admins only) and print it.
    ///
    /// The token is shown only this once: the control plane keeps only its SHA-256 hash.
    /// Minting again rotates it: the previous token is refused (401) from then on. The
    /// token goes into the install stack's `RunnerToken` parameter (`outpost stack`).
    Token(token::TokenArgs),
    /// Measure Outpost against baselines measured in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Test Rego policies against an input, like `conftest test`.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Run the runner of one install (what the install stack boots on the customer's VM).
    Runner(outpost_runner::RunnerArgs),
    /// Check an install's signed audit log.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Up(args) => up::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Server(args) => server::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Controllers(args) => controllers::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Stack(args) => stack::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Token(args) => token::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Bench(command) => bench::run(command).await.map(|()| ExitCode::SUCCESS),
        Command::Policy(command) => Ok(policy::run(command)),
        Command::Runner(args) => runner::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Audit(command) => audit::run(command).await,
    }
}
