//! Condition types used in the status of Outpost kinds. Conditions themselves
//! are Kubernetes' `meta/v1` [`Condition`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// `Ready`: the object has been reconciled and is usable.
pub const READY: &str = "Ready";
/// `Compiled`: a Policy's Rego module parsed and compiled.
pub const COMPILED: &str = "Compiled";
/// `Connected`: a Runner holds a live session with the control plane.
pub const CONNECTED: &str = "Connected";
/// `Approved`: a Plan is approved for its content hash.
pub const APPROVED: &str = "Approved";
/// `Held` (Install): a Plan waits for the install's next maintenance window.
pub const HELD: &str = "Held";
/// `ReleasePinned` (Install): the install is pinned (`spec.release`) to a release other
/// than the App's current one, so nothing new is planned for it.
pub const RELEASE_PINNED: &str = "ReleasePinned";
/// `ComponentsHeld` (Install): some components of a pinned install move to the App's
/// current release (`spec.componentReleases`) while the others are held at the pinned one.
pub const COMPONENTS_HELD: &str = "ComponentsHeld";
/// `InputsInvalid` (Install): the install's inputs no longer hold against its App's
/// declarations (the App changed them after the Install was written).
pub const INPUTS_INVALID: &str = "InputsInvalid";
/// `Halted` (Rollout): the rollout halted by itself (reason and failing installs in the
/// message).
pub const HALTED: &str = "Halted";

/// The condition of `type_` in `conditions`, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}
