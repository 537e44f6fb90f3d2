//! `outpost`: the control plane's processes and the command-line verbs. Also the
//! kubectl plugin `kubectl-outpost` (the same binary under that name, so that
//! `kubectl outpost status` works).
//!
//! The processes and commands in the design: `docs/ARCHITECTURE.md` ("Commands").

mod approval;
mod audit;
mod bench;
mod client;
mod controllers;
mod diff;
mod drift;
mod limits;
mod logs;
mod manifests;
mod output;
mod policy;
mod request;
mod rollout;
mod runner;
mod server;
mod stack;
mod status;
mod token;
mod up;
mod wait;

/// mimalloc instead of glibc's allocator: the API server builds and drops many small JSON
/// values per request and event, and with glibc `free` and its chunk merging took a third
/// of the server's CPU in `outpost bench fleet` (1000 installs, etcd; see
/// docs/ARCHITECTURE.md, "Allocator"). The `system-allocator` feature keeps glibc's, for
/// heap profilers that interpose `malloc` (heaptrack; see `outpost bench fleet --help`).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Subcommand};

/// Outpost: a control plane for Bring Your Own Cloud software.
#[derive(clap::Parser)]
#[command(name = "outpost", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run Outpost on this machine, with an example install driven to Active.
    ///
    /// Starts the API server and controllers (embedded store), an API-only stand-in
    /// cluster, local vendor and install registries (`docker-registry`, if installed; the
    /// example image is pushed once) and the example install's runner (`--bwrap` and
    /// `--terraform` when bubblewrap and terraform are on PATH); applies `manifests/`;
    /// shows the install's phases and each Plan as it finishes until it is Active; then
    /// prints the dashboard URL, an admin token and the kubeconfigs. State lives in
    /// `--data-dir` (./.outpost/): a second run resumes without re-creating anything.
    /// Ctrl-C (SIGINT) or SIGTERM stops the runner and registries, then the servers.
    Up(up::UpArgs),
    /// Run the API server (what the Helm chart runs), on etcd or the embedded store.
    Server(server::ServerArgs),
    /// Run the controllers against an API server; replicas elect one leader.
    Controllers(controllers::ControllersArgs),
    /// Print an install's CloudFormation install stack (JSON) for the customer to create.
    ///
    /// The stack's NoEcho `RunnerToken` parameter takes the install's runner token: mint it
    /// with `outpost token NS/INSTALL` and give it to the customer with the template. The
    /// stack keeps it in the customer's Secrets Manager, readable by the runner's instance
    /// role only; the runner VM's user data carries the secret's ARN, never the token.
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
    Runner(Box<outpost_runner::RunnerArgs>),
    /// Check an install's signed audit log.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// The fleet at a glance: one row per install (phase, components in sync, drifted,
    /// failed, Plans awaiting approval, runner online and last heartbeat).
    Status(status::StatusArgs),
    /// Deploy a component of an install again, with its desired state rendered now.
    ///
    /// Adds a request to the Install; the Install controller makes the Plan
    /// `<install>-deploy-<component>-<millis>`, which goes through the gate (approval in
    /// `prompt` mode) to the runner. `--wait` prints its phase changes until it finishes.
    Deploy(request::DeployArgs),
    /// Run an action (one with a `manual` trigger) on an install.
    ///
    /// `--role R` is the runtime override, step 1 of the role precedence chain: the Plan
    /// runs under R if the App declares it, and is denied otherwise.
    Trigger(request::TriggerArgs),
    /// Approve the diff of a Plan awaiting approval (shown first); the approval binds to
    /// that diff's hash. `--selector L --diff-hash H` approves every matching Plan whose
    /// diff is exactly H.
    Approve(approval::ApproveArgs),
    /// Deny the diff of a Plan awaiting approval, recording why.
    Deny(approval::DenyArgs),
    /// Print a Plan's real diff (computed by its runner) like `terraform plan` does, with
    /// the policies' verdicts on it and its hash.
    Diff(diff::DiffArgs),
    /// Show drift: each DriftReport with the fields that differ (applied vs live).
    Drift(drift::DriftArgs),
    /// Print what a Plan's execution printed (`status.log`); `-f` follows it to the end.
    Logs(logs::LogsArgs),
    /// Wait until an install has converged on its latest spec, printing each Plan as it
    /// finishes.
    ///
    /// Returns once the Install controller has seen the install's latest spec, none of
    /// its Plans is unfinished and it is Active; fails (exit 1) if it turns Degraded
    /// (naming the failed Plan) or after `--timeout`. Plans awaiting approval are named
    /// with the command that approves them.
    Wait(wait::WaitArgs),
    /// Steer a Rollout (a release moved across installs in waves): pause, resume, abort,
    /// or show its waves.
    ///
    /// A Rollout sets each install's `spec.release` wave by wave (waves ordered by a
    /// label such as `ring`, `spec.waveSize` installs each, `spec.pauseSeconds` apart) and
    /// halts by itself when a wave has more failed or policy-denied installs than
    /// `spec.maxFailures`. Installs not moved yet stay on their release.
    #[command(subcommand)]
    Rollout(rollout::RolloutCommand),
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // Run as `kubectl-outpost` (kubectl's plugin naming), help and errors say `kubectl outpost`.
    let invoked_as_plugin = std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_name()
                .map(|n| n.to_string_lossy().starts_with("kubectl-outpost"))
        })
        .unwrap_or(false);
    let mut command = Cli::command();
    if invoked_as_plugin {
        command = command.name("kubectl-outpost").bin_name("kubectl outpost");
    }
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Up(args) => up::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Server(args) => server::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Controllers(args) => controllers::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Stack(args) => stack::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Token(args) => token::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Bench(command) => bench::run(command).await.map(|()| ExitCode::SUCCESS),
        Command::Policy(command) => Ok(policy::run(command)),
        Command::Runner(args) => runner::run(*args).await.map(|()| ExitCode::SUCCESS),
        Command::Audit(command) => audit::run(command).await,
        Command::Status(args) => status::run(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Deploy(args) => request::deploy(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Trigger(args) => request::trigger(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Approve(args) => approval::approve(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Diff(args) => diff::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Deny(args) => approval::deny(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Drift(args) => drift::run(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Logs(args) => logs::run(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Wait(args) => wait::run(args)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
        Command::Rollout(command) => rollout::run(command)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(client::explain),
    }
}
