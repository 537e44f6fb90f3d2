//! `InstallStack`: the rendered CloudFormation stack a customer runs to
//! create an install's roles and runner, and what the runner reported of it.

use crate::validation::{
    FieldError, NameRule, Validate, validate_name, validate_object_name, validate_required,
};
use crate::wire::any_object;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Spec of an `InstallStack`, written by the install stack controller.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "InstallStack",
    namespaced,
    status = "InstallStackStatus",
    derive = "PartialEq",
    shortname = "istack",
    category = "outpost",
    selectable = ".spec.install",
    doc = "The rendered install stack of an Install.",
    printcolumn(name = "Install", type_ = "string", json_path = ".spec.install"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "Enabled Roles",
        type_ = "string",
        json_path = ".status.enabledRoles"
    ),
    printcolumn(name = "Reported", type_ = "date", json_path = ".status.reportedAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InstallStackSpec {
    /// Name of the Install.
    pub install: String,
    /// Version of the stack; bumped whenever the template changes.
    pub version: String,
    /// The CloudFormation template (a JSON object).
    #[schemars(schema_with = "any_object")]
    pub template: Value,
    /// Stack parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// Status of an `InstallStack`, as reported by the runner.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstallStackStatus {
    /// Role names (rendered) the customer left enabled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled_roles: Vec<String>,
    /// Stack outputs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
    /// When the runner last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<Time>,
}

impl Validate for InstallStack {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        errors.extend(validate_name(
            "spec.install",
            &self.spec.install,
            NameRule::Label,
        ));
        errors.extend(validate_required("spec.version", &self.spec.version));
        if !self.spec.template.is_object() {
            errors.push(FieldError::invalid(
                "spec.template",
                "<non-object>",
                "must be a CloudFormation template object",
            ));
        }
        errors
    }
}

/// `text` in PascalCase, keeping only ASCII letters and digits: every run of
/// other characters starts a new word. `eks-upgrade-role` gives
/// `EksUpgradeRole`, `db_password` gives `DbPassword`. Empty when `text` has
/// no letters or digits. The install stack's logical ids are made of it.
///
/// ```
/// assert_eq!(outpost_api::install_stack::pascal_case("-eks-upgrade-role"), "EksUpgradeRole");
/// ```
pub fn pascal_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word_start = true;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if word_start {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
            word_start = false;
        } else {
            word_start = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn template_must_be_an_object() {
        let spec = InstallStackSpec {
            install: "acme".into(),
            version: "1".into(),
            template: json!({"Resources": {}}),
            parameters: BTreeMap::new(),
        };
        assert_eq!(InstallStack::new("acme", spec.clone()).validate(), vec![]);
        let bad = InstallStack::new(
            "acme",
            InstallStackSpec {
                template: json!([1]),
                ..spec
            },
        );
        assert_eq!(bad.validate()[0].field, "spec.template");
    }
}
