//! `outpost server`: the API server process.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::builder::TypedValueParser as _;
use outpost_apiserver::auth::TokenFile;
use outpost_apiserver::auth::eks_token::EksTokens;
use outpost_apiserver::limits::{self, Limits};
use outpost_apiserver::registry::Registry;
use outpost_apiserver::server::{ApiServer, ConnectionLimits, InflightLimits, ServerConfig};
use outpost_apiserver::storage::{EmbeddedOptions, EtcdTls, StoreLocation};

/// Arguments of `outpost server`.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where objects live: `embedded:DIR` or `etcd://HOST:PORT[,HOST:PORT...]`.
    #[arg(long, default_value = "embedded:.outpost/store")]
    store: StoreLocation,
    /// PEM CA bundle that signed the etcd members' serving certificates: speak TLS
    /// (https) to etcd. Like kube-apiserver's `--etcd-cafile`.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// PEM client certificate for etcd's client-certificate authentication
    /// (`--client-cert-auth`); needs `--etcd-keyfile` and `--etcd-cafile`.
    #[arg(long, requires_all = ["etcd_keyfile", "etcd_cafile"])]
    etcd_certfile: Option<PathBuf>,
    /// PEM private key of `--etcd-certfile`.
    #[arg(long, requires = "etcd_certfile")]
    etcd_keyfile: Option<PathBuf>,
    /// Bearer tokens, one per line: `token,user,uid,"group1,group2"`. Members of
    /// `outpost:admins` may do everything, of `outpost:viewers` read and watch.
    #[arg(long)]
    tokens: PathBuf,
    /// PEM certificate chain for HTTPS (plain HTTP is allowed only on loopback).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Revisions of history the embedded store keeps for watches and paged reads.
    #[arg(long, default_value_t = EmbeddedOptions::default().history)]
    embedded_history: i64,
    /// MiB of the embedded store's file kept in memory (reads are answered from the
    /// watch caches; this serves writes).
    #[arg(long, default_value_t = EmbeddedOptions::default().cache_bytes >> 20)]
    embedded_cache_mib: usize,
    /// Seconds between compactions of etcd's history, each to the revision seen one
    /// interval earlier, as kube-apiserver's `--etcd-compaction-interval` (5 minutes);
    /// 0 leaves compaction to etcd (`--auto-compaction-retention`). Without any, etcd's
    /// database grows with every write until its quota refuses them all.
    #[arg(long, default_value_t = 300)]
    etcd_compaction_interval_seconds: u64,
    /// Changes kept per resource type for watches that resume from an older
    /// resourceVersion (older ones get 410 Gone and relist).
    #[arg(long, default_value_t = 10_000)]
    watch_window: usize,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 10)]
    watch_bookmark_seconds: u64,
    /// Also serve the common Kubernetes kinds (core v1 ConfigMap, Secret, Service,
    /// Namespace; apps/v1 Deployment, StatefulSet; networking.k8s.io/v1 Ingress,
    /// NetworkPolicy; policy/v1 PodDisruptionBudget) as schemaless objects: a stand-in cluster for the
    /// runner's kubernetes_manifest components in tests and `outpost up`. API only:
    /// objects are stored, patched, applied and watched, but nothing runs them (no pods,
    /// no rollouts, no addresses).
    #[arg(long)]
    standin_cluster: bool,
    /// With `--standin-cluster`: also take EKS tokens (`aws eks get-token`) for this
    /// cluster name, as aws-iam-authenticator does: their roles are mapped to users and
    /// groups by the `kube-system/aws-auth` ConfigMap's `mapRoles`, and those are
    /// authorized by the stand-in's RBAC objects. Needs `--eks-sts-endpoint`.
    #[arg(long, requires_all = ["standin_cluster", "eks_sts_endpoint"])]
    eks_cluster_name: Option<String>,
    /// The STS emulator (`http://HOST:PORT`, e.g. moto) EKS tokens must be presigned for;
    /// the presigned `GetCallerIdentity` is called there.
    #[arg(long, requires = "eks_cluster_name")]
    eks_sts_endpoint: Option<http::Uri>,
    /// The largest request body accepted (413 RequestEntityTooLarge above); also bounds
    /// what the `copy` operations of one JSON patch may add. kube-apiserver's: 3 MiB.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_REQUEST_BODY_BYTES)]
    max_request_body_bytes: usize,
    /// The largest object stored, after any patch or apply (413 naming the object
    /// above). etcd's request limit, as for kube-apiserver: 1.5 MiB.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_OBJECT_BYTES)]
    max_object_bytes: usize,
    /// How deeply an object's values may nest (422 above); at most 127, the depth the
    /// server's decoder reads back.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_OBJECT_DEPTH,
          value_parser = clap::value_parser!(u16).range(1..=limits::DECODER_MAX_DEPTH as i64).map(usize::from))]
    max_object_depth: usize,
    /// Reads (get, list, discovery) answered at once; more are answered 429 with
    /// Retry-After: 1. Watches are not counted. 0 is no limit.
    #[arg(long, default_value_t = InflightLimits::default().reads)]
    max_requests_inflight: usize,
    /// Mutations (create, update, patch, delete) answered at once; more are answered
    /// 429 with Retry-After: 1. 0 is no limit.
    #[arg(long, default_value_t = InflightLimits::default().mutations)]
    max_mutating_requests_inflight: usize,
    /// Watches one user may hold open at once; more are answered 429. 0 is no limit.
    #[arg(long, default_value_t = InflightLimits::default().watches_per_user)]
    max_watches_per_user: usize,
    /// Seconds a connection with no request in flight has, from its first byte, to
    /// complete a request header (TLS handshake included); it is closed otherwise.
    #[arg(long, default_value_t = ConnectionLimits::default().header_timeout.as_secs())]
    request_header_timeout: u64,
    /// Seconds a keep-alive connection may stay silent after its last request ended
    /// before it is closed.
    #[arg(long, default_value_t = ConnectionLimits::default().idle_timeout.as_secs())]
    idle_timeout: u64,
    /// Seconds a client has to complete the TLS handshake.
    #[arg(long, default_value_t = ConnectionLimits::default().handshake_timeout.as_secs())]
    tls_handshake_timeout: u64,
}

