//! The CustomResourceDefinitions of every Outpost kind.

use crate::{
    Action, App, AuditEvent, Component, DriftReport, Install, InstallStack, OperationRole, Plan,
    Policy, Rollout, Runner,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every Outpost kind.
pub const GROUP: &str = "outpost.dev";
/// API version of every Outpost kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Outpost object: [`GROUP`]`/`[`VERSION`].
pub const API_VERSION: &str = "outpost.dev/v1alpha1";

/// The definitions of every Outpost kind, vendor-declared kinds first.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        App::crd(),
        Component::crd(),
        Action::crd(),
        OperationRole::crd(),
        Policy::crd(),
        Install::crd(),
        InstallStack::crd(),
        Runner::crd(),
        Plan::crd(),
        DriftReport::crd(),
        AuditEvent::crd(),
        Rollout::crd(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_is_group_and_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }
}
