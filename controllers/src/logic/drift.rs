//! What drift means for an install: each component's drift as its latest DriftReports
//! say, and which remediation applies to a component.

use std::collections::BTreeMap;

use outpost_api::{App, Component, DriftRemediation, DriftReport, DriftState, EntityKind};

/// Each component's drift as the latest reports say: the state and how many fields
/// differ. Components without a report are absent.
pub fn component_drift<'a>(
    reports: impl IntoIterator<Item = &'a DriftReport>,
) -> BTreeMap<String, (DriftState, u32)> {
    reports
        .into_iter()
        .filter(|r| r.spec.entity.kind == EntityKind::Component)
        .map(|r| {
            let state = if r.spec.in_sync {
                DriftState::InSync
            } else {
                DriftState::Drifted
            };
            let fields = u32::try_from(r.spec.diff.len()).unwrap_or(u32::MAX);
            (r.spec.entity.name.clone(), (state, fields))
        })
        .collect()
}

/// The remediation in effect for `component`: its own, else the App's, else `report`.
pub fn remediation(app: &App, component: Option<&Component>) -> DriftRemediation {
    component
        .and_then(|c| c.spec.drift.as_ref())
        .and_then(|d| d.remediation)
        .or_else(|| app.spec.drift.as_ref().and_then(|d| d.remediation))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(component: &str, in_sync: bool, fields: usize) -> DriftReport {
        let diff: Vec<_> = (0..fields)
            .map(|i| json!({"path": format!("Deployment/web.spec.f{i}"), "op": "changed", "desired": 1, "live": 2}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "DriftReport",
            "metadata": {"name": format!("acme-{component}")},
            "spec": {"install": "acme", "entity": {"kind": "component", "name": component},
                     "inSync": in_sync, "observedAt": "2025-01-15T10:00:00Z", "diff": diff},
        }))
        .expect("a DriftReport")
    }

    #[test]
    fn component_drift_counts_fields_per_component() {
        let drift = component_drift(&[report("web", false, 2), report("db", true, 0)]);
        assert_eq!(drift["web"], (DriftState::Drifted, 2));
        assert_eq!(drift["db"], (DriftState::InSync, 0));
        assert_eq!(drift.len(), 2);
    }

    #[test]
    fn remediation_is_the_components_then_the_apps_then_report() {
        let app = |drift: serde_json::Value| -> App {
            serde_json::from_value(json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "App", "metadata": {"name": "shop"},
                "spec": {"sandbox": {"type": "terraform_module", "source": "/m"}, "drift": drift},
            }))
            .expect("an App")
        };
        let component = |drift: serde_json::Value| -> Component {
            serde_json::from_value(json!({
                "apiVersion": "outpost.dev/v1alpha1", "kind": "Component", "metadata": {"name": "web"},
                "spec": {"app": "shop", "type": "kubernetes_manifest",
                         "manifest": {"content": ""}, "drift": drift},
            }))
            .expect("a Component")
        };
        let auto = json!({"remediation": "auto"});
        let report_ = json!({"remediation": "report"});
        assert_eq!(remediation(&app(json!({})), None), DriftRemediation::Report);
        assert_eq!(
            remediation(&app(auto.clone()), None),
            DriftRemediation::Auto
        );
        assert_eq!(
            remediation(&app(auto.clone()), Some(&component(report_))),
            DriftRemediation::Report
        );
        assert_eq!(
            remediation(&app(json!({})), Some(&component(auto))),
            DriftRemediation::Auto
        );
    }
}
