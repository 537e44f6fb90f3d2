//! Policies at the control plane, before dispatch ("shift left"): each Policy that
//! applies to the Plan's app is evaluated on what the Plan will do.
//!
//! | input kind   | document evaluated |
//! |--------------|--------------------|
//! | `plan`       | the Plan (operation, entity, resolved role) |
//! | `kubernetes` | `desiredState.manifests` (each object) |
//! | `terraform`  | `desiredState.terraformPlan` (a plan JSON), when present |
//! | `images`     | `desiredState.images` |
//!
//! A policy whose module does not compile denies (admission normally refuses such
//! modules; this covers ones stored before a policy engine upgrade).

use outpost_api::{Plan, Policy, PolicyInput, Verdict};
use outpost_policy::{CompiledPolicy, PolicyMeta, compile, evaluate};
use serde_json::Value;

/// The verdicts of `policies` on `plan`.
pub fn check_plan(plan: &Plan, policies: &[Policy]) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    let mut compiled: Vec<(PolicyMeta, CompiledPolicy)> = Vec::new();
    for policy in policies {
        let meta = PolicyMeta::from_policy(policy);
        match compile(&meta.name, &policy.spec.module) {
            Ok(module) => compiled.push((meta, module)),
            Err(err) => verdicts.push(Verdict {
                policy: meta.name.clone(),
                enforcement: meta.enforcement,
                denied: true,
                messages: vec![format!("the policy does not compile: {err}")],
            }),
        }
    }
    let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> = compiled.iter().map(|(m, c)| (m, c)).collect();
    let desired = plan.spec.desired_state.clone().unwrap_or(Value::Null);
    let inputs = [
        (PolicyInput::Plan, Some(outpost_policy::input::plan(plan))),
        (PolicyInput::Kubernetes, desired.get("manifests").cloned()),
        (
            PolicyInput::Terraform,
            desired.get("terraformPlan").cloned(),
        ),
        (
            PolicyInput::Images,
            desired
                .get("images")
                .map(|i| serde_json::json!({"images": i})),
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
