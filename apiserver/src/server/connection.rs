//! Connection hygiene: a connection with no request in flight is closed when it sits
//! idle too long, or when it started sending something and has not completed a
//! request header in time — Go's `IdleTimeout` and `ReadHeaderTimeout`, which
//! kube-apiserver sets to 90 s and 32 s. The clock runs below TLS, so a client that
//! stalls in the handshake, in HTTP/2's preface or mid-header is closed alike; a
//! connection with a request in flight (a watch, a request whose body is still
//! arriving) has no such clock.
//!
//! A request is in flight from the moment its head is parsed until its response body is
//! dropped: the per-connection service counts it ([`ConnectionService`]), the stream
//! reads the clock ([`GuardedStream`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::inflight::{Slot, hold};

/// The timeouts (the server's `--request-header-timeout`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From the first byte a connection sends with no request in flight to a complete
    /// request header (TLS handshake included).
    pub header_timeout: Duration,
    /// How long a connection may send nothing once its last request ended (a fresh
    /// connection is held to the TLS handshake and header timeouts).
    pub idle_timeout: Duration,
    /// The TLS handshake.
    pub handshake_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// kube-apiserver's `ReadHeaderTimeout` (32 s) and `IdleTimeout` (90 s); axum-server's
    /// TLS handshake timeout (10 s).
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// Connections closed by the clock, by which timeout.
#[derive(Default)]
pub struct ConnectionMetrics {
    header_timeouts: AtomicU64,
    idle_timeouts: AtomicU64,
}

impl ConnectionMetrics {
    /// Closed for an incomplete request header, and for idleness.
    pub fn closed(&self) -> (u64, u64) {
        (
            self.header_timeouts.load(Ordering::Relaxed),
            self.idle_timeouts.load(Ordering::Relaxed),
        )
    }
}

/// One connection's clock.
struct Clock {
    in_flight: usize,
    idle_since: Instant,
    /// When the first byte arrived since the connection went idle.
    first_byte: Option<Instant>,
    /// The task reading the connection, woken when the clock starts again.
    reader: Option<Waker>,
}

impl Clock {
    /// When the connection is closed, and whether for an incomplete header.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, bool)> {
        if self.in_flight > 0 {
            return None;
        }
        Some(match self.first_byte {
            Some(at) => (at + limits.header_timeout, true),
            None => (self.idle_since + limits.idle_timeout, false),
        })
    }
}

struct Connection {
    clock: Mutex<Clock>,
    limits: ConnectionLimits,
    metrics: Arc<ConnectionMetrics>,
}

impl Connection {
    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().expect("connection clock lock")
    }
}

/// A request in flight on its connection.
struct InFlight(Arc<Connection>);

impl InFlight {
    fn begin(connection: &Arc<Connection>) -> Self {
        let mut clock = connection.clock();
        clock.in_flight += 1;
        clock.first_byte = None;
        InFlight(connection.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut clock = self.0.clock();
        clock.in_flight -= 1;
        if clock.in_flight == 0 {
            clock.idle_since = Instant::now();
            clock.first_byte = None;
            if let Some(reader) = clock.reader.take() {
                reader.wake();
            }
        }
    }
}

/// Wraps each accepted TCP connection in the clock (under TLS) and its service in the
/// counter.
#[derive(Clone)]
pub struct ConnectionAcceptor {
    limits: ConnectionLimits,
    metrics: Arc<ConnectionMetrics>,
}

impl ConnectionAcceptor {
    /// Applies `limits`, counting closures in `metrics`.
    pub fn new(limits: ConnectionLimits, metrics: Arc<ConnectionMetrics>) -> Self {
        ConnectionAcceptor { limits, metrics }
    }
}

impl axum_server::accept::Accept<TcpStream, Router> for ConnectionAcceptor {
    type Stream = GuardedStream;
    type Service = ConnectionService;
    type Future = std::future::Ready<io::Result<(GuardedStream, ConnectionService)>>;

    fn accept(&self, stream: TcpStream, service: Router) -> Self::Future {
        // Watch streams write one small chunk per event: do not wait to coalesce them.
        let _ = stream.set_nodelay(true);
        let connection = Arc::new(Connection {
            clock: Mutex::new(Clock {
                in_flight: 0,
                idle_since: Instant::now(),
                first_byte: None,
                reader: None,
            }),
            limits: self.limits,
            metrics: self.metrics.clone(),
        });
        std::future::ready(Ok((
            GuardedStream {
                io: stream,
                connection: connection.clone(),
                timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            },
            ConnectionService {
                router: service,
                connection,
            },
        )))
    }
}

/// A TCP stream whose reads fail once its connection's clock runs out.
pub struct GuardedStream {
    io: TcpStream,
    connection: Arc<Connection>,
    timer: Pin<Box<Sleep>>,
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        let connection = self.connection.clone();
        let mut clock = connection.clock();
        match &read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                if clock.in_flight == 0 && clock.first_byte.is_none() {
                    clock.first_byte = Some(Instant::now());
                }
                return read;
            }
            Poll::Ready(_) => return read,
            Poll::Pending => {}
        }
        clock.reader = Some(cx.waker().clone());
        let Some((deadline, header)) = clock.deadline(&connection.limits) else {
            return Poll::Pending;
        };
        drop(clock);
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        if self.timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let (counter, what) = if header {
            (
                &connection.metrics.header_timeouts,
                "no complete request header within the header timeout",
            )
        } else {
            (&connection.metrics.idle_timeouts, "idle")
        };
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("closing a connection: {what}");
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The router of one connection, counting the requests in flight on it.
#[derive(Clone)]
pub struct ConnectionService {
    router: Router,
    connection: Arc<Connection>,
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

impl<B> tower::Service<http::Request<B>> for ConnectionService
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let in_flight = InFlight::begin(&self.connection);
        let request: Request = request.map(axum::body::Body::new);
        // A Router is always ready (its `poll_ready` answers `Ready` at once).
        let response = tower::Service::call(&mut self.router, request);
        Box::pin(async move {
            let response = response.await?;
            Ok(hold(response, Slot::new(in_flight)))
        })
    }
}
