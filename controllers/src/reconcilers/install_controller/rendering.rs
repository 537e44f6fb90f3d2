//! Rendering an install's sandbox and components, each once per change of what its
//! templates read.
//!
//! An install is reconciled every time one of its Plans finishes and every time its App
//! changes; each reconcile needs every component's rendered state (its Plan's name is a
//! hash of it). Rendering all of them each time made a fleet rollout cost the number of
//! installs times the number of components in template rendering, however small the
//! change. Each rendering is kept with a fingerprint of its inputs: the object it
//! renders (uid and generation), the App's and the Install's specs (generations), and
//! the values its templates refer to (a component's or the sandbox's outputs, the
//! release). A reconcile renders again only what a change reached.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Mutex, OnceLock};

use kube_client::Resource;
use outpost_api::{App, Component, Install, content_hash};
use serde_json::{Value, json};

use crate::caches::app_cache::Release;
use crate::logic::kubernetes_secrets::with_kubernetes_secrets;
use crate::logic::reference::Reference;
use crate::logic::template::{InstallOutputs, TemplateContext};

/// The dependencies a rendering was made from, and the key they make.
type RenderKey = (Vec<String>, String);

/// The entity the sandbox is kept under.
const SANDBOX: &str = "";

/// One kept rendering.
struct Rendered {
    fingerprint: u64,
    /// The rendered state, as compact JSON (a tenth of its size as a `Value`).
    json: Box<[u8]>,
    /// The dependencies' keys the key was computed with, and the key.
    key: Option<RenderKey>,
}

/// Kept renderings: install uid → entity → rendering.
#[derive(Default)]
pub(super) struct Renders(Mutex<HashMap<String, HashMap<String, Rendered>>>);

impl Renders {
    /// Drops what is kept for an install that is gone.
    pub(super) fn forget(&self, install: &Install) {
        if let Some(uid) = &install.metadata.uid {
            self.0.lock().expect("not poisoned").remove(uid);
        }
    }
}

/// Renders for one reconcile of one install.
pub(super) struct Renderer<'a> {
    renders: &'a Renders,
    app: &'a App,
    install: &'a Install,
    outputs: &'a InstallOutputs,
    release: &'a Release,
    /// Made on first use: only a rendering that is not kept needs it.
    context: OnceLock<Option<TemplateContext>>,
}

impl<'a> Renderer<'a> {
    /// `app` carries the release being rendered in `status.release`.
    pub(super) fn new(
        renders: &'a Renders,
        app: &'a App,
        install: &'a Install,
        outputs: &'a InstallOutputs,
        release: &'a Release,
    ) -> Self {
        Renderer {
            renders,
            app,
            install,
            outputs,
            release,
            context: OnceLock::new(),
        }
    }

    /// The template context, when the install can be rendered at all.
    pub(super) fn context(&self) -> Option<&TemplateContext> {
        self.context
            .get_or_init(|| TemplateContext::new(self.app, self.install, self.outputs).ok())
            .as_ref()
    }

    /// The sandbox's desired state (its rendered definition; the definition itself when
    /// it does not render) and its content hash.
    pub(super) fn sandbox(&self) -> (Value, String) {
        let references = self.release.sandbox_references();
        let fingerprint = self.fingerprint(SANDBOX, (None, None), references);
        if let Some((value, Some((_, key)))) = self.kept(SANDBOX, fingerprint, &[]) {
            return (value, key);
        }
        let spec = serde_json::to_value(&self.app.spec.sandbox).unwrap_or_default();
        let desired = match self.context() {
            Some(context) => context.render_value(&spec).unwrap_or(spec),
            None => spec,
        };
        let desired = with_stack_name(desired, self.install, "sandbox", true);
        let key = content_hash(&desired);
        self.keep(
            SANDBOX,
            fingerprint,
            &desired,
            Some((Vec::new(), key.clone())),
        );
        (desired, key)
    }

    /// `component`'s desired state (its rendered spec, with the Secret targets its
    /// manifest references) and its key (the hash of that state and `dependencies`, the
    /// keys of the components it depends on); `None` while it cannot be rendered (its
    /// dependencies' outputs are not there yet).
    pub(super) fn component(
        &self,
        component: &Component,
        dependencies: &[&String],
    ) -> Option<(Value, String)> {
        let name = component.meta().name.as_deref().unwrap_or_default();
        let entity = format!("c/{name}");
        let identity = (component.meta().uid.as_deref(), component.meta().generation);
        let references = self.release.component_references(name);
        let fingerprint = self.fingerprint(&entity, identity, references);
        let dependencies: Vec<String> = dependencies.iter().map(|k| (*k).clone()).collect();
        if let Some((rendered, key)) = self.kept(&entity, fingerprint, &dependencies) {
            let key = match key {
                Some((_, key)) => key,
                None => self.key(&entity, fingerprint, &rendered, dependencies),
            };
            return Some((rendered, key));
        }
        let spec = serde_json::to_value(&component.spec).unwrap_or_default();
        let rendered = self.context()?.render_value(&spec).ok()?;
        let rendered = with_kubernetes_secrets(self.app, rendered);
        let rendered = with_stack_name(rendered, self.install, name, false);
        self.keep(&entity, fingerprint, &rendered, None);
        let key = self.key(&entity, fingerprint, &rendered, dependencies);
        Some((rendered, key))
    }

