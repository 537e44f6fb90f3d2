//! `outpost bench`: benchmarks that print ratios against a baseline measured in the
//! same run, because the machines are shared and noisy.

use outpost_apiserver::storage::StoreBench;

/// The benchmarks.
#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Creates and compare-and-swap updates per second on both store backends, against
    /// raw etcd-client puts.
    Store {
        /// Operations per figure.
        #[arg(long, default_value_t = 5_000)]
        ops: usize,
        /// Concurrencies to measure at.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<usize>,
        /// Bytes per value.
        #[arg(long, default_value_t = 256)]
        value_size: usize,
        /// Use this etcd (`http://host:port`, repeatable) instead of starting a throwaway one.
        #[arg(long)]
        etcd: Vec<String>,
    },
}

/// Runs a benchmark and prints its report.
pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Store {
            ops,
            concurrency,
            value_size,
            etcd,
        } => {
            let bench = StoreBench {
                ops,
                concurrency,
                value_size,
                etcd,
            };
            eprintln!("running the store benchmark ({ops} operations per figure)...");
            let report = bench.run().await?;
            print!("{report}");
        }
    }
    Ok(())
}
