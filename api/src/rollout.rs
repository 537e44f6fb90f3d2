//! `Rollout`: moves a release of an App — or one component's version of it — across the
//! installs a selector picks, in waves, by advancing each install's `spec.release` (or
//! its `spec.componentReleases` entry). How waves are formed, when one is done and when
//! the rollout halts is described in the crate's `README.md`.

use crate::validation::{FieldError, NameRule, Validate, validate_name, validate_object_name};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of a `Rollout`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Rollout",
    namespaced,
    status = "RolloutStatus",
    derive = "PartialEq",
    shortname = "ro",
    category = "outpost",
    selectable = ".spec.app",
    selectable = ".status.phase",
    doc = "Moves a release of an App (or one component's version) across selected installs, wave by wave.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Component", type_ = "string", json_path = ".spec.component"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Wave", type_ = "integer", json_path = ".status.currentWave"),
    printcolumn(name = "Waves", type_ = "integer", json_path = ".status.waveCount"),
    printcolumn(name = "Updated", type_ = "integer", json_path = ".status.updated"),
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.total"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Name of the App whose installs move.
    pub app: String,
    /// The release (content hash) to move installs to; the App's release when the
    /// rollout starts if omitted. Only the App's current release can be deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Move only this component of the App to the release (each install's
    /// `spec.componentReleases`), leaving the install's other components, sandbox and
    /// actions where they are; the whole release (`spec.release`) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// Which of the App's installs move (labels); all of them when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Label whose value orders installs into waves (e.g. `ring`): numbers numerically,
    /// then other values as text, installs without it last; ties by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_by: Option<String>,
    /// Installs per wave: a number, or a percentage of the selected installs
    /// (`"25%"`, rounded up); 1 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_size: Option<IntOrString>,
    /// Seconds to wait after a wave completes before the next one starts; 0 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_seconds: Option<u32>,
    /// Failed or policy-denied installs a wave may have before the rollout halts: a
    /// number, or a percentage of the wave (`"20%"`, rounded down); 0 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<IntOrString>,
    /// No new wave starts while true (`outpost rollout pause|resume`); installs
    /// already moved keep converging.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Stops the rollout for good (`outpost rollout abort`): installs not moved yet
    /// stay on their release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aborted: bool,
}

impl RolloutSpec {
    /// Installs per wave when `selected` installs take part (at least 1).
    pub fn wave_size_of(&self, selected: usize) -> usize {
        self.wave_size
            .as_ref()
            .map_or(Ok(1), |v| scaled(v, "spec.waveSize", selected, true))
            .unwrap_or(1)
            .max(1)
    }

    /// Failures a wave of `installs` installs may have before the rollout halts.
    pub fn max_failures_of(&self, installs: usize) -> usize {
        self.max_failures
            .as_ref()
            .map_or(Ok(0), |v| scaled(v, "spec.maxFailures", installs, false))
            .unwrap_or(0)
    }

    /// Seconds between waves, with the default applied.
    pub fn pause_seconds(&self) -> u32 {
        self.pause_seconds.unwrap_or(0)
    }
}

/// `value` (a count, or `N%` of `total`) as a count; a percentage rounds up when
/// `round_up`, else down. Errors name the field.
fn scaled(
    value: &IntOrString,
    field: &str,
    total: usize,
    round_up: bool,
) -> Result<usize, FieldError> {
    match value {
        IntOrString::Int(n) => {
            usize::try_from(*n).map_err(|_| FieldError::invalid(field, n, "must be at least 0"))
        }
        IntOrString::String(text) => {
            let percent = text
                .strip_suffix('%')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= 100)
                .ok_or_else(|| {
                    FieldError::invalid(
                        field,
                        text,
                        "must be a number or a percentage such as \"25%\"",
                    )
                })?;
            let scaled = percent * total;
            Ok(if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            })
        }
    }
}

/// Status of a `Rollout`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// Where the rollout is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RolloutPhase>,
    /// The release installs move to, fixed when the rollout starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The one component moved (`spec.component`), fixed when the rollout starts; the
    /// whole release when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The waves, fixed when the rollout starts, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<WaveStatus>,
    /// The wave in progress or last started (1-based); 0 before the first starts.
    #[serde(default)]
    pub current_wave: u32,
    /// How many waves there are.
    #[serde(default)]
    pub wave_count: u32,
    /// Installs on the release, in every wave.
    #[serde(default)]
    pub updated: u32,
    /// Installs in the rollout.
    #[serde(default)]
    pub total: u32,
    /// Why the rollout stopped by itself; cleared by `outpost rollout resume`, after
    /// which it halts again if the reason still holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt: Option<Halt>,
    /// `Halted` while halted (reason and failing installs in the message).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Phase of a rollout.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum RolloutPhase {
    /// Waiting for the App (or its release) to exist.
    Pending,
    Progressing,
    Paused,
    Halted,
    Aborted,
    Completed,
}

/// Progress of one wave.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    /// The installs of the wave.
    pub installs: Vec<String>,
    /// Installs with every component deployed at the release and the install Active.
    #[serde(default)]
    pub succeeded: u32,
    /// Installs with a Plan of the release that failed.
    #[serde(default)]
    pub failed: u32,
    /// Installs with a Plan of the release that was denied (policy, role, operator).
    #[serde(default)]
    pub denied: u32,
    /// Installs still converging (or not moved yet).
    #[serde(default)]
    pub pending: u32,
    /// The failed and denied installs, each with its Plan and what it said.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    /// Where each install of the wave is, in the order of `installs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<InstallProgress>,
    /// When its installs were moved to the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When every install had succeeded, failed or been denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
}

