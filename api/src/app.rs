//! `App`: what a vendor declares once — inputs, secrets, roles, sandbox,
//! runner settings and the default drift schedule. Components, Actions and
//! OperationRoles refer to an App by name.

use crate::drift::DriftSettings;
use crate::input::{InputGroup, InputSpec, SecretSpec};
use crate::operation::Operation;
use crate::role::{Permissions, RoleSpec, RoleType};
use crate::validation::{
    FieldError, NameRule, Validate, duplicates, validate_identifier, validate_object_name,
    validate_required,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Spec of an `App`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "App",
    namespaced,
    status = "AppStatus",
    derive = "PartialEq",
    shortname = "app",
    category = "outpost",
    doc = "An application a vendor runs in customer cloud accounts.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Release", type_ = "string", json_path = ".status.release"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AppSpec {
    /// Human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// What the App is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Values an install sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputSpec>,
    /// Groups inputs are shown in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_groups: Vec<InputGroup>,
    /// Secrets the App needs; values stay in the customer's account.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretSpec>,
    /// IAM roles the install stack creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Permissions>,
    /// The install's base infrastructure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// How the runner VM is set up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerSettings>,
    /// Default drift schedule for the sandbox and components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSettings>,
}

impl AppSpec {
    /// Declared roles (empty without `permissions`).
    pub fn roles(&self) -> &[RoleSpec] {
        self.permissions
            .as_ref()
            .map_or(&[], |p| p.roles.as_slice())
    }

    /// The declared role whose raw name template is `name`.
    pub fn role(&self, name: &str) -> Option<&RoleSpec> {
        self.roles().iter().find(|r| r.name == name)
    }

    /// The role used for `operation` when nothing earlier in the precedence
    /// chain chose one: the App's role of `operation.default_role_type()`.
    /// Validation allows at most one role of each default type.
    pub fn default_role(&self, operation: Operation) -> Option<&RoleSpec> {
        let type_ = operation.default_role_type();
        self.roles().iter().find(|r| r.type_ == type_)
    }
}

/// Status of an `App`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// `Ready` and others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Content hash of the App with its Components and Actions: the release
    /// installs converge to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The install's base infrastructure (network, cluster, ...).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// How the sandbox is defined.
    #[serde(rename = "type")]
    pub type_: SandboxType,
    /// Module source address or template URL; for `terraform_module`, `files` may
    /// give the module inline instead (exactly one of the two is set).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The module inline (`terraform_module` only): file name (`main.tf`, no
    /// directories) to content. Like every string of the sandbox, a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Variables (module variables or stack parameters), each a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    /// Role per operation (`provision`, `reprovision`, `deprovision`): the raw
    /// name template of one of the App's roles.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operation_roles: BTreeMap<String, String>,
}

/// How a sandbox is defined.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SandboxType {
    /// A Terraform module.
    TerraformModule,
    /// A CloudFormation template.
    Cloudformation,
}

/// How the runner VM is set up.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerSettings {
    /// EC2 instance type of the runner VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Seconds between heartbeats; [`RunnerSettings::DEFAULT_HEARTBEAT_SECONDS`]
    /// when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_seconds: Option<u32>,
    /// Runner version to install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl RunnerSettings {
    /// Heartbeat interval when omitted.
    pub const DEFAULT_HEARTBEAT_SECONDS: u32 = 30;
    /// Accepted heartbeat intervals.
    pub const HEARTBEAT_SECONDS: std::ops::RangeInclusive<u32> = 5..=300;
}

impl Validate for App {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Label);
        errors.extend(self.spec.validate_at("spec"));
        errors
    }
}

