//! The HTTP server: Kubernetes REST conventions over the registry and the store.
//!
//! Every request goes through one handler ([`dispatch`]): parse what it is about,
//! authenticate, authorize, then answer it. Errors are [`ApiError`]s, answered as
//! Kubernetes `Status` objects. What the server knows of the types it serves comes from
//! outside, through [`ServerConfig`]: the registry (types and their strategies), the
//! admission chain, authenticators, authorizers and subresources.

mod body;
mod connection;
mod definitions;
mod discovery;
mod dispatch;
mod extension;
mod fence;
mod inflight;
mod list;
mod list_body;
mod metrics;
mod objects;
mod subresource;
mod watch;
mod write;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::Response;

use crate::admission::{AdmissionChain, Reads};
use crate::auth::eks_token::EksTokens;
use crate::auth::{Access, Authenticator, AuthorizerChain, TokenFile, User};
use crate::registry::{Registry, ResourceType};
use crate::request::RequestInfo;
use crate::status::ApiError;
use crate::storage::{InstrumentedStore, Store, StoreError};
use crate::watch_cache::{CacheSet, Progress, Served, WatchCache};

pub use body::{content_type, decode_object, json};
pub use connection::{ConnectionLimits, ConnectionMetrics};
pub use dispatch::Call;
pub use extension::{ApiHandle, CacheReader, MetricsSource};
pub use inflight::{InflightLimits, Refusal};
pub use metrics::{Metrics, StoreMetrics};
pub use objects::{Current, RETRIES};
pub use subresource::Subresource;

/// How the server behaves.
pub struct ServerConfig {
    /// The served resource types.
    pub registry: Registry,
    /// Bearer tokens.
    pub tokens: TokenFile,
    /// Other bearer tokens, asked in order after the token file.
    pub authenticators: Vec<Arc<dyn Authenticator>>,
    /// Who may do what.
    pub authorizers: AuthorizerChain,
    /// What every write passes before it is stored.
    pub admission: AdmissionChain,
    /// Subresources served by plugins.
    pub subresources: Vec<Arc<dyn Subresource>>,
    /// The stand-in cluster's EKS tokens (their users are authorized by RBAC), if taken.
    pub eks: Option<Arc<EksTokens>>,
    /// Events kept per resource type for watches from an older revision.
    pub watch_window: usize,
    /// How often a watch with `allowWatchBookmarks` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// The largest request body and object accepted, the deepest nesting.
    pub limits: crate::limits::Limits,
    /// Requests in flight and open watches per user (429 above).
    pub inflight: InflightLimits,
    /// Header, idle and TLS handshake timeouts of connections (HTTPS).
    pub connections: ConnectionLimits,
}

impl ServerConfig {
    /// A server of `registry`'s types for the users of `tokens`, with Kubernetes-like
    /// limits, no plugins and no authorizer (every request is forbidden until one is
    /// added).
    pub fn new(registry: Registry, tokens: TokenFile) -> Self {
        ServerConfig {
            registry,
            tokens,
            authenticators: Vec::new(),
            authorizers: AuthorizerChain::default(),
            admission: AdmissionChain::default(),
            subresources: Vec::new(),
            eks: None,
            watch_window: 10_000,
            bookmark_interval: Duration::from_secs(10),
            limits: crate::limits::Limits::default(),
            inflight: InflightLimits::default(),
            connections: ConnectionLimits::default(),
        }
    }
}

/// Shared by every request.
pub(crate) struct ServerState {
    pub store: Arc<dyn Store>,
    pub config: ServerConfig,
    /// The served types and their caches: `config.registry` and the types of the
    /// stored CustomResourceDefinitions.
    pub served: Arc<Served>,
    /// How far the caches have followed the store.
    pub progress: Arc<Progress>,
    pub metrics: Metrics,
    pub store_metrics: Arc<StoreMetrics>,
    /// Requests in flight and open watches, against `config.inflight`.
    pub inflight: inflight::Inflight,
    /// Connections closed by their clock.
    pub connection_metrics: Arc<ConnectionMetrics>,
    /// Lines that code mounted beside the API adds to `/metrics`.
    pub extra_metrics: std::sync::RwLock<Vec<Arc<dyn MetricsSource>>>,
}

impl ServerState {
    /// What plugins may read.
    pub fn reads(&self) -> Reads<'_> {
        Reads { state: self }
    }

    /// The authorizers' decision on `request` by `user`.
    pub fn authorize(&self, user: &User, request: &RequestInfo) -> Result<Access, String> {
        self.config.authorizers.authorize(user, request)
    }

    /// The plugin serving subresource `name` of `rt`, if `rt` has it.
    pub fn subresource(&self, rt: &ResourceType, name: &str) -> Option<&Arc<dyn Subresource>> {
        rt.subresource(name)?;
        self.config.subresources.iter().find(|s| s.name() == name)
    }

    /// Every type served now (`config.registry` and the CRDs' types).
    pub fn registry(&self) -> Arc<Registry> {
        self.served.current().registry.clone()
    }

    pub fn cache(&self, rt: &ResourceType) -> Result<Arc<WatchCache>, ApiError> {
        self.served
            .cache(&rt.group, &rt.version, &rt.plural)
            .ok_or_else(|| {
                ApiError::Internal(format!("no watch cache for {}", rt.qualified_resource()))
            })
    }
}

