//! `Action`: scripts an App runs on triggers (manual, cron, around
//! component deploys and sandbox operations).

use crate::role::validate_role_name;
use crate::validation::{
    FieldError, NameRule, Validate, duplicates, validate_name, validate_object_name,
    validate_required,
};
use crate::wire::is_false;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Spec of an `Action`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Action",
    namespaced,
    derive = "PartialEq",
    shortname = "act",
    category = "outpost",
    selectable = ".spec.app",
    doc = "A script an App runs on triggers.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ActionSpec {
    /// Name of the App this action belongs to.
    pub app: String,
    /// What the action does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When the action runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<Trigger>,
    /// What it runs, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
    /// Role name template the action runs with (entity role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Deprecated: use `role` with a `break_glass` role, or a runtime
    /// override. Still honoured, ahead of `role`, in the role precedence chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub break_glass_role: Option<String>,
    /// Seconds before the run is stopped; 600 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Whether steps may reach the network.
    #[serde(default, skip_serializing_if = "is_false")]
    pub network: bool,
}

impl ActionSpec {
    /// Timeout when `timeoutSeconds` is omitted.
    pub const DEFAULT_TIMEOUT_SECONDS: u32 = 600;

    /// The timeout in effect, with the default applied.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.timeout_seconds
                .unwrap_or(Self::DEFAULT_TIMEOUT_SECONDS)
                .into(),
        )
    }
}

/// When an action runs. `type` stays a string on the wire so an unknown
/// value is reported by validation rather than rejected by the decoder; use
/// [`Trigger::kind`] to read it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    /// One of [`TriggerKind::NAMES`].
    #[serde(rename = "type")]
    pub type_: String,
    /// Component for `*-component` triggers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// Cron expression for `cron` triggers: 5 fields (minute hour day month weekday),
    /// or 6 with leading seconds; evaluated in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

impl Trigger {
    /// The parsed `type`, `None` when unknown.
    pub fn kind(&self) -> Option<TriggerKind> {
        TriggerKind::parse(&self.type_)
    }
}

/// Known trigger types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TriggerKind {
    /// Run by an operator (`outpost trigger`).
    Manual,
    /// Run on a schedule.
    Cron,
    /// Before a component is deployed.
    PreDeployComponent,
    /// After a component is deployed.
    PostDeployComponent,
    /// Before a component is torn down.
    PreTeardownComponent,
    /// After a component is torn down.
    PostTeardownComponent,
    /// Before the sandbox is provisioned.
    PreProvision,
    /// After the sandbox is provisioned.
    PostProvision,
    /// Before the sandbox is reprovisioned.
    PreReprovision,
    /// After the sandbox is reprovisioned.
    PostReprovision,
    /// Before the sandbox is deprovisioned.
    PreDeprovision,
    /// After the sandbox is deprovisioned.
    PostDeprovision,
}

impl TriggerKind {
    /// Every known kind, in the order of [`TriggerKind::NAMES`].
    pub const ALL: [TriggerKind; 12] = [
        Self::Manual,
        Self::Cron,
        Self::PreDeployComponent,
        Self::PostDeployComponent,
        Self::PreTeardownComponent,
        Self::PostTeardownComponent,
        Self::PreProvision,
        Self::PostProvision,
        Self::PreReprovision,
        Self::PostReprovision,
        Self::PreDeprovision,
        Self::PostDeprovision,
    ];

    /// Wire names of every known kind.
    pub const NAMES: [&'static str; 12] = [
        "manual",
        "cron",
        "pre-deploy-component",
        "post-deploy-component",
        "pre-teardown-component",
        "post-teardown-component",
        "pre-provision",
        "post-provision",
        "pre-reprovision",
        "post-reprovision",
        "pre-deprovision",
        "post-deprovision",
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        let index = Self::ALL
            .iter()
            .position(|k| *k == self)
            .unwrap_or_default();
        Self::NAMES[index]
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .position(|n| *n == text)
            .map(|i| Self::ALL[i])
    }