/// Where one install of a wave is.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstallProgress {
    /// The install.
    pub install: String,
    /// Its state in the rollout.
    pub state: InstallProgressState,
    /// Why it is held, failed or denied (the condition or Plan and its message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The state of one install in a rollout. A wave's `pending` count is its `Pending`,
/// `Moving` and `Held` installs.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum InstallProgressState {
    /// Not moved yet: its wave has not started.
    Pending,
    /// Moved; its Plans of the release are under way.
    Moving,
    /// Moved; a Plan waits for the install's maintenance window or for an approval.
    Held,
    /// On the release: every component (or the rollout's component) deployed at it.
    Done,
    /// A Plan of the release failed.
    Failed,
    /// A Plan of the release was denied (policy, role, operator).
    Denied,
    /// Deleted since the rollout started; it does not hold its wave up.
    Gone,
}

/// Why a rollout halted.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Halt {
    /// The wave that halted it (1-based); for `ReleaseSuperseded`, the last wave
    /// started (0 when none had); for `ComponentNotFound`, the wave that did not start.
    pub wave: u32,
    /// `WaveFailed`, `ReleaseSuperseded` or `ComponentNotFound`.
    pub reason: String,
    /// What happened, for people.
    pub message: String,
    /// The failed or denied installs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installs: Vec<String>,
    /// When.
    pub at: Time,
}

impl Validate for Rollout {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Subdomain);
        let spec = &self.spec;
        errors.extend(validate_name("spec.app", &spec.app, NameRule::Label));
        if let Some(component) = &spec.component {
            errors.extend(validate_name("spec.component", component, NameRule::Label));
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
        if let Some(size) = &spec.wave_size {
            match scaled(size, "spec.waveSize", 100, true) {
                Ok(0) => errors.push(FieldError::invalid(
                    "spec.waveSize",
                    size_text(size),
                    "must be at least 1 (or 1%)",
                )),
                Ok(_) => {}
                Err(err) => errors.push(err),
            }
        }
        if let Some(max) = &spec.max_failures
            && let Err(err) = scaled(max, "spec.maxFailures", 100, false)
        {
            errors.push(err);
        }
        if let Some(label) = &spec.order_by
            && !is_label_key(label)
        {
            errors.push(FieldError::invalid(
                "spec.orderBy",
                label,
                "must be a label key such as ring or example.com/ring",
            ));
        }
        if let Some(selector) = &spec.selector
            && let Err(err) = kube::core::Selector::try_from(selector.clone())
        {
            errors.push(FieldError::invalid("spec.selector", "", err.to_string()));
        }
        errors
    }
}

fn size_text(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// `[prefix/]name`: a DNS subdomain prefix and a name of at most 63 alphanumerics,
/// `-`, `_` or `.`, starting and ending alphanumeric.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.is_none_or(crate::validation::is_dns1123_subdomain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;
    use serde_json::json;

    fn rollout(spec: serde_json::Value) -> Rollout {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "r1"},
            "spec": spec,
        }))
        .expect("test Rollout is well-formed")
    }

    fn errors(r: &Rollout) -> Vec<(String, FieldErrorKind)> {
        r.validate()
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    #[test]
    fn valid_rollout_and_defaults() {
        let r = rollout(json!({"app": "shopfront", "orderBy": "ring", "waveSize": 2,
            "selector": {"matchLabels": {"tier": "paid"}}}));
        assert_eq!(r.validate(), vec![]);
        assert_eq!(r.spec.wave_size_of(6), 2);
        assert_eq!(r.spec.max_failures_of(2), 0);
        assert_eq!(r.spec.pause_seconds(), 0);
        let defaults = rollout(json!({"app": "shopfront"}));
        assert_eq!(defaults.spec.wave_size_of(6), 1);
    }

    #[test]
    fn percentages_scale_to_the_installs() {
        let r = rollout(json!({"app": "a", "waveSize": "25%", "maxFailures": "50%"}));
        assert_eq!(r.validate(), vec![]);
        assert_eq!(r.spec.wave_size_of(6), 2, "25% of 6 rounds up");
        assert_eq!(r.spec.wave_size_of(1), 1);
        assert_eq!(r.spec.max_failures_of(3), 1, "50% of 3 rounds down");
        assert_eq!(r.spec.max_failures_of(1), 0);
    }

    #[test]
    fn bad_fields_are_reported() {
        let r = rollout(
            json!({"app": "Shop", "release": "v2", "component": "Web", "waveSize": "lots",
            "maxFailures": -1, "orderBy": "-ring",
            "selector": {"matchExpressions": [{"key": "ring", "operator": "Near"}]}}),
        );
        assert_eq!(
            errors(&r),
            [
                ("spec.app".into(), FieldErrorKind::Invalid),
                ("spec.component".into(), FieldErrorKind::Invalid),
                ("spec.release".into(), FieldErrorKind::Invalid),
                ("spec.waveSize".into(), FieldErrorKind::Invalid),
                ("spec.maxFailures".into(), FieldErrorKind::Invalid),
                ("spec.orderBy".into(), FieldErrorKind::Invalid),
                ("spec.selector".into(), FieldErrorKind::Invalid),
            ]
        );
        let zero = rollout(json!({"app": "a", "waveSize": 0}));
        assert_eq!(
            errors(&zero),
            [("spec.waveSize".into(), FieldErrorKind::Invalid)]
        );
    }
}
