//! A plain TCP proxy in front of a gRPC (HTTP/2 without TLS) server, such as etcd, that
//! can lose the answer of one request: [`LostAnswerProxy::lose_next_answer`] makes the
//! proxy cut the connection at the next response's `HEADERS` frame (the server answers
//! only after it did the request's work), so the server acted and the client sees its
//! connection break, as when a member dies or the network fails right after a commit.
//! Connections after the cut are proxied as usual, so a client that tries again gets
//! through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// HTTP/2's `HEADERS` frame type: a response starts with one.
const HEADERS: u8 = 0x1;

#[derive(Default)]
struct Shared {
    /// Cut the connection that carries the next response.
    armed: AtomicBool,
    /// Connections cut so far.
    cuts: AtomicUsize,
}

/// The proxy; stops when dropped.
pub struct LostAnswerProxy {
    /// `http://127.0.0.1:PORT`: give it to the client instead of the server's endpoint.
    pub endpoint: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl LostAnswerProxy {
    /// Starts the proxy in front of `upstream` (`http://host:port` or `host:port`).
    ///
    /// # Panics
    /// If no loopback port is free.
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port");
        let endpoint = format!(
            "http://{}",
            listener.local_addr().expect("the listener's address")
        );
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (shared, upstream) = (shared.clone(), upstream.clone());
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(&upstream).await {
                            proxy(client, server, &shared).await;
                        }
                    });
                }
            }
        });
        LostAnswerProxy {
            endpoint,
            shared,
            task,
        }
    }

    /// The next response any connection carries is lost: its connection is cut before a
    /// byte of it is passed on.
    pub fn lose_next_answer(&self) {
        self.shared.armed.store(true, Ordering::SeqCst);
    }

    /// How many answers were lost so far.
    pub fn lost(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for LostAnswerProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes bytes both ways until either side closes or the answer is to be lost.
async fn proxy(client: TcpStream, server: TcpStream, shared: &Shared) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let downstream = async {
        let mut frames = Frames::default();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if frames.starts_response(&buf[..n])
                && shared
                    .armed
                    .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either direction ending drops both halves of both sockets: the connection is cut.
    tokio::select! {
        () = upstream => {},
        () = downstream => {},
    }
}

/// Where the server's byte stream is in its HTTP/2 frames (9-byte headers: length 3,
/// type 1, flags 1, stream 4).
#[derive(Default)]
struct Frames {
    header: Vec<u8>,
    payload_left: usize,
}

impl Frames {
    /// Reads `bytes`; whether they hold the start of a `HEADERS` frame on a stream (a
    /// response), not a connection frame.
    fn starts_response(&mut self, mut bytes: &[u8]) -> bool {
        let mut response = false;
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let skip = self.payload_left.min(bytes.len());
                self.payload_left -= skip;
                bytes = &bytes[skip..];
                continue;
            }
            let take = (9 - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.header.len() == 9 {
                let h = std::mem::take(&mut self.header);
                self.payload_left =
                    usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                response |= h[3] == HEADERS && stream != 0;
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::Frames;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_response_header_is_found_across_reads_and_connection_frames_are_not_one() {
        let settings = frame(0x4, 0, &[0; 12]);
        let ping = frame(0x6, 0, &[0; 8]);
        // A payload that looks like a HEADERS frame header is skipped as payload.
        let data = frame(0x0, 1, &frame(0x1, 3, &[]));
        let headers = frame(0x1, 5, &[1, 2, 3]);
        let mut frames = Frames::default();
        assert!(!frames.starts_response(&[settings, ping, data].concat()));
        let (a, b) = headers.split_at(4);
        assert!(!frames.starts_response(a));
        assert!(frames.starts_response(b));
        assert!(!frames.starts_response(&frame(0x0, 5, &[9; 40])));
    }
}