    /// Whether the trigger names a component.
    pub fn requires_component(self) -> bool {
        self.as_str().ends_with("-component")
    }

    /// Whether the trigger needs a schedule.
    pub fn requires_schedule(self) -> bool {
        self == Self::Cron
    }
}

/// One step of an action: exactly one of `command` or `script`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Step name, unique within the action.
    pub name: String,
    /// A single command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// A shell script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Environment variables, each a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl Validate for Action {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Label);
        let spec = &self.spec;
        errors.extend(validate_name("spec.app", &spec.app, NameRule::Label));
        for (i, trigger) in spec.triggers.iter().enumerate() {
            errors.extend(validate_trigger(&format!("spec.triggers[{i}]"), trigger));
        }
        let keys: Vec<String> = spec
            .triggers
            .iter()
            .map(|t| serde_json::to_string(t).unwrap_or_default())
            .collect();
        errors.extend(duplicates(keys.iter().map(String::as_str), |i| {
            format!("spec.triggers[{i}]")
        }));
        if spec.steps.is_empty() {
            errors.push(FieldError::required("spec.steps", "at least one step"));
        }
        for (i, step) in spec.steps.iter().enumerate() {
            let at = format!("spec.steps[{i}]");
            errors.extend(validate_name(
                &format!("{at}.name"),
                &step.name,
                NameRule::Label,
            ));
            match (&step.command, &step.script) {
                (None, None) => errors.push(FieldError::required(&at, "one of command or script")),
                (Some(_), Some(_)) => errors.push(FieldError::forbidden(
                    format!("{at}.script"),
                    "set only one of command and script",
                )),
                (Some(text), None) => {
                    errors.extend(validate_required(&format!("{at}.command"), text))
                }
                (None, Some(text)) => {
                    errors.extend(validate_required(&format!("{at}.script"), text))
                }
            }
        }
        errors.extend(duplicates(
            spec.steps.iter().map(|s| s.name.as_str()),
            |i| format!("spec.steps[{i}].name"),
        ));
        if let Some(role) = &spec.role {
            errors.extend(validate_role_name("spec.role", role));
        }
        if let Some(role) = &spec.break_glass_role {
            errors.extend(validate_role_name("spec.breakGlassRole", role));
        }
        if spec.timeout_seconds == Some(0) {
            errors.push(FieldError::invalid(
                "spec.timeoutSeconds",
                0,
                "must be positive",
            ));
        }
        errors
    }
}

