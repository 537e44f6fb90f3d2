//! Connection hygiene and in-flight limits (issue 17), against a real `outpost server`
//! over TLS.
//!
//! A client that completes the TLS handshake, sends half a request header and stalls
//! is closed by the server within `--request-header-timeout`; 2,000 of them open at
//! once do not stop a runner token's watch of its install's Plans from delivering a
//! Plan created after they were opened. With `--max-mutating-requests-inflight 1`, a
//! create whose body arrives slowly holds the one slot and the next create is answered
//! 429 `TooManyRequests` with `Retry-After: 1`, until the first one ends. With
//! `--max-watches-per-user 2`, a user's third watch is answered 429 while another
//! user's is served, and a watch is served again once one of the two is closed. A TCP
//! client that never starts TLS is closed by `--tls-handshake-timeout`, a keep-alive
//! client silent after its request by `--idle-timeout`, while a watch open longer than that
//! still delivers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube_client::api::{Api, WatchEvent, WatchParams};
use outpost_api::Plan;
use outpost_testing::job_plans::plan_body;
use outpost_testing::{Backend, ControlPlane, Reply, eventually, manifests};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const API: &str = "/apis/outpost.dev/v1alpha1/namespaces/default";

/// The header timeout the slow-header test runs with: long enough that 2,000 TLS
/// handshakes on a busy machine finish before the first connection is closed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// How late the server may close a stalled connection.
const SLACK: Duration = Duration::from_secs(5);

const STALLED: usize = 2_000;

/// A TLS client trusting the control plane's CA, speaking HTTP/1.1.
fn connector(cp: &ControlPlane) -> TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pem = std::fs::read(&cp.tls.ca).expect("CA");
    let mut roots = rustls::RootCertStore::empty();
    let der = {
        use base64::Engine as _;
        let text = String::from_utf8_lossy(&pem);
        let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("PEM body is base64")
    };
    roots
        .add(rustls::pki_types::CertificateDer::from(der))
        .expect("the CA is a certificate");
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

async fn connect(cp: &ControlPlane, tls: &TlsConnector) -> TlsStream<TcpStream> {
    let address = cp.url.trim_start_matches("https://");
    let tcp = TcpStream::connect(address)
        .await
        .expect("the server accepts");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an IP name");
    tls.connect(name, tcp).await.expect("the TLS handshake")
}

