//! Evaluating compiled policies against one input and applying their enforcement.

use outpost_api::{Enforcement, Policy, PolicyInput, Verdict};
use serde_json::Value;

use crate::CompiledPolicy;
use crate::input::documents;

/// What evaluation needs to know about a policy besides its module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyMeta {
    /// The policy's name (the `Policy` object's name, or the file it came from).
    pub name: String,
    /// The input kinds the policy is evaluated against; others are skipped.
    pub inputs: Vec<PolicyInput>,
    /// What the policy's `deny` results do.
    pub enforcement: Enforcement,
}

impl PolicyMeta {
    /// The name, inputs and enforcement (default applied) of a `Policy` object.
    pub fn from_policy(policy: &Policy) -> Self {
        Self {
            name: policy.metadata.name.clone().unwrap_or_default(),
            inputs: policy.spec.inputs.clone(),
            enforcement: policy.spec.enforcement(),
        }
    }

    /// Whether the policy is evaluated against `kind` inputs.
    pub fn applies_to(&self, kind: PolicyInput) -> bool {
        self.inputs.contains(&kind)
    }
}

/// One policy's result on one input, enforcement applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVerdict {
    /// The policy's name.
    pub policy: String,
    /// The policy's enforcement.
    pub enforcement: Enforcement,
    /// Messages that deny; always empty under `warn` enforcement.
    pub denials: Vec<String>,
    /// Messages that only warn, including a `warn`-enforced policy's `deny` results.
    pub warnings: Vec<String>,
    /// Messages that ask a person to approve: an `approve`-enforced policy's `deny`
    /// results (and its evaluation errors: it fails closed, to a person).
    pub approvals: Vec<String>,
}

impl PolicyVerdict {
    /// Whether the policy denies the input.
    pub fn denied(&self) -> bool {
        !self.denials.is_empty()
    }

    /// Whether the policy asks for a person's approval of the input.
    pub fn approval_required(&self) -> bool {
        !self.approvals.is_empty()
    }
}

impl From<PolicyVerdict> for Verdict {
    fn from(v: PolicyVerdict) -> Self {
        let denied = v.denied();
        let approval_required = v.approval_required();
        let mut messages = v.denials;
        messages.extend(v.approvals);
        messages.extend(v.warnings);
        Verdict {
            policy: v.policy,
            enforcement: v.enforcement,
            denied,
            approval_required,
            messages,
            local: false,
        }
    }
}

