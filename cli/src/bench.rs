//! `outpost bench`: benchmarks that print ratios against a baseline measured in the
//! same run, because the machines are shared and noisy. The benchmarks are
//! `outpost-bench`'s; this is their command line.

use std::time::Duration;

use outpost_bench::api::ApiBench;
use outpost_bench::store::StoreBench;

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
    /// Install creates and updates per second through the HTTP API on both store
    /// backends, against the same store's raw writes and raw etcd-client puts; then
    /// watch fan-out latency to many concurrent HTTP watchers.
    Api {
        /// Operations per write-rate figure.
        #[arg(long, default_value_t = 2_000)]
        ops: usize,
        /// Concurrencies (one connection per worker) to measure writes at.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<usize>,
        /// Concurrent watch streams for the fan-out (0 skips it).
        #[arg(long, default_value_t = 1_000)]
        watchers: usize,
        /// Updates the watchers receive.
        #[arg(long, default_value_t = 50)]
        events: usize,
        /// Milliseconds between those updates.
        #[arg(long, default_value_t = 50)]
        event_spacing_ms: u64,
        /// Use this etcd (`http://host:port`, repeatable) instead of starting a throwaway one.
        #[arg(long)]
        etcd: Vec<String>,
    },
    /// Time and store writes for the controllers to plan and roll out a new release to
    /// many installs (in-process API server on the embedded store, every controller, and
    /// a simulated runner that completes approved Plans at once).
    Controllers {
        /// Installs of the App.
        #[arg(long, default_value_t = 1_000)]
        installs: usize,
        /// Components of the App.
        #[arg(long, default_value_t = 10)]
        components: usize,
        /// Give up on a phase after this many seconds.
        #[arg(long, default_value_t = 1_800)]
        timeout_seconds: u64,
    },
    /// The control plane at fleet scale: `outpost server` and `outpost controllers` as
    /// child processes on each store, N installs with one simulated runner each (its own
    /// runner token, client and watch; it claims and completes Plans through the API).
    /// Prints the time to admit the fleet, the time until a one-component release's
    /// Plans are created, gated and seen by every runner, dispatch latency with every
    /// runner watching, store writes per Plan, the API server's and the controllers'
    /// memory, and raw etcd create transactions per second measured in the same run.
    Fleet {
        /// Installs, each with its simulated runner.
        #[arg(long, default_value_t = 10_000)]
        installs: usize,
        /// Components of the App.
        #[arg(long, default_value_t = 10)]
        components: usize,
        /// Stores to run on, in order.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "embedded,etcd"
        )]
        store: Vec<outpost_bench::fleet::Backend>,
        /// Approvals whose dispatch latency is measured (0 skips the dispatch phase).
        #[arg(long, default_value_t = 500)]
        dispatch_samples: usize,
        /// Milliseconds between two of those approvals.
        #[arg(long, default_value_t = 20)]
        dispatch_gap_ms: u64,
        /// Give up on a phase after this many seconds.
        #[arg(long, default_value_t = 1_800)]
        timeout_seconds: u64,
        /// Keep the server's and controllers' logs in this directory
        /// (`STORE-server.log`, `STORE-controllers.log`; `RUST_LOG` sets their level).
        /// With `OUTPOST_BENCH_HEAPTRACK=STORE-server` (or `STORE-controllers`) that process
        /// runs under heaptrack, its heap profile written here as `NAME.heaptrack.zst`; build
        /// with `--features system-allocator` (and debug info) so heaptrack sees allocations.
        #[arg(long)]
        logs: Option<std::path::PathBuf>,
    },
    /// Approval-to-claim latency of the real `outpost-runner` process (next to this
    /// executable) against an in-process API server on the embedded store, over
    /// loopback: Plans approved one at a time, then in bursts. Prints the distribution.
    Runner {
        /// Plans approved one at a time, each once the previous one finished.
        #[arg(long, default_value_t = 200)]
        plans: usize,
        /// Milliseconds between a Plan finishing and the next approval.
        #[arg(long, default_value_t = 100)]
        gap_ms: u64,
        /// Plans approved back to back per burst (0 skips bursts).
        #[arg(long, default_value_t = 20)]
        burst: usize,
        /// Bursts.
        #[arg(long, default_value_t = 5)]
        bursts: usize,
    },
    /// The `outpost-runner` binary's stripped size and a registered, idle runner's RSS,
    /// as ratios to the goals (25 MiB, 20 MiB), next to `outpost runner`'s.
    RunnerFootprint {
        /// Seconds each runner idles after registering before its memory is read.
        #[arg(long, default_value_t = 5)]
        idle_seconds: u64,
    },
}

/// Runs a benchmark and prints its report.
pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Controllers {
            installs,
            components,
            timeout_seconds,
        } => {
            let bench = outpost_bench::controllers::ControllersBench {
                installs,
                components,
                timeout: Duration::from_secs(timeout_seconds),
            };
            eprintln!(
                "running the controllers benchmark ({installs} installs x {components} components)..."
            );
            let report = bench.run().await?;
            print!("{report}");
        }
        BenchCommand::Fleet {
            installs,
            components,
            store,
            dispatch_samples,
            dispatch_gap_ms,
            timeout_seconds,
            logs,
        } => {
            let bench = outpost_bench::fleet::FleetBench {
                installs,
                components,
                backends: store,
                dispatch_samples,
                dispatch_gap: Duration::from_millis(dispatch_gap_ms.max(1)),
                timeout: Duration::from_secs(timeout_seconds),
                logs,
                open_files: crate::limits::raise_open_files()?,
            };
            eprintln!(
                "running the fleet benchmark ({installs} installs x {components} components)..."
            );
            let report = bench.run().await?;
            print!("{report}");
        }
        BenchCommand::Runner {
            plans,
            gap_ms,
            burst,
            bursts,
        } => {
            let bench = outpost_bench::runner::RunnerBench {
                plans,
                gap: Duration::from_millis(gap_ms),
                burst,
                bursts,
            };
            eprintln!(
                "running the runner dispatch benchmark ({plans} plans one at a time, \
                 {bursts} bursts of {burst})..."
            );
            let report = bench.run().await?;
            print!("{report}");
        }
        BenchCommand::RunnerFootprint { idle_seconds } => {
            let bench = outpost_bench::runner_footprint::RunnerFootprint {
                idle: Duration::from_secs(idle_seconds),
            };
            eprintln!("measuring the runner's footprint...");
            let report = bench.run().await?;
            print!("{report}");
        }
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
        BenchCommand::Api {
            ops,
            concurrency,
            watchers,
            events,
            event_spacing_ms,
            etcd,
        } => {
            let bench = ApiBench {
                ops,
                concurrency,
                watchers,
                events,
                spacing: Duration::from_millis(event_spacing_ms),
                etcd,
            };
            eprintln!(
                "running the API benchmark ({ops} operations per figure, {watchers} watchers)..."
            );
            let report = bench.run(outpost_kinds::admin_server_config).await?;
            print!("{report}");
        }
    }
    Ok(())
}