/// Runs the API server until SIGINT or SIGTERM.
pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    if args.tls_cert.is_none() && !args.listen.ip().is_loopback() {
        bail!(
            "refusing to serve plain HTTP on {}: pass --tls-cert and --tls-key, or listen on a loopback address",
            args.listen
        );
    }
    // Every watch holds a connection: a fleet of runners needs more than the default.
    if let Err(err) = crate::limits::raise_open_files() {
        tracing::warn!(error = %err, "serving with the default open-files limit");
    }
    let tokens = TokenFile::read(&args.tokens)?;
    let etcd_tls = match (&args.etcd_cafile, &args.store) {
        (None, _) => None,
        (Some(ca), StoreLocation::Etcd(_)) => Some(EtcdTls {
            ca_file: ca.clone(),
            client: args.etcd_certfile.clone().zip(args.etcd_keyfile.clone()),
        }),
        (Some(_), StoreLocation::Embedded(_)) => {
            bail!("--etcd-cafile, --etcd-certfile and --etcd-keyfile apply to an etcd store only")
        }
    };
    let store = args
        .store
        .open_with(
            EmbeddedOptions {
                history: args.embedded_history,
                cache_bytes: args.embedded_cache_mib << 20,
            },
            etcd_tls.as_ref(),
        )
        .await
        .with_context(|| format!("cannot open the store {:?}", args.store))?;
    if matches!(args.store, StoreLocation::Etcd(_)) && args.etcd_compaction_interval_seconds > 0 {
        outpost_apiserver::storage::spawn_compactor(
            store.clone(),
            std::time::Duration::from_secs(args.etcd_compaction_interval_seconds),
        );
    }
    let mut registry = Registry::new();
    if args.standin_cluster {
        registry = registry.with_standin_cluster();
    }
    // The core, then Outpost's kinds and rules plugged in.
    let mut config = ServerConfig::new(registry, tokens);
    outpost_kinds::register(&mut config);
    if let (Some(cluster), Some(sts)) = (&args.eks_cluster_name, &args.eks_sts_endpoint) {
        config.eks = Some(std::sync::Arc::new(EksTokens::new(cluster, sts.clone())));
    }
    config.bookmark_interval = std::time::Duration::from_secs(args.watch_bookmark_seconds.max(1));
    config.watch_window = args.watch_window;
    config.limits = Limits {
        max_request_body_bytes: args.max_request_body_bytes,
        max_object_bytes: args.max_object_bytes,
        max_object_depth: args.max_object_depth,
    };
    config.inflight = InflightLimits {
        reads: args.max_requests_inflight,
        mutations: args.max_mutating_requests_inflight,
        watches_per_user: args.max_watches_per_user,
    };
    let seconds = |s: u64| std::time::Duration::from_secs(s.max(1));
    config.connections = ConnectionLimits {
        header_timeout: seconds(args.request_header_timeout),
        idle_timeout: seconds(args.idle_timeout),
        handshake_timeout: seconds(args.tls_handshake_timeout),
    };
    let server = ApiServer::new(store, config)
        .await
        .context("cannot start the watch caches")?;
    // The dashboard under `/ui`, beside the API, over the server's public interface.
    let server = outpost_dashboard::mount(server);
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            println!("outpost: serving on https://{address}");
            server
                .serve_tls(listener, cert, key, shutdown_signal())
                .await?;
        }
        _ => {
            println!("outpost: serving on http://{address}");
            let listener = tokio::net::TcpListener::from_std(listener)?;
            server.serve(listener, shutdown_signal()).await?;
        }
    }
    println!("outpost: stopped");
    Ok(())
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM sent from the moment it is called (the
/// listeners are made then, not when the future is first polled).
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut signals = StopSignals::listen();
    async move { signals.recv().await }
}