/// Evaluates every policy that declares `input_kind` against `input`, one verdict
/// per such policy, in the order given.
///
/// The input is split into documents with [`documents`] (a Kubernetes list is
/// evaluated once per object) and each policy's messages are gathered over all of
/// them. A policy whose evaluation fails denies with the error as its message (it
/// fails closed), or warns under `warn` enforcement.
pub fn evaluate(
    policies: &[(&PolicyMeta, &CompiledPolicy)],
    input_kind: PolicyInput,
    input: &Value,
) -> Vec<PolicyVerdict> {
    let documents = documents(input_kind, input);
    policies
        .iter()
        .filter(|(meta, _)| meta.applies_to(input_kind))
        .map(|(meta, compiled)| {
            let mut deny = Vec::new();
            let mut warn = Vec::new();
            for document in &documents {
                match compiled.findings(document) {
                    Ok(findings) => {
                        deny.extend(findings.deny);
                        warn.extend(findings.warn);
                    }
                    Err(err) => deny.push(err.to_string()),
                }
            }
            match meta.enforcement {
                Enforcement::Deny => PolicyVerdict {
                    policy: meta.name.clone(),
                    enforcement: meta.enforcement,
                    denials: deny,
                    warnings: warn,
                    approvals: Vec::new(),
                },
                Enforcement::Approve => PolicyVerdict {
                    policy: meta.name.clone(),
                    enforcement: meta.enforcement,
                    denials: Vec::new(),
                    warnings: warn,
                    approvals: deny,
                },
                Enforcement::Warn => {
                    deny.extend(warn);
                    PolicyVerdict {
                        policy: meta.name.clone(),
                        enforcement: meta.enforcement,
                        denials: Vec::new(),
                        warnings: deny,
                        approvals: Vec::new(),
                    }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile;
    use serde_json::json;

    const MODULE: &str = r#"package outpost.t

deny contains sprintf("bad %s", [input.metadata.name]) if input.bad
warn contains "meh" if input.meh
"#;

    fn meta(enforcement: Enforcement, inputs: Vec<PolicyInput>) -> PolicyMeta {
        PolicyMeta {
            name: "t".into(),
            inputs,
            enforcement,
        }
    }

    #[test]
    fn deny_enforcement_denies_and_warns() {
        let compiled = compile("t.rego", MODULE).unwrap();
        let meta = meta(Enforcement::Deny, vec![PolicyInput::Kubernetes]);
        let input = json!({"metadata": {"name": "a"}, "bad": true, "meh": true});
        let v = evaluate(&[(&meta, &compiled)], PolicyInput::Kubernetes, &input);
        assert_eq!(v.len(), 1);
        assert!(v[0].denied());
        assert_eq!(v[0].denials, vec!["bad a"]);
        assert_eq!(v[0].warnings, vec!["meh"]);
        let verdict = Verdict::from(v[0].clone());
        assert!(verdict.denied);
        assert_eq!(verdict.messages, vec!["bad a", "meh"]);
    }

    #[test]
    fn warn_enforcement_never_denies() {
        let compiled = compile("t.rego", MODULE).unwrap();
        let meta = meta(Enforcement::Warn, vec![PolicyInput::Kubernetes]);
        let input = json!({"metadata": {"name": "a"}, "bad": true});
        let v = evaluate(&[(&meta, &compiled)], PolicyInput::Kubernetes, &input);
        assert!(!v[0].denied());
        assert_eq!(v[0].warnings, vec!["bad a"]);
        assert!(!Verdict::from(v[0].clone()).denied);
    }

    #[test]
    fn only_policies_declaring_the_input_kind_run() {
        let compiled = compile("t.rego", MODULE).unwrap();
        let tf = meta(Enforcement::Deny, vec![PolicyInput::Terraform]);
        let input = json!({"metadata": {"name": "a"}, "bad": true});
        assert!(evaluate(&[(&tf, &compiled)], PolicyInput::Kubernetes, &input).is_empty());
        assert_eq!(
            evaluate(&[(&tf, &compiled)], PolicyInput::Terraform, &input).len(),
            1
        );
    }

    #[test]
    fn kubernetes_lists_are_evaluated_per_object() {
        let compiled = compile("t.rego", MODULE).unwrap();
        let meta = meta(Enforcement::Deny, vec![PolicyInput::Kubernetes]);
        let input = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"metadata": {"name": "a"}, "bad": true},
            {"metadata": {"name": "b"}},
            {"metadata": {"name": "c"}, "bad": true},
        ]});
        let v = evaluate(&[(&meta, &compiled)], PolicyInput::Kubernetes, &input);
        assert_eq!(v[0].denials, vec!["bad a", "bad c"]);
    }

    #[test]
    fn evaluation_errors_fail_closed() {
        let compiled = compile(
            "e.rego",
            "package outpost.e\n\ndeny contains msg if {\n  msg := sprintf(\"%d\", [1 / input.z])\n}\n",
        )
        .unwrap();
        let meta = meta(Enforcement::Deny, vec![PolicyInput::Plan]);
        let v = evaluate(&[(&meta, &compiled)], PolicyInput::Plan, &json!({"z": 0}));
        assert!(v[0].denied(), "{v:?}");
        assert!(
            v[0].denials[0].starts_with("evaluating data.outpost.e.deny"),
            "{v:?}"
        );
    }
}
