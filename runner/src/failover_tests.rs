use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;

fn urls(n: usize) -> Vec<Uri> {
    (0..n)
        .map(|i| format!("https://replica-{i}.example.com").parse().unwrap())
        .collect()
}

#[test]
fn a_failure_moves_to_the_next_server_round_robin_once() {
    let servers = Servers::new(urls(3), 0);
    assert_eq!(servers.current(), 0, "the first URL first");
    assert!(servers.failed(0, &"connection refused"));
    assert_eq!(servers.current(), 1);
    // Other calls that were in flight to server 0 fail too: they do not move again.
    assert!(!servers.failed(0, &"connection reset"));
    assert_eq!(servers.current(), 1, "server 2 is not skipped");
    assert!(servers.failed(1, &"503 Service Unavailable"));
    assert!(servers.failed(2, &"connection refused"));
    assert_eq!(servers.current(), 0, "after the last comes the first again");
}

#[test]
fn each_runner_starts_at_a_server_of_its_own_and_a_fleet_spreads() {
    let runners: Vec<String> = (0..300).map(|i| format!("default/i{i}/i{i}")).collect();
    let mut per_server = [0; 3];
    for runner in &runners {
        let first = first_server(runner, 3);
        assert_eq!(first, first_server(runner, 3), "the same server every time");
        per_server[first] += 1;
    }
    assert!(
        per_server.iter().all(|&n| n > 60),
        "300 runners over 3 servers: {per_server:?}"
    );
    assert_eq!(first_server("default/acme/acme", 1), 0);
    let servers = Servers::new(urls(3), 2);
    assert!(servers.failed(2, &"connection refused"));
    assert_eq!(servers.current(), 0, "round robin from wherever it started");
}

#[test]
fn one_server_is_never_left() {
    let servers = Servers::new(urls(1), 0);
    assert!(!servers.failed(0, &"connection refused"));
    assert_eq!(servers.current(), 0);
}

#[tokio::test]
async fn moved_away_resolves_once_the_server_is_left() {
    let servers = Servers::new(urls(2), 0);
    let mut away = Box::pin(servers.moved_away(0));
    assert!((&mut away).now_or_never().is_none(), "still on server 0");
    assert!(
        servers.moved_away(1).now_or_never().is_some(),
        "server 1 is not in use"
    );
    servers.failed(0, &"test");
    tokio::time::timeout(Duration::from_secs(5), away)
        .await
        .expect("resolves after the move");
}

/// What a canned server does after writing its reply.
#[derive(Clone, Copy)]
enum Then {
    /// Closes the connection.
    Close,
    /// Keeps the connection open until the client goes.
    Hold,
}

/// A loopback HTTP/1.1 server that answers every request with `reply`; returns its URL
/// and how many requests it got.
async fn canned(reply: &'static str, then: Then) -> (Uri, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match socket.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = socket.write_all(reply.as_bytes()).await;
                if let Then::Hold = then {
                    // Until the client closes its side.
                    let _ = socket.read(&mut byte).await;
                }
            });
        }
    });
    (url.parse().unwrap(), requests)
}

/// A port nothing listens on.
async fn refused() -> Uri {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url.parse().unwrap()
}

const UNAVAILABLE: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 82\r\n\r\n{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"code\":503,\"message\":\"down\"}";
const OK: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
/// A watch that sends one event and then nothing (the connection stays open).
const WATCH: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n1a\r\n{\"type\":\"BOOKMARK\",\"x\":1}\n\r\n";
/// A response whose body breaks off mid-chunk (the server died).
const BROKEN: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n10\r\nabc";

fn client(urls: Vec<Uri>) -> (Arc<Servers>, kube_client::Client) {
    let servers = Arc::new(Servers::new(urls, 0));
    let failover = Failover::new(servers.clone(), |url| {
        let mut config = kube_client::Config::new(url.clone());
        config.default_retry = false;
        kube_client::Client::try_from(config)
    })
    .unwrap();
    (servers, kube_client::Client::new(failover, "default"))
}

fn get(path: &str) -> Request<Vec<u8>> {
    Request::get(path).body(Vec::new()).unwrap()
}

#[tokio::test]
async fn a_refused_connection_and_a_503_each_move_the_client_on() {
    let dead = refused().await;
    let (unavailable, asked_unavailable) = canned(UNAVAILABLE, Then::Close).await;
    let (ok, asked_ok) = canned(OK, Then::Close).await;
    let (servers, client) = client(vec![dead, unavailable, ok]);

    let error = client.request_text(get("/healthz")).await.unwrap_err();
    assert!(
        !matches!(error, kube_client::Error::Api(_)),
        "a connection error: {error}"
    );
    assert_eq!(servers.current(), 1);
    let error = client.request_text(get("/healthz")).await.unwrap_err();
    assert!(
        matches!(&error, kube_client::Error::Api(s) if s.code == 503),
        "{error}"
    );
    assert_eq!(servers.current(), 2);
    assert_eq!(client.request_text(get("/healthz")).await.unwrap(), "ok");
    assert_eq!(client.request_text(get("/healthz")).await.unwrap(), "ok");
    assert_eq!(servers.current(), 2, "a server that answers is kept");
    assert_eq!(asked_unavailable.load(Ordering::SeqCst), 1);
    assert_eq!(asked_ok.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_body_that_breaks_off_moves_the_client_on() {
    let (broken, _) = canned(BROKEN, Then::Close).await;
    let (ok, _) = canned(OK, Then::Close).await;
    let (servers, client) = client(vec![broken, ok]);
    let response = client.send(get("/broken").map(Body::from)).await.unwrap();
    assert_eq!(servers.current(), 0, "the head arrived");
    assert!(response.into_body().collect().await.is_err());
    assert_eq!(servers.current(), 1);
}

#[tokio::test]
async fn a_watch_ends_once_the_client_moved_to_another_server() {
    let (watching, _) = canned(WATCH, Then::Hold).await;
    let (ok, _) = canned(OK, Then::Close).await;
    let (servers, client) = client(vec![watching, ok]);
    let response = client
        .send(
            get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=7")
                .map(Body::from),
        )
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"{\"type\":\"BOOKMARK\""), "{first:?}");
    assert!(
        body.frame().now_or_never().is_none(),
        "the watch stays open while its server is in use"
    );
    // Another call failed on server 0 (say its heartbeat got a 503).
    servers.failed(0, &"503 Service Unavailable");
    let end = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the watch ends once the client moved");
    assert!(end.is_none(), "a clean end, as a server timeout: {end:?}");
}

#[tokio::test]
async fn other_bodies_are_not_cut_by_a_move() {
    let (slow, _) = canned(WATCH, Then::Hold).await;
    let (ok, _) = canned(OK, Then::Close).await;
    let (servers, client) = client(vec![slow, ok]);
    let response = client.send(get("/slow").map(Body::from)).await.unwrap();
    let mut body = response.into_body();
    assert!(body.frame().await.is_some());
    servers.failed(0, &"test");
    // A watch's body would end at the next poll (see above); this one waits for data.
    assert!(
        body.frame().now_or_never().is_none(),
        "a response that is not a watch is read to its end, wherever the client is now"
    );
}
