//! What the dashboard reads: every `/ui/events` stream reads one shared fleet snapshot
//! (built once per change, not once per stream), and the install and plan pages read
//! only that install's objects (by the watch cache's install index), on both stores. A
//! viewer still sees what an admin sees, and a user allowed nothing still sees nothing.
//! Counted through `/metrics` (`outpost_ui_fleet_snapshots_total`,
//! `outpost_ui_fleet_streams`, `apiserver_watch_cache_objects_read_total`).

// The API server in the test process (shared with the API server's own tests).
#[path = "../../kinds/tests/server_support/mod.rs"]
mod server_support;

use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use outpost_apiserver::server::ApiServer;
use serde_json::{Value, json};
use server_support::{ADMIN, NOBODY, TestStore, VIEWER, metric, send};

const SNAPSHOTS: &str = "outpost_ui_fleet_snapshots_total";
const STREAMS: &str = "outpost_ui_fleet_streams";

/// The example App, its Components and Actions, and its two Installs (`acme`,
/// `globex`) from `manifests/`, in the namespace `default`.
async fn example_fleet(store: &TestStore) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    for file in [
        "app.yaml",
        "components.yaml",
        "actions.yaml",
        "installs.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("the example manifests");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
        for mut object in docs {
            object["metadata"]["namespace"] = json!("default");
            let plural = match object["kind"].as_str() {
                Some("App") => "apps",
                Some("Component") => "components",
                Some("Action") => "actions",
                Some("Install") => "installs",
                other => panic!("unexpected kind {other:?}"),
            };
            store.put(plural, &object).await;
        }
    }
}

/// A Plan of `install` deploying the component `web`.
fn plan(install: &str, name: &str) -> Value {
    let desired = json!({"note": name});
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {"name": name, "namespace": "default", "labels": {"outpost.dev/install": install}},
        "spec": {
            "install": install,
            "operation": "deploy",
            "entity": {"kind": "component", "name": "web"},
            "desiredState": desired,
            "contentHash": outpost_api::content_hash(&desired),
        },
    })
}

/// The AuditEvent `sequence` of `install`, about `plan`.
fn audit_event(install: &str, sequence: u64, plan: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "AuditEvent",
        "metadata": {
            "name": format!("{install}-{sequence}"),
            "namespace": "default",
            "labels": {"outpost.dev/install": install},
        },
        "spec": {
            "install": install,
            "runner": install,
            "sequence": sequence,
            "timestamp": "2025-01-15T10:00:00Z",
            "type": "claim",
            "plan": plan,
            "hash": outpost_api::content_hash(&json!([install, sequence])),
            "signature": "c2ln",
        },
    })
}

/// Logs in with `token`: the session cookie (`outpost_session=...`).
async fn login(server: &ApiServer, token: &str) -> String {
    let request = Request::post("/ui/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={token}&next=%2Fui")))
        .expect("a valid request");
    let response = send(server, request).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("outpost_session="))
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned()
}

/// `GET path` in the session `cookie`.
async fn ui(server: &ApiServer, cookie: &str, path: &str) -> http::Response<Body> {
    let request = Request::get(path)
        .header("cookie", cookie)
        .body(Body::empty())
        .expect("a valid request");
    send(server, request).await
}

async fn ui_page(server: &ApiServer, cookie: &str, path: &str) -> (StatusCode, String) {
    let response = ui(server, cookie, path).await;
    let status = response.status();
    let body = response.into_body().collect().await.expect("a body");
    (
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    )
}

/// An open `/ui/events` stream.
struct Stream {
    body: Body,
    buffer: String,
}

impl Stream {
    async fn open(server: &ApiServer, cookie: &str) -> Stream {
        let response = ui(server, cookie, "/ui/events").await;
        assert_eq!(response.status(), StatusCode::OK);
        Stream {
            body: response.into_body(),
            buffer: String::new(),
        }
    }

    /// The data of the next `fleet` event.
    async fn next_fleet(&mut self) -> Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = event
                    .strip_prefix("event: fleet\n")
                    .and_then(|e| e.trim_end().strip_prefix("data: "))
                {
                    return serde_json::from_str(data).expect("JSON data");
                }
                continue;
            }
            // A bound so that a broken stream fails the test instead of hanging it.
            let frame = tokio::time::timeout(Duration::from_secs(60), self.body.frame())
                .await
                .expect("an event within a minute")
                .expect("the stream is open")
                .expect("a frame");
            if let Ok(data) = frame.into_data() {
                self.buffer.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }
}

