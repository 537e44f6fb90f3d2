//! The `kubernetes_manifest` executor against a real `outpost server --standin-cluster`:
//! plan (dry-run server-side apply), apply, no changes on a second plan, observe after
//! an out-of-band edit (and the watch that wakes drift), teardown.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use kube_client::api::{Api, DynamicObject, Patch, PatchParams};
use kube_client::core::{ApiResource, GroupVersionKind};
use outpost_api::{Operation, PolicyInput};
use outpost_runner::executor::kubernetes::{KubernetesExecutor, watch_objects};
use outpost_runner::executor::{Executor as _, StepContext};
use outpost_testing::ControlPlane;
use serde_json::{Value, json};

const MANIFEST: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  greeting: hello
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: nginx:1.27
"#;

fn context(dir: &std::path::Path, operation: Operation, desired: Value) -> StepContext {
    StepContext {
        plan: "acme-deploy-web-1".into(),
        plan_uid: "uid-1".into(),
        operation,
        entity: "web".into(),
        desired,
        work_dir: dir.join("web"),
        env: BTreeMap::new(),
        timeout: Duration::from_secs(60),
    }
}

fn component(content: &str) -> Value {
    json!({"type": "kubernetes_manifest", "manifest": {"namespace": "shop", "content": content,
        "outputs": {"url": "http://web.shop.svc.cluster.local"}}})
}

fn deployments() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_applies_observes_and_tears_down() {
    let cluster = ControlPlane::start_standin_cluster().await;
    let client = cluster.client().await;
    let executor = KubernetesExecutor::new(client.clone());
    let dir = tempfile::tempdir().unwrap();
    let deploy = context(dir.path(), Operation::Deploy, component(MANIFEST));

    // First plan: both objects are to be created, and the namespace they need first
    // (created, not owned: never torn down); nothing is written.
    let diff = executor.plan(&deploy).await.unwrap();
    assert_eq!(diff.input, PolicyInput::Kubernetes);
    assert!(diff.changes);
    assert_eq!(
        diff.summary,
        "2 objects: 2 to create, 0 to change, 0 unchanged; namespace shop to create"
    );
    let kinds: Vec<&str> = diff
        .document
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Namespace", "ConfigMap", "Deployment"]);
    assert_eq!(
        diff.document[2]["metadata"]["namespace"], "shop",
        "the manifest's namespace is the default"
    );
    let live: Api<DynamicObject> = Api::namespaced_with(client.clone(), "shop", &deployments());
    assert!(
        live.get_opt("web").await.unwrap().is_none(),
        "a plan changes nothing"
    );

    // Apply: outputs name the objects, next to the declared ones; a second plan sees
    // no changes.
    let applied = executor.apply(&deploy, &diff).await.unwrap();
    assert_eq!(
        applied.outputs.keys().collect::<Vec<_>>(),
        ["objects", "url"]
    );
    assert_eq!(applied.outputs["url"], "http://web.shop.svc.cluster.local");
    let objects = applied.outputs["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[1]["kind"], "Deployment");
    assert_eq!(objects[1]["namespace"], "shop");
    assert!(objects[1]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let web = live.get("web").await.unwrap();
    assert_eq!(web.data["spec"]["replicas"], 2);
    let again = executor.plan(&deploy).await.unwrap();
    assert!(!again.changes, "{}", again.summary);
    assert_eq!(
        again.summary,
        "2 objects: 0 to create, 0 to change, 2 unchanged"
    );

    // A changed manifest: one object to change.
    let changed = context(
        dir.path(),
        Operation::Deploy,
        component(&MANIFEST.replace("replicas: 2", "replicas: 3")),
    );
    let diff = executor.plan(&changed).await.unwrap();
    assert_eq!(
        diff.summary,
        "2 objects: 0 to create, 1 to change, 1 unchanged"
    );
    assert_eq!(diff.document[1]["spec"]["replicas"], 3);

    // Observe: equal to last-applied until an out-of-band edit, which the watch sees.
    let observed = executor
        .observe(&deploy, &applied.last_applied)
        .await
        .unwrap();
    assert_eq!(observed, applied.last_applied);
    let mut changes = Box::pin(
        watch_objects(client.clone(), &applied.last_applied)
            .await
            .unwrap(),
    );
    // Each watch reports once it is established (the Namespace is not watched).
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(5), changes.next())
            .await
            .expect("the watches start")
            .expect("the watch stream goes on");
    }
    live.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 7}})),
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("the edit is watched within 5 s")
        .expect("the watch stream goes on");
    let observed = executor
        .observe(&deploy, &applied.last_applied)
        .await
        .unwrap();
    assert_ne!(observed, applied.last_applied);
    assert_eq!(observed[1]["spec"]["replicas"], 7);
    assert_eq!(
        observed[0], applied.last_applied[0],
        "the ConfigMap did not drift"
    );

    // Teardown (its desired state names only the component): the plan lists what goes.
    let teardown = context(dir.path(), Operation::Teardown, json!({"component": "web"}));
    let diff = executor.plan(&teardown).await.unwrap();
    assert_eq!(diff.summary, "2 objects: 2 to delete");
    assert!(
        live.get_opt("web").await.unwrap().is_some(),
        "a teardown plan deletes nothing"
    );
    executor.apply(&teardown, &diff).await.unwrap();
    assert!(live.get_opt("web").await.unwrap().is_none());
    let observed = executor
        .observe(&deploy, &applied.last_applied)
        .await
        .unwrap();
    assert_eq!(observed, json!([null, null]));
    let namespaces = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Namespace"),
        "namespaces",
    );
    let namespaces: Api<DynamicObject> = Api::all_with(client.clone(), &namespaces);
    assert!(
        namespaces.get_opt("shop").await.unwrap().is_some(),
        "the namespace stays"
    );
    let diff = executor.plan(&teardown).await.unwrap();
    assert!(!diff.changes, "{}", diff.summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_what_is_not_a_manifest() {
    let cluster = ControlPlane::start_standin_cluster().await;
    let executor = KubernetesExecutor::new(cluster.client().await);
    let dir = tempfile::tempdir().unwrap();
    let not_yaml = context(dir.path(), Operation::Deploy, component("a: [unclosed"));
    let err = executor.plan(&not_yaml).await.unwrap_err();
    assert!(format!("{err:#}").contains("not valid YAML"), "{err:#}");
    let unknown = context(
        dir.path(),
        Operation::Deploy,
        component("apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: x\n"),
    );
    let err = executor.plan(&unknown).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("does not serve CronJob"),
        "{err:#}"
    );
}
