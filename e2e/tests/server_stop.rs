//! `outpost server` on plain HTTP (loopback, as `outpost bench fleet` and local tools run
//! it) stops on SIGTERM like the HTTPS server: requests in flight get a grace period and
//! open watches are then closed, where they used to hold the process until they timed
//! out (up to an hour), so an operator's stop, or a profiler waiting for the process to
//! exit, waited on every watching runner.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outpost_testing::outpost_binary;

#[test]
fn sigterm_stops_a_plain_http_server_with_watches_open() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "stop-test-token,admin,admin,\"outpost:admins\"\n").unwrap();
    let store = format!("embedded:{}", dir.path().join("store").display());
    let mut server = Command::new(outpost_binary())
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--store",
            &store,
            "--tokens",
        ])
        .arg(&tokens)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let address = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| Some(line.split("serving on http://").nth(1)?.trim().to_owned()))
        .expect("the server says where it serves");

    // Two watches in flight (no timeout asked: the server's own, 30 to 60 minutes).
    let watch = |path: &str| {
        let mut stream = TcpStream::connect(&address).unwrap();
        write!(
            stream,
            "GET {path}?watch=true HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer stop-test-token\r\n\r\n"
        )
        .unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "the watch is served");
        stream
    };
    let mut watches = [
        watch("/apis/outpost.dev/v1alpha1/plans"),
        watch("/apis/outpost.dev/v1alpha1/namespaces/default/installs"),
    ];

    let asked = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let stopped = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        if asked.elapsed() > Duration::from_secs(60) {
            server.kill().unwrap();
            panic!("the server still ran a minute after SIGTERM, its watches open");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(stopped.success(), "{stopped}");
    // It said so, and every watch saw its connection end.
    assert!(
        lines
            .map_while(Result::ok)
            .any(|l| l.contains("outpost: stopped")),
        "the server reports that it stopped"
    );
    for stream in &mut watches {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut rest = Vec::new();
        stream
            .read_to_end(&mut rest)
            .expect("the watch's connection is closed, not left open");
    }
}