fn validate_trigger(field: &str, trigger: &Trigger) -> Vec<FieldError> {
    let Some(kind) = trigger.kind() else {
        return vec![FieldError::not_supported(
            format!("{field}.type"),
            &trigger.type_,
            &TriggerKind::NAMES,
        )];
    };
    let mut errors = Vec::new();
    match (&trigger.component, kind.requires_component()) {
        (None, true) => errors.push(FieldError::required(
            format!("{field}.component"),
            format!("{} triggers name a component", kind.as_str()),
        )),
        (Some(_), false) => errors.push(FieldError::forbidden(
            format!("{field}.component"),
            format!("{} triggers do not name a component", kind.as_str()),
        )),
        (Some(c), true) => errors.extend(validate_name(
            &format!("{field}.component"),
            c,
            NameRule::Label,
        )),
        (None, false) => {}
    }
    match (&trigger.schedule, kind.requires_schedule()) {
        (None, true) => errors.push(FieldError::required(
            format!("{field}.schedule"),
            "cron triggers need a schedule",
        )),
        (Some(_), false) => errors.push(FieldError::forbidden(
            format!("{field}.schedule"),
            "only cron triggers have a schedule",
        )),
        (Some(s), true) if !(5..=6).contains(&s.split_whitespace().count()) => {
            errors.push(FieldError::invalid(
                format!("{field}.schedule"),
                s,
                "must be a cron expression with 5 fields (or 6 with leading seconds)",
            ))
        }
        _ => {}
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;
    use serde_json::json;

    fn migrate() -> Action {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Action",
            "metadata": {"name": "migrate"},
            "spec": {
                "app": "shopfront",
                "triggers": [
                    {"type": "pre-deploy-component", "component": "web"},
                    {"type": "manual"},
                    {"type": "cron", "schedule": "0 3 * * *"}
                ],
                "steps": [{"name": "migrate", "command": "./migrate up"}],
                "role": "{{ install.id }}-maintenance"
            }
        }))
        .expect("test Action is well-formed")
    }

    fn errors(a: &Action) -> Vec<(String, FieldErrorKind)> {
        a.validate()
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    #[test]
    fn valid_action() {
        assert_eq!(migrate().validate(), vec![]);
        assert_eq!(migrate().spec.timeout().as_secs(), 600);
    }

    #[test]
    fn trigger_kinds_round_trip() {
        for kind in TriggerKind::ALL {
            assert_eq!(TriggerKind::parse(kind.as_str()), Some(kind));
        }
        assert!(TriggerKind::PostTeardownComponent.requires_component());
        assert!(!TriggerKind::PostProvision.requires_component());
    }

    #[test]
    fn unknown_trigger_lists_supported_values() {
        let mut a = migrate();
        a.spec.triggers[1].type_ = "nightly".into();
        let all = a.validate();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].kind, FieldErrorKind::NotSupported);
        assert!(all[0].to_string().starts_with(
            r#"spec.triggers[1].type: Unsupported value: "nightly": supported values: "manual", "cron""#
        ), "{}", all[0]);
    }

    #[test]
    fn cron_needs_schedule_and_component_triggers_need_component() {
        let mut a = migrate();
        a.spec.triggers[0].component = None;
        a.spec.triggers[2].schedule = None;
        assert_eq!(
            errors(&a),
            [
                (
                    "spec.triggers[0].component".into(),
                    FieldErrorKind::Required
                ),
                ("spec.triggers[2].schedule".into(), FieldErrorKind::Required),
            ]
        );
    }

    #[test]
    fn misplaced_component_schedule_and_bad_cron() {
        let mut a = migrate();
        a.spec.triggers[1].component = Some("web".into());
        a.spec.triggers[2].schedule = Some("daily".into());
        assert_eq!(
            errors(&a),
            [
                (
                    "spec.triggers[1].component".into(),
                    FieldErrorKind::Forbidden
                ),
                ("spec.triggers[2].schedule".into(), FieldErrorKind::Invalid),
            ]
        );
    }

    #[test]
    fn duplicate_triggers_and_steps() {
        let mut a = migrate();
        a.spec.triggers.push(a.spec.triggers[0].clone());
        a.spec.steps.push(a.spec.steps[0].clone());
        assert_eq!(
            errors(&a),
            [
                ("spec.triggers[3]".into(), FieldErrorKind::Duplicate),
                ("spec.steps[1].name".into(), FieldErrorKind::Duplicate),
            ]
        );
    }

    #[test]
    fn steps_need_exactly_one_of_command_or_script() {
        let mut a = migrate();
        a.spec.steps[0].script = Some("echo".into());
        assert_eq!(
            errors(&a),
            [("spec.steps[0].script".into(), FieldErrorKind::Forbidden)]
        );
        a.spec.steps[0].command = None;
        assert_eq!(errors(&a), []);
        a.spec.steps[0].script = None;
        assert_eq!(
            errors(&a),
            [("spec.steps[0]".into(), FieldErrorKind::Required)]
        );
        a.spec.steps.clear();
        assert_eq!(
            errors(&a),
            [("spec.steps".into(), FieldErrorKind::Required)]
        );
    }

    #[test]
    fn roles_must_be_valid_templates() {
        let mut a = migrate();
        a.spec.break_glass_role = Some("{{ install.id ".into());
        assert_eq!(
            errors(&a),
            [("spec.breakGlassRole".into(), FieldErrorKind::Invalid)]
        );
    }
}