/// Reads until the server closes the connection (EOF or an error); how long it took.
async fn closed_after(stream: &mut TlsStream<TcpStream>, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// Lets this test hold thousands of connections (the default soft limit may be 1,024).
fn raise_open_files() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(65_536);
    if limit.current.unwrap_or(u64::MAX) < wanted {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(wanted),
                maximum: limit.maximum,
            },
        )
        .expect("the soft open-files limit can be raised to the hard one");
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(
        now > STALLED as u64 + 200,
        "this test needs more than {STALLED} open files; the hard limit is {now}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_headers_are_closed_and_runners_keep_watching() {
    raise_open_files();
    let header_timeout = HEADER_TIMEOUT.as_secs().to_string();
    let cp = ControlPlane::start_with_flags(
        Backend::Embedded,
        &["--request-header-timeout", &header_timeout],
    )
    .await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let runner_token = cp.mint_runner_token("default/acme");
    let tls = connector(&cp);

    // 2,000 clients: handshake, half a header, then silence.
    let open = Arc::new(AtomicUsize::new(0));
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::channel::<()>(STALLED);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(64));
    let mut stalled = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        let (cp_url, tls, open, opened, handshakes) = (
            cp.url.clone(),
            tls.clone(),
            open.clone(),
            opened_tx.clone(),
            handshakes.clone(),
        );
        stalled.push(tokio::spawn(async move {
            let permit = handshakes.acquire_owned().await.expect("semaphore open");
            let address = cp_url.trim_start_matches("https://").to_owned();
            let tcp = TcpStream::connect(&address)
                .await
                .expect("the server accepts");
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("an IP");
            let mut stream = tls.connect(name, tcp).await.expect("the TLS handshake");
            stream
                .write_all(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bear")
                .await
                .expect("half a header is sent");
            stream.flush().await.expect("flushed");
            drop(permit);
            open.fetch_add(1, Ordering::SeqCst);
            let _ = opened.send(()).await;
            let closed = closed_after(&mut stream, HEADER_TIMEOUT + SLACK).await;
            open.fetch_sub(1, Ordering::SeqCst);
            closed
        }));
    }
    drop(opened_tx);
    for _ in 0..STALLED {
        opened_rx.recv().await.expect("every stalled client opened");
    }
    let opened_at = Instant::now();

    // The runner's watch of its install's Plans, opened now, sees a Plan created now.
    let runner = cp.client_as(&runner_token).await;
    let plans: Api<Plan> = Api::namespaced(runner, "default");
    let mut watch = plans
        .watch(
            &WatchParams::default().labels("outpost.dev/install=acme"),
            "0",
        )
        .await
        .expect("the runner's watch is served")
        .boxed();
    let created = create_plan(&cp, "after-the-flood").await;
    assert_eq!(created.status, 201, "{}", created.text);
    let delivered = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = watch.next().await {
            if let Ok(WatchEvent::Added(p)) = event
                && p.metadata.name.as_deref() == Some("after-the-flood")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        delivered,
        Ok(true),
        "the runner's watch delivers the new Plan"
    );
    let still_open = open.load(Ordering::SeqCst);
    assert!(
        still_open > STALLED / 2,
        "the Plan was delivered while the stalled clients were open ({still_open} of {STALLED} were, {:?} after they all opened)",
        opened_at.elapsed()
    );

    // Every stalled client is closed by the server within the timeout and the slack,
    // and not long before it (the clock starts at the handshake's first byte).
    for task in stalled {
        let closed = task.await.expect("stalled client task");
        let took = closed.unwrap_or_else(|| {
            panic!("a stalled connection was still open {HEADER_TIMEOUT:?} + {SLACK:?} after its half header")
        });
        assert!(
            took + Duration::from_secs(10) >= HEADER_TIMEOUT,
            "a stalled connection was closed after only {took:?}"
        );
    }
    let metrics = cp
        .raw(Some(&cp.admin_token), "GET", "/metrics", &[], "")
        .await;
    assert!(
        metrics.text.lines().any(|l| l
            .starts_with("apiserver_connections_closed_total{reason=\"header_timeout\"}")
            && l.split(' ').nth(1).and_then(|n| n.parse::<usize>().ok()) >= Some(STALLED)),
        "header timeouts are counted: {}",
        metrics.text
    );
}

/// The value of a gauge or counter line of `/metrics`.
/// `POST`s Plan `name` of install acme as the admin.
async fn create_plan(cp: &ControlPlane, name: &str) -> Reply {
    let json = [("content-type", "application/json")];
    let admin = Some(cp.admin_token.as_str());
    let body = plan_body(name, "acme");
    cp.raw(admin, "POST", &format!("{API}/plans"), &json, body)
        .await
}

