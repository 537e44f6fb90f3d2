//! `Install`: one customer deployment of an App.

use crate::drift::DriftState;
use crate::validation::{
    FieldError, NameRule, Validate, duplicates, validate_identifier, validate_name,
    validate_object_name,
};
use crate::wire::any_value_map;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Spec of an `Install`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Install",
    namespaced,
    status = "InstallStatus",
    derive = "PartialEq",
    shortname = "inst",
    category = "outpost",
    selectable = ".spec.app",
    selectable = ".status.phase",
    doc = "One customer deployment of an App.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Runner",
        type_ = "boolean",
        json_path = ".status.runner.connected"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InstallSpec {
    /// Name of the App installed.
    pub app: String,
    /// Values of the App's inputs, by input name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "any_value_map")]
    pub inputs: BTreeMap<String, Value>,
    /// The customer's cloud account.
    pub cloud: CloudAccount,
    /// When maintenance Plans may run; any time when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintenance_windows: Vec<MaintenanceWindow>,
    /// Whether Plans need approval; `prompt` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_mode: Option<ApprovalMode>,
    /// App release (content hash) to stay on; the App's latest when omitted. While the
    /// App's objects are at another release nothing is planned for the install
    /// (condition `ReleasePinned`); a `Rollout` moves it wave by wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Components moved ahead of `spec.release`, by component name: the release
    /// (content hash) each is on. While `spec.release` is set and differs from the App's
    /// current release, the components pinned here to the current release are planned
    /// and everything else is held (condition `ComponentsHeld`); otherwise this is
    /// ignored. A component `Rollout` sets it wave by wave; a whole-release one clears it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub component_releases: BTreeMap<String, String>,
    /// Operator requests for one-off Plans (`outpost deploy`, `outpost trigger`): the
    /// Install controller renders the entity's desired state and makes the Plan
    /// `<install>-<id>`, once per id. Honoured outside maintenance windows too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<PlanRequest>,
}

/// A request for a one-off Plan, made by `outpost deploy` or `outpost trigger`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanRequest {
    /// Unique among the Install's requests; the Plan is named `<install>-<id>`.
    pub id: String,
    /// `deploy` (a component) or `trigger` (an action).
    pub operation: crate::Operation,
    /// The component or action.
    pub name: String,
    /// Runtime role override: step 1 of the role precedence chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_override: Option<String>,
    /// Who asked, recorded in the Plan's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

impl PlanRequest {
    /// A request with an id unique to this moment: `<operation>-<entity>-<millis>` (the
    /// entity cut to 36 characters, so the Plan's name stays a valid object name).
    pub fn new(
        operation: crate::Operation,
        name: &str,
        role_override: Option<String>,
        requested_by: Option<String>,
    ) -> Self {
        let entity: String = name.chars().take(36).collect();
        let entity = entity.trim_end_matches('-');
        PlanRequest {
            id: format!(
                "{}-{entity}-{}",
                operation.as_str(),
                k8s_openapi::jiff::Timestamp::now().as_millisecond()
            ),
            operation,
            name: name.to_owned(),
            role_override,
            requested_by,
        }
    }
}

impl InstallSpec {
    /// The approval mode in effect, with the default applied.
    pub fn approval_mode(&self) -> ApprovalMode {
        self.approval_mode.unwrap_or_default()
    }
}

/// A customer's cloud account.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CloudAccount {
    /// Cloud provider.
    pub provider: CloudProvider,
    /// Account id (12 digits on AWS).
    pub account_id: String,
    /// Region the install lives in.
    pub region: String,
}

/// Supported cloud providers.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CloudProvider {
    /// Amazon Web Services.
    Aws,
}

/// A weekly window in which maintenance Plans may run.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Days the window opens on.
    pub days: Vec<Weekday>,
    /// Opening time, `HH:MM` (24h).
    pub start: String,
    /// Length of the window in minutes (1–1440).
    pub duration_minutes: u32,
    /// IANA time zone of `start`; UTC when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// A day of the week.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Weekday {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

/// Whether Plans need a human approval.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Every Plan that passes policy is approved automatically.
    ApproveAll,
    /// Every Plan waits for an approval bound to its content hash.
    #[default]
    Prompt,
}

