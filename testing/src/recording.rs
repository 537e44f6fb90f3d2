//! A recording proxy in front of the control plane: every client of a test goes
//! through it, and it keeps every byte the API server answered.
//!
//! The control plane serves HTTPS only, so the proxy terminates TLS with the control
//! plane's own serving certificate (which names `127.0.0.1`, so clients that trust the
//! control plane's CA trust the proxy) and opens its own TLS connection to the server.
//! Both sides speak HTTP/1.1 (ALPN), so what it records is plain HTTP/1.1: headers and
//! bodies, watch streams included; [`RecordingProxy::responses`] removes the chunked
//! framing so that a value split across chunks is still found.
//!
//! [`RecordingProxy::die_after`] makes it stand for a server that dies right after
//! committing a write: the request reaches the server, its answer never reaches the
//! client, and the proxy refuses every connection from then on.

use std::sync::{Arc, Mutex};

use crate::ServingCert;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// What one proxied connection carried, each direction in order.
#[derive(Default)]
struct Exchange {
    requests: Vec<u8>,
    responses: Vec<u8>,
    /// Where the request being sent starts in `requests` (after the last answer).
    request_start: usize,
    /// The request being sent matched [`RecordingProxy::die_after`]'s markers.
    fatal: bool,
}

/// What every connection of one proxy shares.
#[derive(Default)]
struct Shared {
    exchanges: Mutex<Vec<Arc<Mutex<Exchange>>>>,
    /// [`RecordingProxy::die_after`]'s markers.
    fatal_request: Mutex<Option<Vec<Vec<u8>>>>,
    /// Set once the proxy died.
    dead: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    /// Whether `request` (the bytes of one request so far) has every fatal marker.
    fn is_fatal(&self, request: &[u8]) -> bool {
        self.fatal_request
            .lock()
            .expect("the recording lock is never poisoned")
            .as_ref()
            .is_some_and(|markers| markers.iter().all(|m| find(request, m).is_some()))
    }
}

/// A loopback TLS proxy that records every request and response byte; stops when
/// dropped.
pub struct RecordingProxy {
    /// `https://127.0.0.1:PORT`: give it to clients instead of the control plane's URL.
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl RecordingProxy {
    /// Starts the proxy in front of `upstream` (`https://127.0.0.1:PORT`), serving with
    /// `tls`'s certificate and trusting its CA upstream.
    ///
    /// # Panics
    /// If the certificate files cannot be read or no loopback port is free.
    pub async fn start(upstream: &str, tls: &ServingCert) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
            .expect("the serving certificate is readable")
            .collect::<Result<_, _>>()
            .expect("the serving certificate is PEM");
        let key = PrivateKeyDer::from_pem_file(&tls.key).expect("the serving key is PEM");
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("the serving certificate and key match");
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(&tls.ca).expect("the CA is readable") {
            roots
                .add(ca.expect("the CA is PEM"))
                .expect("the CA is a certificate");
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));

