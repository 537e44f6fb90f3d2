//! What a Plan's desired state says of its stack, and what the work dir remembers of it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::CloudFormationError;

/// Where CloudFormation gets the template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Template {
    /// `TemplateURL`: CloudFormation reads it (from S3).
    Url(String),
    /// `TemplateBody`: the template inline.
    Body(String),
}

/// The stack a deploy (or provision) Plan wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackSource {
    /// The stack's name.
    pub stack_name: String,
    /// Its template.
    pub template: Template,
    /// Its parameters, secret references unresolved.
    pub parameters: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ComponentBlock {
    #[serde(default)]
    template_url: String,
    #[serde(default)]
    template: String,
    #[serde(default)]
    stack_name: Option<String>,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SandboxBlock {
    #[serde(default)]
    source: String,
    #[serde(default)]
    stack_name: Option<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
}

/// The stack `desired` describes: a component's `cloudformation` block, or a
/// `cloudformation` sandbox (`source` is the template URL, `variables` the parameters).
/// The stack name is rendered into the desired state by the control plane
/// (`<install>-<component>`, `<install>-sandbox`) unless the App names it.
pub fn stack_of(desired: &Value) -> Result<StackSource, CloudFormationError> {
    let invalid = |why: String| CloudFormationError::InvalidDesiredState(why);
    let (template_url, template, stack_name, parameters) =
        if let Some(block) = desired.get("cloudformation") {
            let block: ComponentBlock =
                serde_json::from_value(block.clone()).map_err(|e| invalid(e.to_string()))?;
            (
                block.template_url,
                block.template,
                block.stack_name,
                block.parameters,
            )
        } else if desired.get("sandbox").is_some() || desired["type"] == "cloudformation" {
            // Provision Plans carry the sandbox block, deprovision Plans `{"sandbox": …}`.
            let block = desired.get("sandbox").unwrap_or(desired);
            let block: SandboxBlock =
                serde_json::from_value(block.clone()).map_err(|e| invalid(e.to_string()))?;
            (
                block.source,
                String::new(),
                block.stack_name,
                block.variables,
            )
        } else {
            return Err(invalid("it has neither cloudformation nor sandbox".into()));
        };
    let template = match (template_url.trim().is_empty(), template.trim().is_empty()) {
        (false, true) => Template::Url(template_url),
        (true, false) => Template::Body(template),
        _ => {
            return Err(invalid(
                "exactly one of templateUrl and template is needed".into(),
            ));
        }
    };
    let stack_name = stack_name
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| invalid("it names no stack (stackName)".into()))?;
    Ok(StackSource {
        stack_name,
        template,
        parameters,
    })
}

/// What the entity's work dir remembers of the stack it deployed: teardown Plans name
/// no stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackRecord {
    /// The stack's name.
    pub stack_name: String,
    /// Its id (ARN), once CloudFormation gave one.
    #[serde(default)]
    pub stack_id: Option<String>,
}

fn record_path(work_dir: &Path) -> PathBuf {
    work_dir.join("cloudformation-stack.json")
}

impl StackRecord {
    /// The record in `work_dir`, if any.
    pub async fn read(work_dir: &Path) -> Result<Option<Self>, CloudFormationError> {
        match tokio::fs::read(record_path(work_dir)).await {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                CloudFormationError::InvalidDesiredState(format!(
                    "{} does not parse: {e}",
                    record_path(work_dir).display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CloudFormationError::Io {
                what: format!("reading {}", record_path(work_dir).display()),
                source,
            }),
        }
    }

    /// Writes the record into `work_dir`.
    pub async fn write(&self, work_dir: &Path) -> Result<(), CloudFormationError> {
        let path = record_path(work_dir);
        tokio::fs::write(&path, serde_json::to_vec(self).expect("JSON encodes"))
            .await
            .map_err(|source| CloudFormationError::Io {
                what: format!("writing {}", path.display()),
                source,
            })
    }

    /// Removes the record (the stack is deleted).
    pub async fn remove(work_dir: &Path) {
        let _ = tokio::fs::remove_file(record_path(work_dir)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn components_and_sandboxes_name_their_stack_and_template() {
        let component = json!({"type": "cloudformation", "cloudformation": {
            "template": "Resources: {}", "stackName": "acme-queue", "parameters": {"A": "1"}}});
        let stack = stack_of(&component).unwrap();
        assert_eq!(stack.stack_name, "acme-queue");
        assert_eq!(stack.template, Template::Body("Resources: {}".into()));
        assert_eq!(stack.parameters["A"], "1");
        let sandbox = json!({"type": "cloudformation",
            "source": "https://s3.amazonaws.com/b/t.yaml", "stackName": "acme-sandbox"});
        assert_eq!(
            stack_of(&sandbox).unwrap().template,
            Template::Url("https://s3.amazonaws.com/b/t.yaml".into())
        );
        let unnamed = json!({"cloudformation": {"template": "x"}});
        assert!(stack_of(&unnamed).is_err());
        let both =
            json!({"cloudformation": {"template": "x", "templateUrl": "y", "stackName": "s"}});
        assert!(stack_of(&both).is_err());
    }
}
