//! The machine's real kubectl against `outpost server`, on both stores.

use std::process::Stdio;
use std::time::Duration;

use kube_client::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube_client::core::{ApiResource, GroupVersionKind};
use outpost_testing::{Backend, ControlPlane, Kubectl, eventually, manifests, on_both_backends};
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
    let region = kubectl.jsonpath(&["install", "acme"], "{.spec.cloud.region}");
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
    let region = kubectl.jsonpath(&["install", "acme"], "{.spec.cloud.region}");
    assert_eq!(region, "eu-west-1");
}

/// `kubectl` for `cp`, once the example's installs (`acme`, `globex`) are applied.
fn with_installs(cp: &ControlPlane) -> Kubectl {
    let kubectl = cp.kubectl();
    kubectl.apply(&manifests().join("installs.yaml"));
    kubectl
}

async fn edit_changes_a_field(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = with_installs(&cp);
    let out = kubectl.edit(
        "s/approvalMode: prompt/approvalMode: approve-all/",
        &["install", "acme"],
    );
    assert!(out.contains("edited"), "{out}");
    let mode = kubectl.jsonpath(&["install", "acme"], "{.spec.approvalMode}");
    assert_eq!(mode, "approve-all");
}

async fn get_watch_prints_changes_made_by_another_client(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = with_installs(&cp);
    let mut watch = kubectl.watch(&[
        "get",
        "installs",
        "-w",
        "-o",
        "custom-columns=NAME:.metadata.name,REGION:.spec.cloud.region",
    ]);
    // The initial list first.
    watch.until(30, "initial row for globex", |l| l.contains("globex"));
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client().await, "default", &installs());
    api.patch(
        "globex",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cloud": {"region": "ap-south-1"}}})),
    )
    .await
    .unwrap();
    watch.until(30, "change of globex's region", |l| {
        l.contains("globex") && l.contains("ap-south-1")
    });
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
    let marked = eventually(20, "the object marked for deletion", async || {
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
    let status = eventually(
        30,
        "kubectl delete to return after the finalizer went",
        async || delete.try_wait().unwrap(),
    )
    .await;
    assert!(status.success(), "kubectl delete failed");
    assert!(
        api.get_opt("held").await.unwrap().is_none(),
        "the object is gone"
    );
}

async fn selectors_filter(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = with_installs(&cp);
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
