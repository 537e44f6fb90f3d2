//! Drift detection settings and states.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How often the runner compares live state with desired state, and what it
/// does about a difference.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftSettings {
    /// Seconds between checks; [`DriftSettings::DEFAULT_INTERVAL_SECONDS`]
    /// when omitted, at least [`DriftSettings::MIN_INTERVAL_SECONDS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<u32>,
    /// What to do on drift; `report` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<DriftRemediation>,
}

impl DriftSettings {
    /// Interval used when `intervalSeconds` is omitted.
    pub const DEFAULT_INTERVAL_SECONDS: u32 = 300;
    /// Smallest accepted interval.
    pub const MIN_INTERVAL_SECONDS: u32 = 30;

    /// The interval in effect, with the default applied.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(
            self.interval_seconds
                .unwrap_or(Self::DEFAULT_INTERVAL_SECONDS)
                .into(),
        )
    }

    /// The remediation in effect, with the default applied.
    pub fn remediation(&self) -> DriftRemediation {
        self.remediation.unwrap_or_default()
    }

    /// Field errors of these settings, with paths under `field`.
    pub fn validate_at(&self, field: &str) -> Vec<crate::FieldError> {
        match self.interval_seconds {
            Some(s) if s < Self::MIN_INTERVAL_SECONDS => vec![crate::FieldError::invalid(
                format!("{field}.intervalSeconds"),
                s,
                format!("must be at least {}", Self::MIN_INTERVAL_SECONDS),
            )],
            _ => Vec::new(),
        }
    }
}

/// What the runner does when it finds drift.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DriftRemediation {
    /// Record a DriftReport and leave the live state alone.
    #[default]
    Report,
    /// Record a DriftReport and create a Plan that re-applies desired state.
    Auto,
}

/// Whether an entity's live state matches its desired state.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum DriftState {
    /// Live state matches.
    InSync,
    /// Live state differs; see the latest DriftReport.
    Drifted,
    /// Not checked yet, or the check failed.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_when_omitted() {
        let d = DriftSettings::default();
        assert_eq!(d.interval(), Duration::from_secs(300));
        assert_eq!(d.remediation(), DriftRemediation::Report);
        assert!(d.validate_at("spec.drift").is_empty());
    }

    #[test]
    fn rejects_too_short_interval() {
        let d = DriftSettings {
            interval_seconds: Some(5),
            remediation: None,
        };
        let errors = d.validate_at("spec.drift");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.drift.intervalSeconds");
    }
}