async fn metric(cp: &ControlPlane, line_start: &str) -> Option<u64> {
    let metrics = cp
        .raw(Some(&cp.admin_token), "GET", "/metrics", &[], "")
        .await;
    metrics
        .text
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

fn expect_too_many(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 429, "{what}: {}", reply.text);
    assert_eq!(
        reply.header("retry-after"),
        Some("1"),
        "{what}: Retry-After"
    );
    assert_eq!(reply.json["kind"], "Status", "{what}");
    assert_eq!(reply.json["reason"], "TooManyRequests", "{what}");
    assert_eq!(reply.json["code"], 429, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_and_watch_limits_answer_429() {
    let cp = ControlPlane::start_with_flags(
        Backend::Embedded,
        &[
            "--max-mutating-requests-inflight",
            "1",
            "--max-watches-per-user",
            "2",
        ],
    )
    .await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let tls = connector(&cp);
    let admin = Some(cp.admin_token.as_str());

    // A create whose body arrives slowly holds the one mutating slot.
    let body = plan_body("slow", "acme");
    let (first, rest) = body.split_at(body.len() / 2);
    let mut slow = connect(&cp, &tls).await;
    let head = format!(
        "POST {API}/plans HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        cp.admin_token,
        body.len()
    );
    slow.write_all(head.as_bytes()).await.expect("head sent");
    slow.write_all(first).await.expect("half the body sent");
    slow.flush().await.expect("flushed");
    let mutating = "apiserver_current_inflight_requests{request_kind=\"mutating\"}";
    eventually(10, "the slow create holds the mutating slot", async || {
        (metric(&cp, mutating).await == Some(1)).then_some(())
    })
    .await;

    let refused = create_plan(&cp, "second").await;
    expect_too_many(&refused, "a create while the slot is held");
    // Reads have their own limit: they are still answered.
    let read = cp.raw(admin, "GET", &format!("{API}/plans"), &[], "").await;
    assert_eq!(read.status, 200, "{}", read.text);

    // The slow create completes, and the slot is free again.
    slow.write_all(rest)
        .await
        .expect("the rest of the body sent");
    slow.flush().await.expect("flushed");
    let mut answer = vec![0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), slow.read_exact(&mut answer))
        .await
        .expect("the slow create is answered")
        .expect("its status line");
    assert_eq!(&answer, b"HTTP/1.1 201", "the slow create succeeds");
    drop(slow);
    let second = eventually(10, "a create once the slot is free", async || {
        let reply = create_plan(&cp, "second").await;
        (reply.status != 429).then_some(reply)
    })
    .await;
    assert_eq!(second.status, 201, "{}", second.text);
    let rejected = "apiserver_rejected_requests_total{reason=\"max_mutating_requests_inflight\"}";
    assert!(
        metric(&cp, rejected).await >= Some(1),
        "the refusal is counted"
    );

    // Two watches per user: the admin's third is refused, the viewer's is served.
    let watch = format!("{API}/plans?watch=true");
    let (status, one) = cp.stream_lines(&watch, &[]).await;
    assert_eq!(status, 200);
    let (status, _two) = cp.stream_lines(&watch, &[]).await;
    assert_eq!(status, 200);
    let third = cp.raw(admin, "GET", &watch, &[], "").await;
    expect_too_many(&third, "a third watch of one user");
    let viewer = cp
        .raw(
            Some(&cp.viewer_token),
            "GET",
            &format!("{watch}&timeoutSeconds=1"),
            &[],
            "",
        )
        .await;
    assert_eq!(viewer.status, 200, "another user's watch: {}", viewer.text);
    // Closing one of the two frees its place.
    drop(one);
    eventually(10, "a watch once one of the two closed", async || {
        let reply = cp
            .raw(admin, "GET", &format!("{watch}&timeoutSeconds=1"), &[], "")
            .await;
        (reply.status == 200).then_some(())
    })
    .await;
    let rejected = "apiserver_rejected_requests_total{reason=\"max_watches_per_user\"}";
    assert!(
        metric(&cp, rejected).await >= Some(1),
        "the refusal is counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_but_watches_are_not() {
    let cp = ControlPlane::start_with_flags(
        Backend::Embedded,
        &[
            "--idle-timeout",
            "3",
            "--tls-handshake-timeout",
            "2",
            "--request-header-timeout",
            "30",
        ],
    )
    .await;
    cp.kubectl()
        .ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let tls = connector(&cp);
    let within = Duration::from_secs(3) + SLACK;

    // A watch with no request in flight on its connection otherwise.
    let (status, mut watch) = cp
        .stream_lines(
            &format!("{API}/plans?watch=true&labelSelector=outpost.dev%2Finstall%3Dacme"),
            &[],
        )
        .await;
    assert_eq!(status, 200);

    // TCP with no TLS handshake: closed by the handshake timeout.
    let address = cp.url.trim_start_matches("https://").to_owned();
    let mut silent_tcp = TcpStream::connect(&address).await.expect("accepted");
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(within, silent_tcp.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "a connection without a handshake is closed within {within:?}: {read:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "not at once");

    // A keep-alive connection that answered a request and then falls silent: closed by
    // the idle timeout (a fresh one is held to the header timeout, as in Go).
    let mut idle = connect(&cp, &tls).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("a request sent");
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\nok") {
        let mut chunk = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut chunk))
            .await
            .expect("the request is answered")
            .expect("read");
        assert!(n > 0, "the connection stays open after the answer");
        answer.extend_from_slice(&chunk[..n]);
    }
    let took = closed_after(&mut idle, within)
        .await
        .expect("an idle connection is closed within the idle timeout and the slack");
    assert!(took >= Duration::from_secs(2), "not at once: {took:?}");
    assert!(
        metric(
            &cp,
            "apiserver_connections_closed_total{reason=\"idle_timeout\"}"
        )
        .await
            >= Some(1),
        "idle closures are counted"
    );

    // The watch, open longer than the idle timeout, still delivers.
    let created = create_plan(&cp, "after-idle").await;
    assert_eq!(created.status, 201, "{}", created.text);
    let delivered = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = watch.next().await {
            if event["object"]["metadata"]["name"] == "after-idle" {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(delivered, Ok(true), "a watch outlives the idle timeout");
}