/// How long requests in flight may finish once the server is told to stop (SIGTERM):
/// then every connection is closed, watches included (kube-apiserver ends watches at
/// once by default, `--shutdown-watch-termination-grace-period=0`).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The API server: build it over a store, then serve its [`router`](ApiServer::router).
#[derive(Clone)]
pub struct ApiServer {
    state: Arc<ServerState>,
    /// Routes mounted beside the API ([`ApiServer::mount`]), matched first.
    mounted: Router,
}

impl ApiServer {
    /// Loads the watch caches of every resource type from `store` and follows it.
    pub async fn new(store: Arc<dyn Store>, config: ServerConfig) -> Result<Self, StoreError> {
        let store_metrics = Arc::new(StoreMetrics::default());
        let observer = store_metrics.clone();
        let store: Arc<dyn Store> = Arc::new(InstrumentedStore::new(
            store,
            Arc::new(move |op| observer.observe(op)),
        ));
        let CacheSet { served, progress } =
            CacheSet::start(store.clone(), &config.registry, config.watch_window).await?;
        Ok(ApiServer {
            state: Arc::new(ServerState {
                store,
                inflight: inflight::Inflight::new(config.inflight),
                connection_metrics: Arc::default(),
                extra_metrics: std::sync::RwLock::default(),
                config,
                served,
                progress,
                metrics: Metrics::default(),
                store_metrics,
            }),
            mounted: Router::new(),
        })
    }

    /// The server's public interface for code served beside the API (the dashboard):
    /// read the watch caches, authenticate and authorize as the API does, and send
    /// requests through the API's own handler. See [`ApiHandle`].
    pub fn handle(&self) -> ApiHandle {
        ApiHandle::new(self.state.clone())
    }

    /// Serves `routes` beside the API: they are matched first, and every path they do
    /// not match goes to the API's handler (the CLI mounts the dashboard under `/ui`).
    pub fn mount(mut self, routes: Router) -> Self {
        self.mounted = self.mounted.merge(routes);
        self
    }

    /// Appends `source`'s lines to `/metrics`.
    pub fn add_metrics(&self, source: Arc<dyn MetricsSource>) {
        self.state
            .extra_metrics
            .write()
            .expect("metrics sources lock")
            .push(source);
    }

    /// The HTTP routes: those [mounted](ApiServer::mount) beside the API, every other
    /// path to one dispatcher.
    pub fn router(&self) -> Router {
        let api = Router::new()
            .fallback(handle)
            .with_state(self.state.clone());
        self.mounted.clone().fallback_service(api)
    }

    /// The store the server serves.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.state.store
    }

    /// Serves HTTPS on `listener` with the PEM certificate chain and key until
    /// `shutdown` completes, closing connections that stall (see
    /// [`ConnectionLimits`]).
    pub async fn serve_tls(
        self,
        listener: std::net::TcpListener,
        cert: &std::path::Path,
        key: &std::path::Path,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // One process-wide crypto provider; setting it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key).await?;
        let handle = axum_server::Handle::new();
        let stopper = handle.clone();
        tokio::spawn(async move {
            shutdown.await;
            stopper.graceful_shutdown(Some(SHUTDOWN_GRACE));
        });
        let limits = self.state.config.connections;
        let guard =
            connection::ConnectionAcceptor::new(limits, self.state.connection_metrics.clone());
        axum_server::from_tcp_rustls(listener, tls)?
            .map(|tls| {
                tls.handshake_timeout(limits.handshake_timeout)
                    .acceptor(guard)
            })
            .handle(handle)
            .serve(self.router().into_make_service())
            .await
    }

    /// Serves on `listener` until `shutdown` completes (plain HTTP, for loopback: the
    /// in-flight limits apply, the connection timeouts do not). Like [`ApiServer::serve_tls`],
    /// requests in flight then get [`SHUTDOWN_GRACE`] to finish and the rest (watches, which
    /// would otherwise hold the process until they time out) are closed.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        use axum::serve::ListenerExt as _;
        use std::future::IntoFuture as _;
        // Watch streams write one small chunk per event: do not wait to coalesce them.
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                shutdown.await;
                let _ = stopping.send(());
            })
            .into_future();
        tokio::select! {
            served = serving => served,
            () = async {
                match stopped.await {
                    Ok(()) => tokio::time::sleep(SHUTDOWN_GRACE).await,
                    // Serving ended on its own: the other branch answers.
                    Err(_) => std::future::pending().await,
                }
            } => Ok(()),
        }
    }
}

async fn handle(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    dispatch::dispatch(state, request).await
}
