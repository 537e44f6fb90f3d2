//! The machine's real kubectl against `outpost server`, on both stores.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube_client::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube_client::core::{ApiResource, GroupVersionKind};
use outpost_testing::{Backend, ControlPlane, manifests, on_both_backends};
use serde_json::json;

on_both_backends!(
    apply_get_and_diff_work_like_kubernetes,
    edit_changes_a_field,
    get_watch_prints_changes_made_by_another_client,
    delete_waits_for_finalizers,
    selectors_filter,
);

fn installs() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("outpost.dev", "v1alpha1", "Install"),
        "installs",
    )
}

async fn apply_get_and_diff_work_like_kubernetes(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    let dir = manifests();
    let out = kubectl.ok(&["apply", "-f", dir.to_str().unwrap()]);
    assert!(out.contains("app.outpost.dev/shopfront created"), "{out}");
    assert!(out.contains("install.outpost.dev/acme created"), "{out}");

    let table = kubectl.ok(&["get", "apps,installs,components"]);
    assert!(table.contains("shopfront"), "{table}");
    let header = table
        .lines()
        .find(|l| l.starts_with("NAME") && l.contains("PHASE"))
        .unwrap_or_else(|| panic!("install columns missing:\n{table}"));
    assert!(header.contains("APP") && header.contains("AGE"), "{header}");

    // Nothing changed: unchanged; an edit: configured, and visible.
    let again = kubectl.ok(&["apply", "-f", dir.join("installs.yaml").to_str().unwrap()]);
    assert!(again.contains("unchanged"), "{again}");
    let edited = cp.scratch().join("installs.yaml");
    let text = std::fs::read_to_string(dir.join("installs.yaml"))
        .unwrap()
        .replace("eu-west-1", "eu-central-1");
    std::fs::write(&edited, text).unwrap();
    let diff = kubectl.run(&["diff", "-f", edited.to_str().unwrap()]);
    assert!(
        !diff.ok && diff.stdout.contains("eu-central-1"),
        "kubectl diff shows the change: {diff:?}"
    );
    let configured = kubectl.ok(&["apply", "-f", edited.to_str().unwrap()]);
    assert!(
        configured.contains("install.outpost.dev/acme configured"),
        "{configured}"
    );
    let region = kubectl.ok(&[
        "get",
        "install",
        "acme",
        "-o",
        "jsonpath={.spec.cloud.region}",
    ]);
    assert_eq!(region, "eu-central-1");
    let diff = kubectl.run(&["diff", "-f", edited.to_str().unwrap()]);
    assert!(diff.ok, "no diff after apply: {diff:?}");

    let ssa = kubectl.ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        dir.join("installs.yaml").to_str().unwrap(),
    ]);
    assert!(ssa.contains("serverside-applied"), "{ssa}");
    let region = kubectl.ok(&[
        "get",
        "install",
        "acme",
        "-o",
        "jsonpath={.spec.cloud.region}",
    ]);
    assert_eq!(region, "eu-west-1");
}

async fn edit_changes_a_field(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&[
        "apply",
        "-f",
        manifests().join("installs.yaml").to_str().unwrap(),
    ]);
    let editor = cp.scratch().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/approvalMode: prompt/approvalMode: approve-all/' \"$1\"\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&editor)
        .status()
        .unwrap();
    let out = kubectl
        .command()
        .env("KUBE_EDITOR", &editor)
        .args(["edit", "install", "acme"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("edited"));
    let mode = kubectl.ok(&[
        "get",
        "install",
        "acme",
        "-o",
        "jsonpath={.spec.approvalMode}",
    ]);
    assert_eq!(mode, "approve-all");
}

