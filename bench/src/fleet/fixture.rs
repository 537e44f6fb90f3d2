//! The fleet's App: `components` Kubernetes components (component `i` depends on
//! `i - 4`, so ten form a graph three levels deep), a sandbox, a manual action, the
//! three lifecycle roles and two vendor policies the gate evaluates on every Plan.

use anyhow::Context as _;
use kube_client::Client;
use kube_client::api::{Api, Patch, PatchParams, PostParams};
use outpost_api::{Action, App, Component, Install, Policy};
use serde_json::json;

/// The namespace of the bench's objects.
pub const NAMESPACE: &str = "bench";
/// The App.
pub const APP: &str = "fleet";
/// The manual action the dispatch samples trigger.
pub const ACTION: &str = "ping";

/// Creates the App and its objects.
pub async fn create_app(client: &Client, components: usize) -> anyhow::Result<()> {
    let app = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "App",
        "metadata": {"name": APP, "namespace": NAMESPACE},
        "spec": {
            "inputs": [{"name": "replicas", "type": "number", "default": 2, "source": "vendor"}],
            "permissions": {"roles": [
                {"name": "{{ install.id }}-provision", "type": "provision"},
                {"name": "{{ install.id }}-maintenance", "type": "maintenance"},
                {"name": "{{ install.id }}-deprovision", "type": "deprovision"},
            ]},
            "sandbox": {"type": "terraform_module", "source": "./sandbox",
                        "variables": {"name": "{{ install.id }}"}},
        }
    });
    Api::<App>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &serde_json::from_value(app)?)
        .await
        .context("creating the App")?;
    let api = Api::<Component>::namespaced(client.clone(), NAMESPACE);
    for i in 0..components {
        api.create(&PostParams::default(), &component(i, 1)?)
            .await
            .with_context(|| format!("creating component c{i}"))?;
    }
    let action = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Action",
        "metadata": {"name": ACTION, "namespace": NAMESPACE},
        "spec": {"app": APP, "triggers": [{"type": "manual"}],
                 "steps": [{"name": "ping", "script": "echo pong"}]},
    });
    Api::<Action>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &serde_json::from_value(action)?)
        .await
        .context("creating the action")?;
    let policies = Api::<Policy>::namespaced(client.clone(), NAMESPACE);
    for (name, module) in [
        (
            "no-privileged-namespace",
            "package outpost.no_privileged_namespace\n\n\
             deny contains msg if {\n  input.metadata.namespace == \"kube-system\"\n  \
             msg := sprintf(\"%s %s: not in kube-system\", [input.kind, input.metadata.name])\n}\n",
        ),
        (
            "labelled-configmaps",
            "package outpost.labelled_configmaps\n\n\
             warn contains msg if {\n  input.kind == \"ConfigMap\"\n  not input.metadata.labels.team\n  \
             msg := sprintf(\"ConfigMap %s has no team label\", [input.metadata.name])\n}\n",
        ),
    ] {
        let policy = json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Policy",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"app": APP, "inputs": ["kubernetes"], "module": module},
        });
        policies
            .create(&PostParams::default(), &serde_json::from_value(policy)?)
            .await
            .with_context(|| format!("creating policy {name}"))?;
    }
    Ok(())
}

/// Component `c<i>` at `version`: a ConfigMap whose data carries the version.
fn component(i: usize, version: u32) -> anyhow::Result<Component> {
    let dependencies: Vec<String> = if i >= 4 {
        vec![format!("c{}", i - 4)]
    } else {
        vec![]
    };
    let content = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\ndata:\n  version: \"{version}\"\n  \
         replicas: \"{{{{ inputs.replicas }}}}\"\n  install: \"{{{{ install.name }}}}\"\n"
    );
    Ok(serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
        "metadata": {"name": format!("c{i}"), "namespace": NAMESPACE},
        "spec": {"app": APP, "type": "kubernetes_manifest",
                 "manifest": {"namespace": "app", "content": content},
                 "dependencies": dependencies},
    }))?)
}

/// Moves the last component (a leaf of the graph: nothing depends on it) to `version`:
/// a release that changes exactly one component of every install.
pub async fn change_one_component(
    client: &Client,
    components: usize,
    version: u32,
) -> anyhow::Result<()> {
    let last = components - 1;
    let changed = component(last, version)?;
    Api::<Component>::namespaced(client.clone(), NAMESPACE)
        .patch(
            &format!("c{last}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": changed.spec})),
        )
        .await
        .context("changing the last component")?;
    Ok(())
}

/// Install `i` of the fleet (`i00042`), approving Plans by itself.
pub fn install(i: usize) -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": install_name(i), "namespace": NAMESPACE},
        "spec": {"app": APP, "approvalMode": "approve-all",
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
    }))
    .expect("a valid Install")
}

/// The name of install `i`.
pub fn install_name(i: usize) -> String {
    format!("i{i:05}")
}