/// Ctrl-C (SIGINT) and SIGTERM, listened for from the moment this is made until it is
/// dropped. tokio delivers a signal only to the listeners that exist when it arrives
/// (and once one was made, the signal no longer ends the process), so a process that
/// waits for them twice must keep one listener between the waits: one made anew for
/// the second wait misses a signal sent in between, and the process never stops.
pub struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening (inside the runtime).
    pub fn listen() -> StopSignals {
        use tokio::signal::unix::{SignalKind, signal};
        StopSignals {
            interrupt: signal(SignalKind::interrupt()).expect("a SIGINT handler can be installed"),
            terminate: signal(SignalKind::terminate()).expect("a SIGTERM handler can be installed"),
        }
    }

    /// Completes at the next SIGINT or SIGTERM, or at once for one that arrived since the
    /// last call. Cancel safe: a signal is kept for the next call.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn interrupt_this_process() {
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::INT)
            .unwrap();
    }

    /// `outpost up` waits for Ctrl-C twice (while the install comes up, then until it is
    /// stopped): a Ctrl-C sent while it is between the two waits must stop it.
    #[tokio::test]
    async fn a_signal_sent_between_two_waits_ends_the_second() {
        let mut signals = StopSignals::listen();
        interrupt_this_process();
        tokio::time::timeout(Duration::from_secs(10), signals.recv())
            .await
            .expect("the first wait sees the signal");
        // Between the waits (nobody polls `signals`): the signal is kept for the next one.
        interrupt_this_process();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Why one listener is kept: one made after the signal never sees it.
        let mut late = StopSignals::listen();
        tokio::time::timeout(Duration::from_secs(10), signals.recv())
            .await
            .expect("the signal sent between the waits ends the second wait");
        assert!(
            tokio::time::timeout(Duration::from_millis(300), late.recv())
                .await
                .is_err(),
            "a listener made after the signal saw it"
        );
    }
}