async fn get_watch_prints_changes_made_by_another_client(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&[
        "apply",
        "-f",
        manifests().join("installs.yaml").to_str().unwrap(),
    ]);
    let mut watch = kubectl
        .command()
        .args([
            "get",
            "installs",
            "-w",
            "-o",
            "custom-columns=NAME:.metadata.name,REGION:.spec.cloud.region",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    // The initial list first.
    while !seen.iter().any(|l: &String| l.contains("globex")) {
        seen.push(
            rx.recv_timeout(deadline - Instant::now())
                .expect("initial rows"),
        );
    }
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client().await, "default", &installs());
    api.patch(
        "globex",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cloud": {"region": "ap-south-1"}}})),
    )
    .await
    .unwrap();
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no change printed; saw {seen:?}"));
        if line.contains("globex") && line.contains("ap-south-1") {
            break;
        }
        seen.push(line);
    }
    let _ = watch.kill();
    let _ = watch.wait();
}

async fn delete_waits_for_finalizers(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client().await, "default", &installs());
    let mut object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
        "spec": {"app": "shopfront", "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"}},
    }))
    .unwrap();
    object = api.create(&PostParams::default(), &object).await.unwrap();
    assert!(object.metadata.resource_version.is_some());
    let mut delete = cp
        .kubectl()
        .command()
        .args(["delete", "install", "held", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // kubectl waits while the finalizer is there.
    let marked = wait_for(Duration::from_secs(20), || async {
        api.get("held")
            .await
            .ok()
            .filter(|o| o.metadata.deletion_timestamp.is_some())
    })
    .await;
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        delete.try_wait().unwrap().is_none(),
        "kubectl delete returned while a finalizer was set"
    );
    assert_eq!(
        marked.metadata.finalizers.as_deref(),
        Some(&["example.com/hold".to_owned()][..])
    );
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["example.com/hold"]},
                {"op": "remove", "path": "/metadata/finalizers"},
            ]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = delete.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl delete did not return after the finalizer went"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "kubectl delete failed");
    assert!(
        api.get_opt("held").await.unwrap().is_none(),
        "the object is gone"
    );
}

async fn selectors_filter(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&[
        "apply",
        "-f",
        manifests().join("installs.yaml").to_str().unwrap(),
    ]);
    let names = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["get", "installs", "-o", "name"];
        all.extend_from_slice(args);
        kubectl.ok(&all).lines().map(str::to_owned).collect()
    };
    assert_eq!(
        names(&["-l", "outpost.dev/tier=enterprise"]),
        ["install.outpost.dev/acme"]
    );
    assert_eq!(
        names(&["-l", "outpost.dev/tier in (standard)"]),
        ["install.outpost.dev/globex"]
    );
    assert_eq!(
        names(&["-l", "outpost.dev/tier!=enterprise"]),
        ["install.outpost.dev/globex"]
    );
    assert_eq!(
        names(&["--field-selector", "metadata.name=globex"]),
        ["install.outpost.dev/globex"]
    );
    assert_eq!(names(&["--field-selector", "spec.app=shopfront"]).len(), 2);
    // All namespaces: the objects of another namespace show too, with their namespace.
    let other = cp.scratch().join("other-ns.yaml");
    let text = std::fs::read_to_string(manifests().join("installs.yaml"))
        .unwrap()
        .replace("name: acme", "name: initech");
    std::fs::write(&other, text).unwrap();
    kubectl.ok(&["apply", "-n", "team-b", "-f", other.to_str().unwrap()]);
    let all = kubectl.ok(&["get", "installs", "-A"]);
    assert!(
        all.lines().next().unwrap().starts_with("NAMESPACE"),
        "{all}"
    );
    assert!(
        all.contains("team-b") && all.contains("initech") && all.contains("acme"),
        "{all}"
    );
    assert_eq!(
        names(&[]).len(),
        2,
        "the default namespace still has its two"
    );
    let bad = kubectl.run(&["get", "installs", "--field-selector", "spec.nope=x"]);
    assert!(
        !bad.ok && bad.stderr.contains("field label not supported"),
        "{bad:?}"
    );
}

/// Polls `probe` until it yields a value, failing after `limit`.
async fn wait_for<T, F, Fut>(limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
