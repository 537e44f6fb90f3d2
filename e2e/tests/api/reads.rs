//! Tables, the watch protocol and paged lists.

use super::*;

on_both_backends!(
    tables_for_lists_and_watches,
    watch_protocol,
    paged_lists,
    large_objects_read_back_as_written
);

async fn tables_for_lists_and_watches(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    create(&cp, &install("t")).await;
    let accept = (
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    );
    let table = cp
        .raw(Some(&cp.admin_token), "GET", INSTALLS, &[accept], "")
        .await;
    assert_eq!(table.json["kind"], "Table", "{}", table.text);
    let columns: Vec<&str> = table.json["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns.first(), Some(&"Name"));
    assert!(
        columns.contains(&"Age") && columns.contains(&"App"),
        "{columns:?}"
    );
    assert_eq!(table.json["rows"][0]["cells"][0], "t");
    let (status, mut lines) = cp
        .stream_lines(&format!("{INSTALLS}?watch=true"), &[accept])
        .await;
    assert_eq!(status, 200);
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert_eq!(first["object"]["rows"][0]["cells"][0], "t");
}

async fn watch_protocol(backend: Backend) {
    let mut cp = ControlPlane::start(backend).await;
    let first = create(&cp, &install("w1")).await;
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // From a revision: only later changes; bookmarks when allowed (every second here).
    let (status, mut lines) = cp
        .stream_lines(
            &format!("{INSTALLS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true"),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    create(&cp, &install("w2")).await;
    let added = next_event(&mut lines).await;
    assert_eq!(
        (
            added["type"].as_str(),
            added["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("w2"))
    );
    let bookmark = next_event(&mut lines).await;
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Install");
    assert!(bookmark["object"]["metadata"]["resourceVersion"].is_string());

    // Streaming lists: every object, then the initial-events-end bookmark.
    let (_, mut lines) = cp
        .stream_lines(&format!("{INSTALLS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"), &[])
        .await;
    let mut names = vec![];
    loop {
        let event = next_event(&mut lines).await;
        if event["type"] == "BOOKMARK" {
            assert_eq!(
                event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
                "true"
            );
            break;
        }
        names.push(
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(names, ["w1", "w2"]);

    // A watcher whose objects stay quiet: its BOOKMARKs carry the watch cache's progress,
    // past the other objects' changes, so it resumes from there (not from its own last
    // change, which the window leaves behind).
    let (_, mut quiet) = cp
        .stream_lines(
            &format!(
                "{INSTALLS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dw1"
            ),
            &[],
        )
        .await;
    let w3 = create(&cp, &install("w3")).await;
    let w3_rv: u64 = w3["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut bookmarked = Vec::new();
    for _ in 0..5 {
        let event = next_event(&mut quiet).await;
        assert_eq!(event["type"], "BOOKMARK", "w1 did not change: {event}");
        let at: u64 = event["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        bookmarked.push(at);
        if at >= w3_rv {
            break;
        }
    }
    assert!(
        bookmarked.last().is_some_and(|at| *at >= w3_rv),
        "a bookmark reached w3's revision {w3_rv}: {bookmarked:?}"
    );

    // The server ends a watch after timeoutSeconds.
    let (_, mut lines) = cp
        .stream_lines(
            &format!("{INSTALLS}?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
            &[],
        )
        .await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while lines.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream closed after timeoutSeconds");

    // After a restart the history is gone: a 410 inside a 200 stream.
    cp.restart().await;
    let (status, mut lines) = cp
        .stream_lines(&format!("{INSTALLS}?watch=true&resourceVersion={rv}"), &[])
        .await;
    assert_eq!(status, 200);
    let error = next_event(&mut lines).await;
    assert_eq!(error["type"], "ERROR");
    assert_eq!(
        (
            error["object"]["code"].as_i64(),
            error["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
}

async fn paged_lists(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let admin = Some(cp.admin_token.as_str());
    for i in 0..7 {
        create(&cp, &install(&format!("page-{i}"))).await;
    }
    let mut names = Vec::new();
    let mut path = format!("{INSTALLS}?limit=3");
    let mut revisions = Vec::new();
    loop {
        let page = cp.raw(admin, "GET", &path, &[], "").await;
        assert_eq!(page.status, 200, "{}", page.text);
        assert!(page.json["items"].as_array().unwrap().len() <= 3);
        revisions.push(page.json["metadata"]["resourceVersion"].clone());
        names.extend(page.item_names().into_iter().map(str::to_owned));
        if names.len() == 3 {
            create(&cp, &install("page-9-late")).await; // not in this paged read
        }
        match page.json["metadata"]["continue"].as_str() {
            Some(token) => path = format!("{INSTALLS}?limit=3&continue={token}"),
            None => break,
        }
    }
    assert_eq!(
        names,
        (0..7).map(|i| format!("page-{i}")).collect::<Vec<_>>()
    );
    assert!(
        revisions.windows(2).all(|w| w[0] == w[1]),
        "every page at one revision: {revisions:?}"
    );
    let selected = cp
        .raw(
            admin,
            "GET",
            &format!("{INSTALLS}?labelSelector=ring%3D1&limit=100"),
            &[],
            "",
        )
        .await;
    assert_eq!(selected.json["items"].as_array().unwrap().len(), 8);

    // A paged read whose revision was compacted: 410 with a fresh token that continues.
    let first = cp
        .raw(admin, "GET", &format!("{INSTALLS}?limit=3"), &[], "")
        .await;
    let token = first.json["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 0..70 {
        create(&cp, &install(&format!("zz-{i:02}"))).await;
    }
    if let Some(endpoint) = cp.etcd_endpoint() {
        use outpost_apiserver::storage::Store as _;
        let etcd = outpost_apiserver::storage::EtcdStore::connect(&[endpoint.to_owned()])
            .await
            .unwrap();
        etcd.compact(etcd.current_revision().await.unwrap())
            .await
            .unwrap();
    }
    let expired = cp
        .raw(
            admin,
            "GET",
            &format!("{INSTALLS}?limit=3&continue={token}"),
            &[],
            "",
        )
        .await;
    assert_eq!(
        (expired.status, expired.json["reason"].as_str()),
        (410, Some("Expired")),
        "{}",
        expired.text
    );
    let fresh = expired.json["metadata"]["continue"]
        .as_str()
        .expect("a fresh continue token")
        .to_owned();
    let resumed = cp
        .raw(
            admin,
            "GET",
            &format!("{INSTALLS}?limit=3&continue={fresh}"),
            &[],
            "",
        )
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(
        resumed.json["items"][0]["metadata"]["name"], "page-3",
        "continues after the first page's last key"
    );
}

/// The watch cache holds an object of 8 KiB or more compressed (an install's rendered
/// stack is ≈ 20 KiB): every read serves it as written, from the cache filled by the
/// writes and from the cache filled from the store after a restart.
async fn large_objects_read_back_as_written(backend: Backend) {
    let mut cp = ControlPlane::start(backend).await;
    let mut object = install("large");
    for i in 0..60 {
        object["metadata"]["annotations"][format!("example.com/statement-{i:02}")] = json!(
            format!(
                "{{\"Effect\":\"Allow\",\"Action\":[\"s3:GetObject\",\"s3:ListBucket\"],\"Resource\":\"arn:aws:s3:::shop-{}/*\"}}",
                i % 5
            )
        );
    }
    let small = create(&cp, &install("small")).await;
    let created = create(&cp, &object).await;
    assert!(
        created.to_string().len() > 8 * 1024,
        "large enough to be compressed"
    );
    let url = format!("{INSTALLS}/large");
    // A change to it, as a watch from its creation sees it.
    let (status, mut lines) = cp
        .stream_lines(
            &format!(
                "{INSTALLS}?watch=true&fieldSelector=metadata.name%3Dlarge&resourceVersion={}",
                created["metadata"]["resourceVersion"].as_str().unwrap()
            ),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let patched = cp
        .raw(
            Some(&cp.admin_token),
            "PATCH",
            &url,
            &[("content-type", "application/merge-patch+json")],
            json!({"metadata": {"annotations": {"example.com/statement-07": "changed"}}})
                .to_string(),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let patched = patched.json;
    assert_eq!(
        patched["metadata"]["annotations"]["example.com/statement-07"],
        "changed"
    );
    let modified = next_event(&mut lines).await;
    assert_eq!(
        (&modified["type"], &modified["object"]),
        (&json!("MODIFIED"), &patched)
    );
    for restarted in [false, true] {
        if restarted {
            cp.restart().await;
        }
        let got = cp.raw(Some(&cp.admin_token), "GET", &url, &[], "").await;
        assert_eq!(
            (got.status, &got.json),
            (200, &patched),
            "restarted {restarted}"
        );
        let list = cp
            .raw(Some(&cp.admin_token), "GET", INSTALLS, &[], "")
            .await;
        assert_eq!(
            list.json["items"],
            json!([patched, small]),
            "restarted {restarted}"
        );
        // A watch's initial events.
        let (status, mut lines) = cp
            .stream_lines(
                &format!("{INSTALLS}?watch=true&fieldSelector=metadata.name%3Dlarge"),
                &[],
            )
            .await;
        assert_eq!(status, 200);
        let added = next_event(&mut lines).await;
        assert_eq!(
            (&added["type"], &added["object"]),
            (&json!("ADDED"), &patched),
            "restarted {restarted}"
        );
    }
}
