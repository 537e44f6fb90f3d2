//! `Policy`: a Rego module (conftest/OPA convention: `deny` and `warn`
//! sets) checked against what a Plan will apply and what the runner observes.

use crate::party::Party;
use crate::validation::{
    FieldError, NameRule, Validate, duplicates, validate_name, validate_object_name,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of a `Policy`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Policy",
    plural = "policies",
    namespaced,
    status = "PolicyStatus",
    derive = "PartialEq",
    shortname = "pol",
    category = "outpost",
    selectable = ".spec.app",
    doc = "A Rego policy checked before apply and on drift.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Source", type_ = "string", json_path = ".spec.source"),
    printcolumn(
        name = "Enforcement",
        type_ = "string",
        json_path = ".spec.enforcement"
    ),
    printcolumn(
        name = "Compiled",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Compiled\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// App the policy applies to; every App in the namespace when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Who wrote the policy; `vendor` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Party>,
    /// Rego v1 module with `package outpost.<name>`.
    pub module: String,
    /// The documents the policy is evaluated against.
    pub inputs: Vec<PolicyInput>,
    /// What a `deny` result does; `deny` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// Installs the policy applies to; all when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_selector: Option<LabelSelector>,
}

impl PolicySpec {
    /// The enforcement in effect, with the default applied.
    pub fn enforcement(&self) -> Enforcement {
        self.enforcement.unwrap_or_default()
    }

    /// The package the module declares (`outpost.no_db_recreate`), if any.
    pub fn package(&self) -> Option<&str> {
        self.module.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("package ")?;
            Some(rest.trim())
        })
    }
}

/// Status of a `Policy`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// `Compiled`: whether the module parsed and compiled, with the error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A document a policy is evaluated against.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PolicyInput {
    /// Rendered Kubernetes objects (manifests, Helm output), one per evaluation.
    Kubernetes,
    /// Terraform plan JSON (`resource_changes`, ...).
    Terraform,
    /// Image references a Plan deploys.
    Images,
    /// A CloudFormation change set as described (`changes`, each resource's action,
    /// replacement and changed properties), with the stack and its parameters.
    Cloudformation,
    /// The Plan object itself.
    Plan,
    /// A DriftReport.
    Drift,
    /// A terraform module's static configuration, read by the runner before `terraform
    /// init` runs any of it: providers, module calls, resources and files.
    Static,
}

/// What a `deny` result does.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// The Plan is denied.
    #[default]
    Deny,
    /// The result is recorded as a warning; the Plan goes on.
    Warn,
    /// The Plan waits for a person's approval of its real diff (even on an install
    /// whose approval mode is `approve-all`).
    Approve,
}

impl Validate for Policy {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        if let Some(app) = &spec.app {
            errors.extend(validate_name("spec.app", app, NameRule::Label));
        }
        match spec.package() {
            None => errors.push(FieldError::required(
                "spec.module",
                "a Rego module with a package declaration",
            )),
            Some(package) => {
                let valid = package.strip_prefix("outpost.").is_some_and(|rest| {
                    !rest.is_empty()
                        && rest.split('.').all(|part| {
                            part.chars()
                                .next()
                                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        })
                });
                if !valid {
                    errors.push(FieldError::invalid(
                        "spec.module",
                        format!("package {package}"),
                        "the package must be outpost.<name>",
                    ));
                }
            }
        }
        if spec.inputs.is_empty() {
            errors.push(FieldError::required("spec.inputs", "at least one input"));
        }
        let names: Vec<String> = spec
            .inputs
            .iter()
            .map(|i| serde_json::to_string(i).unwrap_or_default())
            .collect();
        errors.extend(duplicates(names.iter().map(String::as_str), |i| {
            format!("spec.inputs[{i}]")
        }));
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;

    fn policy(module: &str, inputs: Vec<PolicyInput>) -> Policy {
        Policy::new(
            "no-db-recreate",
            PolicySpec {
                app: Some("shopfront".into()),
                source: Some(Party::Customer),
                module: module.into(),
                inputs,
                enforcement: None,
                install_selector: None,
            },
        )
    }

    const MODULE: &str = "package outpost.no_db_recreate\n\ndeny contains msg if { false }\n";

    #[test]
    fn valid_policy() {
        let p = policy(MODULE, vec![PolicyInput::Terraform]);
        assert_eq!(p.validate(), vec![]);
        assert_eq!(p.spec.package(), Some("outpost.no_db_recreate"));
        assert_eq!(p.spec.enforcement(), Enforcement::Deny);
    }

    #[test]
    fn package_must_be_under_outpost() {
        let p = policy("package main\n", vec![PolicyInput::Terraform]);
        assert_eq!(p.validate()[0].field, "spec.module");
        let p = policy(
            "deny contains msg if { true }",
            vec![PolicyInput::Terraform],
        );
        assert_eq!(p.validate()[0].kind, FieldErrorKind::Required);
        let p = policy("package outpost.\n", vec![PolicyInput::Terraform]);
        assert_eq!(p.validate().len(), 1);
    }

    #[test]
    fn inputs_are_required_and_unique() {
        let p = policy(MODULE, vec![]);
        assert_eq!(p.validate()[0].field, "spec.inputs");
        let p = policy(MODULE, vec![PolicyInput::Plan, PolicyInput::Plan]);
        let errors = p.validate();
        assert_eq!(
            (errors[0].field.as_str(), errors[0].kind),
            ("spec.inputs[1]", FieldErrorKind::Duplicate)
        );
    }
}