impl AppSpec {
    fn validate_at(&self, field: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (i, group) in self.input_groups.iter().enumerate() {
            errors.extend(validate_identifier(
                &format!("{field}.inputGroups[{i}].name"),
                &group.name,
            ));
        }
        errors.extend(duplicates(
            self.input_groups.iter().map(|g| g.name.as_str()),
            |i| format!("{field}.inputGroups[{i}].name"),
        ));
        for (i, input) in self.inputs.iter().enumerate() {
            let at = format!("{field}.inputs[{i}]");
            errors.extend(validate_identifier(&format!("{at}.name"), &input.name));
            if let Some(group) = &input.group
                && !self.input_groups.iter().any(|g| &g.name == group)
            {
                errors.push(FieldError::invalid(
                    format!("{at}.group"),
                    group,
                    "must name an entry of spec.inputGroups",
                ));
            }
            errors.extend(crate::input_value::validate_declaration(input, &at));
        }
        errors.extend(duplicates(
            self.inputs.iter().map(|i| i.name.as_str()),
            |i| format!("{field}.inputs[{i}].name"),
        ));
        for (i, secret) in self.secrets.iter().enumerate() {
            errors.extend(secret.validate_at(&format!("{field}.secrets[{i}]")));
        }
        errors.extend(duplicates(
            self.secrets.iter().map(|s| s.name.as_str()),
            |i| format!("{field}.secrets[{i}].name"),
        ));
        let roles = self.roles();
        for (i, role) in roles.iter().enumerate() {
            errors.extend(role.validate_at(&format!("{field}.permissions.roles[{i}]")));
        }
        errors.extend(duplicates(roles.iter().map(|r| r.name.as_str()), |i| {
            format!("{field}.permissions.roles[{i}].name")
        }));
        for type_ in [
            RoleType::Provision,
            RoleType::Maintenance,
            RoleType::Deprovision,
        ] {
            let mut of_type = roles
                .iter()
                .enumerate()
                .filter(|(_, r)| r.type_ == type_)
                .skip(1);
            if let Some((i, _)) = of_type.next() {
                errors.push(FieldError::duplicate(
                    format!("{field}.permissions.roles[{i}].type"),
                    type_,
                ));
            }
        }
        if let Some(sandbox) = &self.sandbox {
            let at = format!("{field}.sandbox");
            match sandbox.type_ {
                SandboxType::TerraformModule => errors.extend(
                    crate::component::validate_module_source(&at, &sandbox.source, &sandbox.files),
                ),
                SandboxType::Cloudformation => {
                    errors.extend(validate_required(&format!("{at}.source"), &sandbox.source));
                    if !sandbox.files.is_empty() {
                        errors.push(FieldError::forbidden(
                            format!("{at}.files"),
                            "inline files are for terraform_module sandboxes",
                        ));
                    }
                }
            }
            for (op, role) in &sandbox.operation_roles {
                let at = format!("{field}.sandbox.operationRoles.{op}");
                match Operation::parse(op) {
                    None => errors.push(FieldError::not_supported(
                        &at,
                        op,
                        &["provision", "reprovision", "deprovision"],
                    )),
                    Some(parsed) if parsed.entity_kind() != crate::EntityKind::Sandbox => errors
                        .push(FieldError::not_supported(
                            &at,
                            op,
                            &["provision", "reprovision", "deprovision"],
                        )),
                    Some(_) => {}
                }
                if self.role(role).is_none() {
                    errors.push(FieldError::invalid(
                        &at,
                        role,
                        "must be the name of a role in spec.permissions.roles",
                    ));
                }
            }
        }
        if let Some(runner) = &self.runner
            && let Some(s) = runner.heartbeat_seconds
            && !RunnerSettings::HEARTBEAT_SECONDS.contains(&s)
        {
            errors.push(FieldError::invalid(
                format!("{field}.runner.heartbeatSeconds"),
                s,
                "must be between 5 and 300",
            ));
        }
        if let Some(drift) = &self.drift {
            errors.extend(drift.validate_at(&format!("{field}.drift")));
        }
        errors
    }
}

#[cfg(test)]
#[path = "app_tests.rs"]
mod tests;
