//! The small App the rollout tests release again and again: `shop`, in namespace
//! `default`, with a terraform sandbox and one component, `web`, whose manifest carries
//! a version — each version is a new release of the App. Tests of one component's
//! rollout add others ([`set_component`]). And [`runnable_app`], the App's roles and a
//! sandbox the real runner provisions, for tests that run it.

use std::collections::BTreeSet;

use kube_client::api::{Api, Patch, PatchParams, PostParams};
use outpost_api::{App, Component, Install, InstallPhase};
use serde_json::json;

use crate::eventually;

/// App `shop` as YAML for tests with the real runner: the three lifecycle roles
/// (`shop-provision`, `shop-maintenance`, `shop-deprovision`) and a sandbox that
/// terraform provisions with no provider (an inline module with one output, `ready`),
/// with `more_spec` (more keys of `spec`, indented by two spaces) before them.
pub fn runnable_app(more_spec: &str) -> String {
    format!(
        r#"apiVersion: outpost.dev/v1alpha1
kind: App
metadata:
  name: shop
spec:
{more_spec}  permissions:
    roles:
      - name: shop-provision
        type: provision
      - name: shop-maintenance
        type: maintenance
      - name: shop-deprovision
        type: deprovision
  sandbox:
    type: terraform_module
    files:
      main.tf: |
        output "ready" {{
          value = true
        }}
"#
    )
}

/// Creates the App at version `1`. The Component first: an App applied before it would
/// first be released without it.
pub async fn create_app(client: &kube_client::Client) {
    set_version(client, "1").await;
    let app = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "shop"},
        "spec": {
            "permissions": {"roles": [
                {"name": "{{ install.id }}-provision", "type": "provision"},
                {"name": "{{ install.id }}-maintenance", "type": "maintenance"},
                {"name": "{{ install.id }}-deprovision", "type": "deprovision"},
            ]},
            "sandbox": {"type": "terraform_module", "source": "./sandbox"},
        }
    });
    Api::<App>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(app).unwrap(),
        )
        .await
        .unwrap();
}

/// Creates or changes component `web`, whose manifest carries `version`: each version
/// is a new release of the App.
pub async fn set_version(client: &kube_client::Client, version: &str) {
    set_component(client, "web", version).await;
}

/// Creates or changes component `name` of `shop`: a ConfigMap `name` carrying
/// `version`.
pub async fn set_component(client: &kube_client::Client, name: &str, version: &str) {
    let component = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
        "metadata": {"name": name},
        "spec": {"app": "shop", "type": "kubernetes_manifest",
                 "manifest": {"namespace": "shop", "content": format!(
                     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  version: \"{version}\"\n")}},
    });
    Api::<Component>::namespaced(client.clone(), "default")
        .patch(
            name,
            &PatchParams::apply("rollout-test").force(),
            &Patch::Apply(component),
        )
        .await
        .unwrap();
}

/// Creates install `name` of `shop` with `labels`, in `approve-all` mode, pinned to
/// `release`.
pub async fn create_install(
    installs: &Api<Install>,
    name: &str,
    labels: serde_json::Value,
    release: &str,
) {
    let install = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": name, "labels": labels},
        "spec": {"app": "shop", "approvalMode": "approve-all", "release": release,
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
    });
    installs
        .create(
            &PostParams::default(),
            &serde_json::from_value(install).unwrap(),
        )
        .await
        .unwrap();
}

/// Waits for the App's release to be other than `previous`; returns it.
pub async fn release_after(apps: &Api<App>, previous: Option<&str>) -> String {
    eventually(30, "a new App release", async || {
        let release = apps.get("shop").await.ok()?.status?.release?;
        (Some(release.as_str()) != previous).then_some(release)
    })
    .await
}

/// The release every component of `install` is deployed at, once it is Active and
/// they all agree.
pub fn deployed_release(install: &Install) -> Option<String> {
    let status = install.status.as_ref()?;
    let releases: BTreeSet<Option<String>> = status
        .components
        .iter()
        .map(|c| c.release.clone())
        .collect();
    match (
        status.phase,
        releases.into_iter().collect::<Vec<_>>().as_slice(),
    ) {
        (Some(InstallPhase::Active), [Some(release)]) => Some(release.clone()),
        _ => None,
    }
}

/// A sandbox module directory, `dir/sandbox`, whose `main.tf` only outputs
/// `ready = true`: what an App names as its sandbox (`source.path`, under the runner's
/// `--module-root`) in tests about its components. Returns the directory.
pub fn ready_sandbox(dir: &std::path::Path) -> std::path::PathBuf {
    let sandbox = dir.join("sandbox");
    std::fs::create_dir_all(&sandbox).expect("the sandbox directory");
    std::fs::write(
        sandbox.join("main.tf"),
        "output \"ready\" {\n  value = true\n}\n",
    )
    .expect("the sandbox module");
    sandbox
}