/// Status of an `Install`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstallStatus {
    /// Where the install is in its lifecycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<InstallPhase>,
    /// Health of the install's runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerHealth>,
    /// State of each component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentState>,
    /// Name of the latest Plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan: Option<String>,
    /// `Ready` and others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// SHA-256 (hex) of the install's current runner token. Only the hash is stored:
    /// the token itself is shown once, when minted (`outpost token NS/INSTALL`); minting
    /// again replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_token_hash: Option<String>,
}

/// Lifecycle phase of an install.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum InstallPhase {
    Pending,
    Provisioning,
    Deploying,
    Active,
    Degraded,
    Deprovisioning,
    Failed,
}

/// Health of an install's runner as seen by the control plane.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerHealth {
    /// Whether the runner holds a live session.
    pub connected: bool,
    /// Time of the last heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
    /// Version the runner reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// State of one component of an install.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentState {
    /// Component name.
    pub name: String,
    /// Release deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Deployment phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ComponentPhase>,
    /// Name of the latest Plan for the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan: Option<String>,
    /// Result of the latest drift check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftState>,
    /// How many fields differ from what was applied, per the latest DriftReport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted_fields: Option<u32>,
}

/// Deployment phase of a component in an install.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum ComponentPhase {
    /// No Plan deploys its current state yet (its dependencies are not deployed).
    Pending,
    /// Its Plan exists and has not finished (being gated, awaiting approval, running).
    Deploying,
    /// Its Plan succeeded.
    Deployed,
    /// Its teardown Plan is under way.
    TearingDown,
    /// Its teardown Plan succeeded.
    TornDown,
    /// Its Plan failed or was denied.
    Failed,
}

impl Validate for Install {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Label);
        let spec = &self.spec;
        errors.extend(validate_name("spec.app", &spec.app, NameRule::Label));
        for name in spec.inputs.keys() {
            errors.extend(validate_identifier(&format!("spec.inputs.{name}"), name));
        }
        let cloud = &spec.cloud;
        if cloud.account_id.len() != 12 || !cloud.account_id.bytes().all(|b| b.is_ascii_digit()) {
            errors.push(FieldError::invalid(
                "spec.cloud.accountId",
                &cloud.account_id,
                "must be a 12-digit AWS account id",
            ));
        }
        if !is_aws_region(&cloud.region) {
            errors.push(FieldError::invalid(
                "spec.cloud.region",
                &cloud.region,
                "must be an AWS region such as eu-west-1",
            ));
        }
        for (i, window) in spec.maintenance_windows.iter().enumerate() {
            let at = format!("spec.maintenanceWindows[{i}]");
            if window.days.is_empty() {
                errors.push(FieldError::required(
                    format!("{at}.days"),
                    "at least one day",
                ));
            }
            let days: Vec<String> = window.days.iter().map(|d| format!("{d:?}")).collect();
            errors.extend(duplicates(days.iter().map(String::as_str), |d| {
                format!("{at}.days[{d}]")
            }));
            if !is_hh_mm(&window.start) {
                errors.push(FieldError::invalid(
                    format!("{at}.start"),
                    &window.start,
                    "must be HH:MM (24h)",
                ));
            }
            if !(1..=1440).contains(&window.duration_minutes) {
                errors.push(FieldError::invalid(
                    format!("{at}.durationMinutes"),
                    window.duration_minutes,
                    "must be between 1 and 1440",
                ));
            }
        }
        if let Some(release) = &spec.release
            && !crate::is_content_hash(release)
        {
            errors.push(FieldError::invalid(
                "spec.release",
                release,
                "must be sha256:<64 hex digits>",
            ));
        }
        for (component, release) in &spec.component_releases {
            let at = format!("spec.componentReleases.{component}");
            errors.extend(validate_name(&at, component, NameRule::Label));
            if !crate::is_content_hash(release) {
                errors.push(FieldError::invalid(
                    at,
                    release,
                    "must be sha256:<64 hex digits>",
                ));
            }
        }
        let ids = spec.requests.iter().map(|r| r.id.as_str());
        errors.extend(duplicates(ids, |i| format!("spec.requests[{i}].id")));
        for (i, request) in spec.requests.iter().enumerate() {
            let at = format!("spec.requests[{i}]");
            errors.extend(validate_name(
                &format!("{at}.id"),
                &request.id,
                NameRule::Label,
            ));
            if !matches!(
                request.operation,
                crate::Operation::Deploy | crate::Operation::Trigger
            ) {
                errors.push(FieldError::not_supported(
                    format!("{at}.operation"),
                    request.operation.as_str(),
                    &["deploy", "trigger"],
                ));
            }
            errors.extend(validate_name(
                &format!("{at}.name"),
                &request.name,
                NameRule::Label,
            ));
            if let Some(role) = &request.role_override {
                errors.extend(crate::role::validate_role_name(
                    &format!("{at}.roleOverride"),
                    role,
                ));
            }
        }
        errors
    }
}

