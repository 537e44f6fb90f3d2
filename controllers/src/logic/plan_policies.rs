//! Policies at the control plane, before dispatch ("shift left"): each Policy that
//! applies to the Plan's app is evaluated on what the Plan will do.
//!
//! | input kind   | document evaluated |
//! |--------------|--------------------|
//! | `plan`       | the Plan (operation, entity, resolved role) |
//! | `kubernetes` | `desiredState.manifests` (each object), or the objects of a `kubernetes_manifest` component's rendered `manifest.content` |
//! | `terraform`  | `desiredState.terraformPlan` (a plan JSON), when present |
//! | `images`     | `desiredState.images`, or the container images of those objects and a `container_image` component's source |
//!
//! A Policy with an `installSelector` applies only to installs whose labels it selects.
//!
//! A policy whose module does not compile denies (admission normally refuses such
//! modules; this covers ones stored before a policy engine upgrade).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use outpost_api::{Plan, Policy, PolicyInput, Verdict};
use outpost_policy::{CompiledPolicy, PolicyMeta, compile, evaluate};
use serde_json::Value;

/// Modules compiled so far, by policy name and module text: a Policy is compiled once,
/// not once per Plan. Cleared when it grows past [`COMPILED_LIMIT`] (edited policies
/// leave their old modules behind).
static COMPILED: LazyLock<Mutex<HashMap<(String, String), Compiled>>> =
    LazyLock::new(Default::default);
/// Modules [`COMPILED`] holds at most.
const COMPILED_LIMIT: usize = 1_024;

/// A compiled module, or why it does not compile.
type Compiled = Result<Arc<CompiledPolicy>, String>;

fn compiled(name: &str, module: &str) -> Compiled {
    let key = (name.to_owned(), module.to_owned());
    if let Some(found) = COMPILED.lock().expect("not poisoned").get(&key) {
        return found.clone();
    }
    let result = compile(name, module)
        .map(Arc::new)
        .map_err(|e| e.to_string());
    let mut cache = COMPILED.lock().expect("not poisoned");
    if cache.len() >= COMPILED_LIMIT {
        cache.clear();
    }
    cache.insert(key, result.clone());
    result
}

/// The verdicts of `policies` on `plan`.
pub fn check_plan(plan: &Plan, policies: &[Policy]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    let mut modules: Vec<(PolicyMeta, Arc<CompiledPolicy>)> = Vec::new();
    for policy in policies {
        let meta = PolicyMeta::from_policy(policy);
        match compiled(&meta.name, &policy.spec.module) {
            Ok(module) => modules.push((meta, module)),
            Err(err) => verdicts.push(Verdict {
                policy: meta.name.clone(),
                enforcement: meta.enforcement,
                denied: true,
                messages: vec![format!("the policy does not compile: {err}")],
                ..Default::default()
            }),
        }
    }
    let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> =
        modules.iter().map(|(m, c)| (m, c.as_ref())).collect();
    let desired = plan.spec.desired_state.clone().unwrap_or(Value::Null);
    let manifests = desired
        .get("manifests")
        .cloned()
        .or_else(|| manifests_of(&desired));
    let images = desired.get("images").cloned().or_else(|| {
        let found = images_of(&desired, manifests.as_ref());
        (!found.is_empty()).then(|| Value::from(found))
    });
    let inputs = [
        (PolicyInput::Plan, Some(outpost_policy::input::plan(plan))),
        (PolicyInput::Kubernetes, manifests),
        (
            PolicyInput::Terraform,
            desired.get("terraformPlan").cloned(),
        ),
        (
            PolicyInput::Images,
            images.map(|i| serde_json::json!({"images": i})),
        ),
    ];
    for (kind, input) in inputs {
        if let Some(input) = input {
            verdicts.extend(
                evaluate(&pairs, kind, &input)
                    .into_iter()
                    .map(Verdict::from),
            );
        }
    }
    verdicts
}

/// The objects of a rendered `kubernetes_manifest` component (`manifest.content`, YAML
/// documents); `None` for anything else or content that does not parse.
fn manifests_of(desired: &Value) -> Option<Value> {
    if desired.get("type")?.as_str()? != "kubernetes_manifest" {
        return None;
    }
    let content = desired.get("manifest")?.get("content")?.as_str()?;
    let documents: Vec<Value> = serde_saphyr::from_multiple(content).ok()?;
    Some(Value::from(
        documents
            .into_iter()
            .filter(|d| d.is_object())
            .collect::<Vec<_>>(),
    ))
}

/// Image references: containers of Kubernetes objects, and a `container_image`
/// component's source and destination.
fn images_of(desired: &Value, manifests: Option<&Value>) -> Vec<Value> {
    let mut found = Vec::new();
    if let Some(objects) = manifests.and_then(Value::as_array) {
        for object in objects {
            collect_container_images(object, &mut found);
        }
    }
    if desired.get("type").and_then(Value::as_str) == Some("container_image")
        && let Some(image) = desired.get("image")
    {
        let repository = image.get("repository").and_then(Value::as_str);
        let tag = image.get("tag").and_then(Value::as_str);
        if let (Some(repository), Some(tag)) = (repository, tag) {
            found.push(serde_json::json!({"reference": format!("{repository}:{tag}")}));
        }
    }
    found
}

/// Every `containers[].image` / `initContainers[].image` under `value`.
fn collect_container_images(value: &Value, found: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if (key == "containers" || key == "initContainers")
                    && let Some(containers) = child.as_array()
                {
                    for image in containers.iter().filter_map(|c| c.get("image")) {
                        if let Some(image) = image.as_str() {
                            found.push(serde_json::json!({"reference": image}));
                        }
                    }
                } else {
                    collect_container_images(child, found);
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|i| collect_container_images(i, found)),
        _ => {}
    }
}

pub use outpost_policy::selects;

#[cfg(test)]
#[path = "plan_policies_tests.rs"]
mod tests;