        let upstream = upstream
            .strip_prefix("https://")
            .expect("the control plane serves HTTPS")
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port");
        let url = format!(
            "https://{}",
            listener.local_addr().expect("a bound listener")
        );
        let shared = Arc::new(Shared::default());
        let proxy = shared.clone();
        let task = tokio::spawn(async move {
            let mut dead = proxy.dead.subscribe();
            loop {
                let inbound = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((inbound, _)) => inbound,
                        Err(_) => break,
                    },
                    // Dead: the listener goes, so new connections are refused.
                    _ = dead.wait_for(|dead| *dead) => break,
                };
                let exchange = Arc::new(Mutex::new(Exchange::default()));
                proxy
                    .exchanges
                    .lock()
                    .expect("the recording lock is never poisoned")
                    .push(exchange.clone());
                let (acceptor, connector, upstream, shared) = (
                    acceptor.clone(),
                    connector.clone(),
                    upstream.clone(),
                    proxy.clone(),
                );
                tokio::spawn(async move {
                    let Ok(inbound) = acceptor.accept(inbound).await else {
                        return;
                    };
                    let Ok(outbound) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let name = ServerName::try_from("127.0.0.1").expect("an IP address");
                    let Ok(outbound) = connector.connect(name, outbound).await else {
                        return;
                    };
                    let (client_read, client_write) = tokio::io::split(inbound);
                    let (server_read, server_write) = tokio::io::split(outbound);
                    tokio::join!(
                        copy(client_read, server_write, &exchange, &shared, false),
                        copy(server_read, client_write, &exchange, &shared, true),
                    );
                });
            }
        });
        RecordingProxy { url, shared, task }
    }

    /// From now on, once a request containing every one of `markers` (in its request
    /// line, headers or body) has reached the server, the proxy dies as a server killed
    /// right after committing it would: the server's answer is dropped, every connection
    /// is closed, and new connections are refused.
    pub fn die_after(&self, markers: &[&str]) {
        *self
            .shared
            .fatal_request
            .lock()
            .expect("the recording lock is never poisoned") =
            Some(markers.iter().map(|m| m.as_bytes().to_vec()).collect());
    }

    /// Whether the proxy died ([`RecordingProxy::die_after`]).
    pub fn is_dead(&self) -> bool {
        *self.shared.dead.borrow()
    }

    fn collect(&self, pick: impl Fn(&Exchange) -> Vec<u8>) -> Vec<u8> {
        self.shared
            .exchanges
            .lock()
            .expect("the recording lock is never poisoned")
            .iter()
            .flat_map(|e| pick(&e.lock().expect("the recording lock is never poisoned")))
            .collect()
    }

    /// Every request clients sent so far (HTTP/1.1, as sent).
    pub fn requests(&self) -> Vec<u8> {
        self.collect(|e| e.requests.clone())
    }

    /// Every response the API server sent so far: status lines, headers and bodies,
    /// with chunked bodies' framing removed.
    pub fn responses(&self) -> Vec<u8> {
        self.collect(|e| unchunk(&e.responses))
    }

    /// How many connections went through the proxy.
    pub fn connections(&self) -> usize {
        self.shared
            .exchanges
            .lock()
            .expect("the recording lock is never poisoned")
            .len()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, recording each byte in `exchange` (as a response when
/// `response`); ends at EOF, an error or the proxy's death, closing `to`. The first
/// answer to a fatal request is not copied: the proxy dies instead.
async fn copy(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    exchange: &Mutex<Exchange>,
    shared: &Shared,
    response: bool,
) {
    let mut dead = shared.dead.subscribe();
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = dead.wait_for(|dead| *dead) => break,
        };
        {
            let mut exchange = exchange
                .lock()
                .expect("the recording lock is never poisoned");
            if response {
                if exchange.fatal {
                    shared.dead.send_replace(true);
                    break;
                }
                exchange.responses.extend_from_slice(&buffer[..n]);
                exchange.request_start = exchange.requests.len();
            } else {
                exchange.requests.extend_from_slice(&buffer[..n]);
                let start = exchange.request_start;
                exchange.fatal = shared.is_fatal(&exchange.requests[start..]);
            }
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One connection's HTTP/1.1 responses with chunked bodies joined: headers as sent,
/// then each body's bytes without the chunk sizes. What does not parse (a connection
/// cut mid-chunk) is kept as it was.
fn unchunk(stream: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(stream.len());
    let mut rest = stream;
    while let Some(end) = find(rest, b"\r\n\r\n") {
        let head = &rest[..end + 4];
        out.extend_from_slice(head);
        rest = &rest[end + 4..];
        let head = String::from_utf8_lossy(head).to_ascii_lowercase();
        if head.contains("transfer-encoding: chunked") {
            loop {
                let Some(line) = find(rest, b"\r\n") else {
                    out.extend_from_slice(rest);
                    return out;
                };
                let size = std::str::from_utf8(&rest[..line])
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok());
                let Some(size) = size else {
                    out.extend_from_slice(rest);
                    return out;
                };
                rest = &rest[line + 2..];
                if size == 0 {
                    // The last chunk; no trailers are sent.
                    rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
                    break;
                }
                if rest.len() < size {
                    out.extend_from_slice(rest);
                    return out;
                }
                out.extend_from_slice(&rest[..size]);
                rest = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
            }
        } else if let Some(length) = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            let length = length.min(rest.len());
            out.extend_from_slice(&rest[..length]);
            rest = &rest[length..];
        }
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::unchunk;

    #[test]
    fn chunked_bodies_are_joined() {
        let stream = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nsec\r\n4\r\nret!\r\n0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab";
        let joined = String::from_utf8(unchunk(stream)).unwrap();
        assert!(joined.contains("\r\n\r\nsecret!HTTP/1.1"), "{joined}");
        assert!(joined.contains("\r\n\r\nokHTTP/1.1"), "{joined}");
        assert!(joined.ends_with("\r\n\r\nab"), "{joined}");
    }
}