async fn live_updates_share_one_snapshot(store: TestStore) {
    example_fleet(&store).await;
    let server = outpost_dashboard::mount(store.server().await);
    assert_eq!(
        metric(&server, SNAPSHOTS).await,
        0,
        "no stream, no snapshot"
    );

    // Six sessions, three of an admin and three of a viewer, each with its stream.
    let mut streams = Vec::new();
    for token in [ADMIN, VIEWER, ADMIN, VIEWER, ADMIN, VIEWER] {
        let cookie = login(&server, token).await;
        streams.push(Stream::open(&server, &cookie).await);
    }
    let mut first = Vec::new();
    for stream in &mut streams {
        first.push(stream.next_fleet().await);
    }
    assert_eq!(
        first[0]["cells"]["default/acme/web"]["state"], "pending",
        "{}",
        first[0]
    );
    assert!(
        first.iter().all(|f| *f == first[0]),
        "a viewer sees the matrix an admin sees: {first:?}"
    );
    assert_eq!(metric(&server, STREAMS).await, 6);
    let builds = metric(&server, SNAPSHOTS).await;
    println!("snapshot builds for 6 streams: {builds} (one copy per stream would be 6)");
    assert_eq!(builds, 1, "six streams share one snapshot");

    // One change: one more snapshot, and every stream sends the new matrix.
    store.put("plans", &plan("acme", "acme-web-1")).await;
    for stream in &mut streams {
        let next = stream.next_fleet().await;
        assert_eq!(
            next["cells"]["default/acme/web"]["state"], "runner-offline",
            "{next}"
        );
    }
    assert_eq!(metric(&server, SNAPSHOTS).await, 2, "one build per change");

    // A user allowed nothing gets no stream, as before.
    let nobody = login(&server, NOBODY).await;
    let (status, _) = ui_page(&server, &nobody, "/ui/events").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The last stream closed stops the feed; the next stream starts a fresh one.
    drop(streams);
    outpost_testing::eventually(30, "the streams' tasks to end", async || {
        (metric(&server, STREAMS).await == 0).then_some(())
    })
    .await;
    let admin = login(&server, ADMIN).await;
    let mut again = Stream::open(&server, &admin).await;
    let fresh = again.next_fleet().await;
    assert_eq!(
        fresh["cells"]["default/acme/web"]["state"],
        "runner-offline"
    );
    assert_eq!(metric(&server, SNAPSHOTS).await, 3);
}

/// Objects of plans and audit events the caches have looked at so far.
async fn reads(server: &ApiServer) -> (u64, u64) {
    let read = |r: &str| format!("apiserver_watch_cache_objects_read_total{{resource=\"{r}\"}}");
    (
        metric(server, &read("plans")).await,
        metric(server, &read("auditevents")).await,
    )
}

async fn pages_read_one_install(store: TestStore) {
    example_fleet(&store).await;
    // acme: two Plans and three events; globex, the rest of the fleet: 100 of each.
    for name in ["acme-web-1", "acme-web-2"] {
        store.put("plans", &plan("acme", name)).await;
    }
    for sequence in 0..3 {
        store
            .put("auditevents", &audit_event("acme", sequence, "acme-web-1"))
            .await;
    }
    for i in 0..100 {
        let name = format!("globex-web-{i}");
        store.put("plans", &plan("globex", &name)).await;
        store
            .put("auditevents", &audit_event("globex", i, &name))
            .await;
    }
    let server = outpost_dashboard::mount(store.server().await);

    let mut shown = Vec::new();
    for token in [ADMIN, VIEWER] {
        let cookie = login(&server, token).await;
        let before = reads(&server).await;
        let (status, page) = ui_page(&server, &cookie, "/ui/installs/default/acme").await;
        let after = reads(&server).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert!(page.contains("acme-web-1") && page.contains("acme-web-2"));
        assert!(!page.contains("globex-web"), "only acme's Plans");
        assert_eq!(
            page.matches("<td class=\"num\">").count(),
            3,
            "acme's audit log, and only acme's"
        );
        let install_reads = (after.0 - before.0, after.1 - before.1);
        println!(
            "install page: {install_reads:?} plans and audit events read (a scan reads 102, 103)"
        );
        assert_eq!(
            install_reads,
            (2, 3),
            "only acme's Plans and events are read"
        );

        let before = reads(&server).await;
        let (status, plan_page) = ui_page(&server, &cookie, "/ui/plans/default/acme-web-1").await;
        let after = reads(&server).await;
        assert_eq!(status, StatusCode::OK, "{plan_page}");
        let plan_reads = (after.0 - before.0, after.1 - before.1);
        println!("plan page: {plan_reads:?} plans and audit events read (a scan reads 102, 103)");
        assert_eq!(plan_reads, (1, 3), "the Plan, and acme's events");
        shown.push((page, plan_page));
    }
    let (admin, viewer) = (&shown[0], &shown[1]);
    assert!(
        viewer.0.contains("You are logged in as a viewer")
            && !admin.0.contains("You are logged in as a viewer"),
        "the viewer is told only admins may trigger"
    );

    // A user allowed nothing is refused both pages, without reading anything.
    let nobody = login(&server, NOBODY).await;
    let before = reads(&server).await;
    for path in ["/ui/installs/default/acme", "/ui/plans/default/acme-web-1"] {
        let (status, _) = ui_page(&server, &nobody, path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(reads(&server).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_live_updates_share_one_snapshot() {
    live_updates_share_one_snapshot(TestStore::embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_live_updates_share_one_snapshot() {
    live_updates_share_one_snapshot(TestStore::etcd().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_pages_read_one_install() {
    pages_read_one_install(TestStore::embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_pages_read_one_install() {
    pages_read_one_install(TestStore::etcd().await).await;
}
