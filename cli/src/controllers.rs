//! `outpost controllers`: the controllers process (what the Helm chart runs, and what
//! `outpost up` runs in-process). Replicas elect one leader through a Lease.

use outpost_controllers::leader::Election;
use outpost_controllers::run::{all_controllers, run_while_leader};

use crate::client::Connection;
use crate::server::shutdown_signal;

/// Arguments of `outpost controllers`.
#[derive(clap::Args)]
pub struct ControllersArgs {
    #[command(flatten)]
    connection: Connection,
    /// Namespace of the leader-election Lease `outpost-controllers`.
    #[arg(long, default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the election (default: host name and process id).
    #[arg(long)]
    identity: Option<String>,
    /// How long the leader's lease lasts without renewal: how long the other replicas
    /// wait before taking over from a leader that died. It renews every third of it.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    lease_seconds: u64,
    /// The HTTPS address runners dial, written into every install stack. Several
    /// (repeated, or comma-separated) are each API server replica's: the runner fails
    /// over between them. One is a load balancer in front of the replicas.
    #[arg(
        long,
        env = "OUTPOST_PUBLIC_URL",
        required = true,
        value_delimiter = ','
    )]
    public_url: Vec<String>,
}

/// Runs the controllers while this replica leads, until SIGINT or SIGTERM.
pub async fn run(args: ControllersArgs) -> anyhow::Result<()> {
    let client = args.connection.client().await?;
    let identity = args.identity.unwrap_or_else(default_identity);
    println!("outpost: controllers running as {identity}");
    let mut election = Election::new(&args.lease_namespace, "outpost-controllers", &identity);
    election.lease_duration = std::time::Duration::from_secs(args.lease_seconds);
    run_while_leader(
        client,
        election,
        all_controllers(args.public_url),
        shutdown_signal(),
    )
    .await;
    println!("outpost: controllers stopped");
    Ok(())
}

/// `HOST-PID`.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "outpost".into());
    format!("{host}-{}", std::process::id())
}