    /// A component's key, kept with the dependencies' keys it was made from.
    fn key(
        &self,
        entity: &str,
        fingerprint: u64,
        rendered: &Value,
        dependencies: Vec<String>,
    ) -> String {
        let key = content_hash(&json!({"state": rendered, "dependencies": dependencies}));
        let mut kept = self.renders.0.lock().expect("not poisoned");
        if let Some(rendered) = kept
            .get_mut(self.uid())
            .and_then(|of_install| of_install.get_mut(entity))
            .filter(|r| r.fingerprint == fingerprint)
        {
            rendered.key = Some((dependencies, key.clone()));
        }
        key
    }

    /// The kept rendering of `entity` if its fingerprint still holds, with its key if
    /// that was made from `dependencies`.
    fn kept(
        &self,
        entity: &str,
        fingerprint: u64,
        dependencies: &[String],
    ) -> Option<(Value, Option<RenderKey>)> {
        let kept = self.renders.0.lock().expect("not poisoned");
        let rendered = kept.get(self.uid())?.get(entity)?;
        if rendered.fingerprint != fingerprint {
            return None;
        }
        let value = serde_json::from_slice(&rendered.json).ok()?;
        let key = rendered
            .key
            .clone()
            .filter(|(made_from, _)| made_from.as_slice() == dependencies);
        Some((value, key))
    }

    fn keep(&self, entity: &str, fingerprint: u64, rendered: &Value, key: Option<RenderKey>) {
        let json = serde_json::to_vec(rendered)
            .expect("JSON encodes")
            .into_boxed_slice();
        self.renders
            .0
            .lock()
            .expect("not poisoned")
            .entry(self.uid().to_owned())
            .or_default()
            .insert(
                entity.to_owned(),
                Rendered {
                    fingerprint,
                    json,
                    key,
                },
            );
    }

    fn uid(&self) -> &str {
        self.install.metadata.uid.as_deref().unwrap_or_default()
    }

    /// A hash of everything a rendering of `entity` reads: the object (uid and
    /// generation), the App's and the Install's specs, and what `references` reach.
    fn fingerprint(
        &self,
        entity: &str,
        identity: (Option<&str>, Option<i64>),
        references: Option<&[Reference]>,
    ) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        entity.hash(&mut hasher);
        identity.hash(&mut hasher);
        for meta in [self.app.meta(), self.install.meta()] {
            (&meta.uid, meta.generation).hash(&mut hasher);
        }
        let release = self.app.status.as_ref().and_then(|s| s.release.as_deref());
        match references {
            Some(references) => {
                for reference in references {
                    match reference {
                        Reference::Component { name, .. } => {
                            hash_json(&self.outputs.components.get(name), &mut hasher)
                        }
                        Reference::Sandbox { .. } => hash_json(&self.outputs.sandbox, &mut hasher),
                        Reference::App { field } if field != "name" => release.hash(&mut hasher),
                        Reference::Collection { root } if root == "components" => {
                            hash_json(&self.outputs.components, &mut hasher)
                        }
                        Reference::Unknown { .. } => {
                            hash_json(&self.outputs.components, &mut hasher);
                            hash_json(&self.outputs.sandbox, &mut hasher);
                            release.hash(&mut hasher);
                        }
                        // The install's and the App's specs are hashed above.
                        _ => {}
                    }
                }
            }
            // Templates that do not parse: everything they could read.
            None => {
                hash_json(&self.outputs.components, &mut hasher);
                hash_json(&self.outputs.sandbox, &mut hasher);
                release.hash(&mut hasher);
            }
        }
        hasher.finish()
    }
}

/// Feeds `value`'s compact JSON to `hasher` (outputs are JSON maps, not `Hash`).
fn hash_json(value: &impl serde::Serialize, hasher: &mut impl std::hash::Hasher) {
    serde_json::to_vec(value).unwrap_or_default().hash(hasher);
    hasher.write_u8(0);
}

/// A `cloudformation` component's (or sandbox's, `sandbox`) desired state with the
/// stack's name filled in when the App leaves it out: `<install>-<entity>`, so the Plan
/// shows the stack it changes.
fn with_stack_name(mut desired: Value, install: &Install, entity: &str, sandbox: bool) -> Value {
    if desired["type"] != "cloudformation" {
        return desired;
    }
    let name = format!(
        "{}-{entity}",
        install.meta().name.as_deref().unwrap_or_default()
    );
    let block = if sandbox {
        Some(&mut desired)
    } else {
        desired.get_mut("cloudformation")
    };
    if let Some(block) = block.and_then(Value::as_object_mut)
        && block
            .get("stackName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        block.insert("stackName".into(), json!(name));
    }
    desired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloudformation_stacks_are_named_after_install_and_entity_unless_named() {
        let install: Install = serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
            "metadata": {"name": "acme", "namespace": "default"},
            "spec": {"app": "shop", "cloud": {"provider": "aws", "accountId": "123456789012", "region": "us-east-1"}}
        }))
        .expect("a test Install");
        let component = json!({"type": "cloudformation", "cloudformation": {"template": "t"}});
        assert_eq!(
            with_stack_name(component, &install, "queue", false)["cloudformation"]["stackName"],
            "acme-queue"
        );
        let named = json!({"type": "cloudformation",
            "cloudformation": {"template": "t", "stackName": "theirs"}});
        assert_eq!(
            with_stack_name(named, &install, "queue", false)["cloudformation"]["stackName"],
            "theirs"
        );
        let sandbox = json!({"type": "cloudformation", "source": "https://s3/t"});
        assert_eq!(
            with_stack_name(sandbox, &install, "sandbox", true)["stackName"],
            "acme-sandbox"
        );
        let terraform = json!({"type": "terraform_module", "terraform": {"source": "/m"}});
        assert_eq!(
            with_stack_name(terraform.clone(), &install, "db", false),
            terraform
        );
    }
}
