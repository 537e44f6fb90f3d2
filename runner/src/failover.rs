//! Reaching any of several API servers: `--server` may name replicas of one control
//! plane (each its own watch cache on one store). The runner uses one at a time — it
//! starts at a place in the list of its own ([`first_server`]), so a fleet given one
//! list spreads over the replicas — and moves to the next, round robin, when the one it
//! uses fails:
//!
//! * a call cannot connect, or its connection breaks (TLS, reset, timeout);
//! * the server answers `503 Service Unavailable` (its store is away: `/readyz`'s case);
//! * a response body breaks mid-stream (the watch of a server that died).
//!
//! Moving is all this layer does: the failed call still fails, and its caller tries
//! again after its own jittered backoff ([`crate::retry`], the watcher's), so a fleet of
//! runners leaving a dead replica does not stampede the next one. A watch open on the
//! server moved away from ends (cleanly, like a server timeout), so the watcher resumes
//! it from its resourceVersion on the new server — or lists again if that server answers
//! 410 Gone. Claims stay fenced by the resourceVersion, the store's revision, which is
//! the same on every replica: see `RECOVERY.md` for what a lost answer does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body as HttpBody, Frame};
use kube_client::client::Body;
use tokio::sync::watch;

/// A boxed error of the HTTP stack.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The API servers the runner may use, and which one it uses now.
pub struct Servers {
    urls: Vec<Uri>,
    current: watch::Sender<usize>,
}

/// Where in a list of `count` servers the runner called `runner` starts: a stable hash
/// of its name, so that it starts at the same server every time and a fleet of runners
/// given the same list spreads evenly over it. With one server, that one.
pub fn first_server(runner: &str, count: usize) -> usize {
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(runner.as_bytes());
    let mut word = [0; 8];
    word.copy_from_slice(&hash[..8]);
    (u64::from_be_bytes(word) % count.max(1) as u64) as usize
}

impl Servers {
    /// The servers in `urls`, using the one at `first`.
    ///
    /// # Panics
    /// If `urls` is empty (`--server` is required) or `first` is not in it.
    pub fn new(urls: Vec<Uri>, first: usize) -> Self {
        assert!(
            first < urls.len(),
            "the runner starts at one of its API servers"
        );
        Servers {
            urls,
            current: watch::Sender::new(first),
        }
    }

    /// The index of the server in use.
    pub fn current(&self) -> usize {
        *self.current.borrow()
    }

    /// The URL of server `index`.
    pub fn url(&self, index: usize) -> &Uri {
        &self.urls[index]
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Whether there are none (never: [`Servers::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Server `index` failed because of `reason`: if it is still the one in use, moves
    /// to the next one (round robin) and says so. Returns whether this call moved.
    ///
    /// Several calls in flight to one dying server all fail; only the first moves, so
    /// the runner never skips a server it has not tried.
    pub fn failed(&self, index: usize, reason: &dyn std::fmt::Display) -> bool {
        let next = (index + 1) % self.urls.len();
        let moved = next != index
            && self.current.send_if_modified(|current| {
                let moves = *current == index;
                if moves {
                    *current = next;
                }
                moves
            });
        if moved {
            tracing::warn!(
                from = %self.urls[index],
                to = %self.urls[next],
                %reason,
                "moved to another API server"
            );
        }
        moved
    }

    /// Resolves once the runner no longer uses server `index`.
    fn moved_away(&self, index: usize) -> impl Future<Output = ()> + Send + 'static {
        let mut current = self.current.subscribe();
        async move {
            loop {
                if *current.borrow_and_update() != index {
                    return;
                }
                if current.changed().await.is_err() {
                    // The servers are gone with the client: nothing moves any more.
                    return std::future::pending().await;
                }
            }
        }
    }
}

/// The service under the runner's [`kube_client::Client`]: sends each request to the
/// server in use through that server's own client (base URL, token, CA), and moves to
/// the next server on the failures listed in the [module documentation](self).
#[derive(Clone)]
pub struct Failover {
    servers: Arc<Servers>,
    clients: Arc<[kube_client::Client]>,
}

impl Failover {
    /// One client per server, made by `client` from the server's URL.
    pub fn new(
        servers: Arc<Servers>,
        client: impl Fn(&Uri) -> Result<kube_client::Client, kube_client::Error>,
    ) -> Result<Self, kube_client::Error> {
        let clients = servers.urls.iter().map(client).collect::<Result<_, _>>()?;
        Ok(Failover { servers, clients })
    }
}

impl tower::Service<Request<Body>> for Failover {
    type Response = Response<ServerBody>;
    type Error = kube_client::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each server's client buffers its own requests.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let servers = self.servers.clone();
        let index = servers.current();
        let client = self.clients[index].clone();
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
        Box::pin(async move {
            let response = client.send(request).await.inspect_err(|e| {
                servers.failed(index, e);
            })?;
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                servers.failed(index, &"503 Service Unavailable");
            }
            let moved_away = watch.then(|| Box::pin(servers.moved_away(index)) as MovedAway);
            Ok(response.map(|body| ServerBody {
                body,
                servers,
                index,
                moved_away,
            }))
        })
    }
}

type MovedAway = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A response body from one server: an error reading it moves the runner off that
/// server, and a watch's body ends once the runner moved away.
pub struct ServerBody {
    body: Body,
    servers: Arc<Servers>,
    index: usize,
    /// For watches: resolves once the runner uses another server.
    moved_away: Option<MovedAway>,
}

impl HttpBody for ServerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(moved_away) = &mut this.moved_away
            && moved_away.as_mut().poll(cx).is_ready()
        {
            // The end of the stream, as when the server times a watch out: the watcher
            // resumes it, on the server now in use.
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                this.servers.failed(this.index, &e);
                // Unwrapped as a plain client's body error would be.
                Poll::Ready(Some(Err(match e {
                    kube_client::Error::Service(e) => e,
                    other => Box::new(other),
                })))
            }
            other => other.map_err(|e| -> BoxError { Box::new(e) }),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
#[path = "failover_tests.rs"]
mod tests;
