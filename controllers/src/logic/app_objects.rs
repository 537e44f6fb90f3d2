//! An App together with the Components, Actions and OperationRoles that name
//! it: what validation, the release hash, the dependency graph and the role
//! precedence chain work on.

use outpost_api::{Action, App, Component, OperationRole};

/// An App and the objects of its release. The slices are expected to hold the
/// objects whose `spec.app` is the App's name; `check_app`
/// reports any that do not.
#[derive(Clone, Copy, Debug)]
pub struct AppObjects<'a> {
    /// The App.
    pub app: &'a App,
    /// Its Components.
    pub components: &'a [Component],
    /// Its Actions.
    pub actions: &'a [Action],
    /// Its matrix rules.
    pub operation_roles: &'a [OperationRole],
}

impl<'a> AppObjects<'a> {
    /// The App's name.
    pub fn app_name(&self) -> &'a str {
        name_of(self.app)
    }

    /// The Component called `name`.
    pub fn component(&self, name: &str) -> Option<&'a Component> {
        self.components.iter().find(|c| name_of(*c) == name)
    }

    /// The Action called `name`.
    pub fn action(&self, name: &str) -> Option<&'a Action> {
        self.actions.iter().find(|a| name_of(*a) == name)
    }
}

/// The `metadata.name` of an object, empty when unset (objects read from the
/// API server always have one).
pub fn name_of<K: kube_client::Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or_default()
}