fn is_hh_mm(text: &str) -> bool {
    let Some((h, m)) = text.split_once(':') else {
        return false;
    };
    h.len() == 2
        && m.len() == 2
        && h.parse::<u8>().is_ok_and(|h| h < 24)
        && m.parse::<u8>().is_ok_and(|m| m < 60)
}

/// `xx-name-N` or `xx-gov-name-N`, e.g. `eu-west-1`, `us-gov-west-1`.
fn is_aws_region(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let lower = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase());
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        [geo, name, n] => geo.len() == 2 && lower(geo) && lower(name) && number(n),
        [geo, gov, name, n] => {
            geo.len() == 2 && lower(geo) && lower(gov) && lower(name) && number(n)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;
    use serde_json::json;

    fn install() -> Install {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Install",
            "metadata": {"name": "acme"},
            "spec": {
                "app": "shopfront",
                "inputs": {"domain": "shop.acme.example", "replicas": 3},
                "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"},
                "approvalMode": "prompt",
                "maintenanceWindows": [
                    {"days": ["Saturday"], "start": "02:00", "durationMinutes": 120}
                ]
            }
        }))
        .expect("test Install is well-formed")
    }

    fn errors(i: &Install) -> Vec<(String, FieldErrorKind)> {
        i.validate()
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    #[test]
    fn valid_install() {
        assert_eq!(install().validate(), vec![]);
        assert!(is_aws_region("us-gov-west-1"));
    }

    #[test]
    fn cloud_account_is_checked() {
        let mut i = install();
        i.spec.cloud.account_id = "1234".into();
        i.spec.cloud.region = "Europe".into();
        assert_eq!(
            errors(&i),
            [
                ("spec.cloud.accountId".into(), FieldErrorKind::Invalid),
                ("spec.cloud.region".into(), FieldErrorKind::Invalid),
            ]
        );
    }

    #[test]
    fn maintenance_windows_are_checked() {
        let mut i = install();
        let w = &mut i.spec.maintenance_windows[0];
        w.days.push(Weekday::Saturday);
        w.start = "24:00".into();
        w.duration_minutes = 0;
        assert_eq!(
            errors(&i),
            [
                (
                    "spec.maintenanceWindows[0].days[1]".into(),
                    FieldErrorKind::Duplicate
                ),
                (
                    "spec.maintenanceWindows[0].start".into(),
                    FieldErrorKind::Invalid
                ),
                (
                    "spec.maintenanceWindows[0].durationMinutes".into(),
                    FieldErrorKind::Invalid
                ),
            ]
        );
    }

    #[test]
    fn input_keys_and_release_are_checked() {
        let mut i = install();
        i.spec.inputs.insert("Bad-Key".into(), json!(1));
        i.spec.release = Some("v1".into());
        let hash = format!("sha256:{}", "a".repeat(64));
        i.spec.component_releases =
            BTreeMap::from([("Web".into(), hash.clone()), ("db".into(), "v2".into())]);
        i.spec.requests = vec![PlanRequest {
            id: "Bad".into(),
            operation: crate::Operation::Teardown,
            name: "web".into(),
            role_override: None,
            requested_by: None,
        }];
        assert_eq!(
            errors(&i),
            [
                ("spec.inputs.Bad-Key".into(), FieldErrorKind::Invalid),
                ("spec.release".into(), FieldErrorKind::Invalid),
                ("spec.componentReleases.Web".into(), FieldErrorKind::Invalid),
                ("spec.componentReleases.db".into(), FieldErrorKind::Invalid),
                ("spec.requests[0].id".into(), FieldErrorKind::Invalid),
                (
                    "spec.requests[0].operation".into(),
                    FieldErrorKind::NotSupported
                ),
            ]
        );
        assert_eq!(i.spec.approval_mode(), ApprovalMode::Prompt);
    }
}
