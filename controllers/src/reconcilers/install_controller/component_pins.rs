//! Components moved ahead of an install's pinned release (`spec.componentReleases`): a
//! separate part of the Install controller's deploy step, applied to the steps it planned
//! from the App's current objects.
//!
//! An install pinned (`spec.release`) to a release other than the App's current one is
//! held whole (`deploy::hold_on_release`) — unless some of its components are pinned
//! to the current release in `spec.componentReleases` (a component Rollout sets them).
//! Then only those components are planned, rendered from the current objects as usual,
//! with their pre/post-deploy actions; everything else is held where the pinned release
//! left it:
//!
//! * the sandbox stands as its latest Plan left it (an install never provisioned has no
//!   such Plan, and is held whole instead);
//! * every other component gets no Plan; a moved component that depends on one waits
//!   for that component's latest succeeded deploy Plan (and reads its outputs, as
//!   always);
//! * no Plan outside the deploy steps is made: no cron or manually triggered action (the
//!   App's actions are of the current release), no requested deploy of a held
//!   component; a requested deploy of a moved component is honoured;
//! * the status keeps each held component's entry as it was (a moved component's too
//!   until its Plan of the current release exists), the phase reflects the held ones
//!   (`Degraded` if one failed, `Deploying` if one is not deployed), and the condition
//!   `ComponentsHeld` names what moves and what is held.
//!
//! Pins of components the App no longer has, or of another release, are ignored. When
//! `spec.release` is the App's current release, or absent, every component follows it
//! and the pins have no effect.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_client::ResourceExt as _;
use outpost_api::{
    Action as AppAction, Component, ComponentPhase, ComponentState, EntityKind, Install,
    InstallPhase, Operation, Plan, PlanPhase,
};

use super::steps::Step;

/// Condition: some components of a pinned install move to the App's current release
/// (`spec.componentReleases`) while the others are held at the pinned one.
pub use outpost_api::condition::COMPONENTS_HELD;

/// What of a pinned install moves to the App's current release.
#[derive(Debug)]
pub(super) struct ComponentPins {
    /// The install's release (`spec.release`).
    pinned: String,
    /// The App's current release.
    current: String,
    /// The components pinned to the current release, which are planned.
    moved: BTreeSet<String>,
    /// The App's other components, which are held.
    held: Vec<String>,
    /// The sandbox's latest Plan, which stands for the sandbox's step.
    sandbox: String,
}

impl ComponentPins {
    /// The pins in effect for `install` when the App's objects (`components`) are at
    /// release `current`: `None` when nothing is moved ahead of `spec.release` (not
    /// pinned, pinned to the current release, no pin of a current component to it,
    /// while `deleting`), or when the sandbox was never planned.
    pub(super) fn of(
        install: &Install,
        current: &str,
        components: &[Component],
        plans: &BTreeMap<String, Arc<Plan>>,
        deleting: bool,
    ) -> Option<Self> {
        let pinned = install.spec.release.as_deref()?;
        if deleting || pinned == current {
            return None;
        }
        let (moved, held): (Vec<String>, Vec<String>) =
            components.iter().map(|c| c.name_any()).partition(|c| {
                install.spec.component_releases.get(c).map(String::as_str) == Some(current)
            });
        if moved.is_empty() {
            return None;
        }
        let sandbox = latest(plans.values().map(Arc::as_ref).filter(|p| {
            p.spec.entity.kind == EntityKind::Sandbox
                && matches!(
                    p.spec.operation,
                    Operation::Provision | Operation::Reprovision
                )
        }))?;
        Some(ComponentPins {
            pinned: pinned.to_owned(),
            current: current.to_owned(),
            moved: moved.into_iter().collect(),
            held,
            sandbox: sandbox.name_any(),
        })
    }

    /// `steps` (deploy's, with their hooks) reduced to the moved components' and
    /// their hooks', plus the sandbox's latest Plan standing for the sandbox's step;
    /// what waited for a held step waits for its stand-in.
    fn select(&self, steps: Vec<Step>, plans: &BTreeMap<String, Arc<Plan>>) -> Vec<Step> {
        let owners: Vec<(String, bool)> = steps
            .iter()
            .filter(|s| s.operation != Operation::Trigger)
            .map(|s| (s.name.clone(), self.moves(s)))
            .collect();
        // A hook is named `<step>-pre-<action>` or `<step>-post-<action>` (with_triggers).
        let moves = |step: &Step| {
            if step.operation != Operation::Trigger {
                return self.moves(step);
            }
            owners.iter().any(|(owner, moves)| {
                *moves
                    && [format!("{owner}-pre-"), format!("{owner}-post-")]
                        .iter()
                        .any(|prefix| step.name.starts_with(prefix.as_str()))
            })
        };
        let mut stand_ins: BTreeMap<String, String> = BTreeMap::new();
        for step in steps.iter().filter(|s| s.operation != Operation::Trigger) {
            let stand_in = match step.entity.kind {
                EntityKind::Sandbox => Some(self.sandbox.clone()),
                _ if self.moves(step) => None,
                _ => latest(plans.values().map(Arc::as_ref).filter(|p| {
                    p.spec.entity == step.entity
                        && p.spec.operation == Operation::Deploy
                        && p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Succeeded)
                }))
                .map(|p| p.name_any()),
            };
            if let Some(stand_in) = stand_in {
                stand_ins.insert(step.name.clone(), stand_in);
            }
        }
        let mut kept = Vec::new();
        for mut step in steps {
            if step.entity.kind == EntityKind::Sandbox && step.operation != Operation::Trigger {
                // Its Plan exists, so it is never created again: it only says where the
                // sandbox is (and keeps the sandbox first, as deploy expects).
                step.name = self.sandbox.clone();
                step.waits_for.clear();
            } else if !moves(&step) {
                continue;
            }
            for wait in &mut step.waits_for {
                if let Some(stand_in) = stand_ins.get(wait) {
                    wait.clone_from(stand_in);
                }
            }
            kept.push(step);
        }
        kept
    }

    /// Whether `step` is a moved component's (a hook is not).
    fn moves(&self, step: &Step) -> bool {
        step.operation != Operation::Trigger
            && step.entity.kind == EntityKind::Component
            && self.moved.contains(&step.entity.name)
    }

    /// The install's component states and phase: held components keep the entry the
    /// status had, and so does a moved one until its Plan of the current release
    /// exists; the phase is `Degraded` if a held component failed, `Deploying` if one is
    /// not deployed (when the moved ones are done).
    fn hold_states(
        &self,
        phase: InstallPhase,
        computed: Vec<ComponentState>,
        install: &Install,
    ) -> (InstallPhase, Vec<ComponentState>) {
        let previous = install
            .status
            .as_ref()
            .map(|s| s.components.clone())
            .unwrap_or_default();
        let planned: BTreeMap<String, ComponentState> = computed
            .into_iter()
            .filter(|c| self.moved.contains(&c.name) && c.last_plan.is_some())
            .map(|c| (c.name.clone(), c))
            .collect();
        let mut states: Vec<ComponentState> = previous
            .into_iter()
            .map(|before| planned.get(&before.name).cloned().unwrap_or(before))
            .collect();
        for (name, state) in &planned {
            if !states.iter().any(|s| s.name == *name) {
                states.push(state.clone());
            }
        }
        let held = states.iter().filter(|s| !self.moved.contains(&s.name));
        let phase = match phase {
            InstallPhase::Active | InstallPhase::Deploying => {
                let held: Vec<Option<ComponentPhase>> = held.map(|s| s.phase).collect();
                if held.contains(&Some(ComponentPhase::Failed)) {
                    InstallPhase::Degraded
                } else if held.iter().all(|p| *p == Some(ComponentPhase::Deployed)) {
                    phase
                } else {
                    InstallPhase::Deploying
                }
            }
            other => other,
        };
        (phase, states)
    }

    /// `ComponentsHeld`: what moves to the current release and what stays.
    fn condition(&self, install: &Install) -> Condition {
        let moved: Vec<&str> = self.moved.iter().map(String::as_str).collect();
        let held: Vec<&str> = std::iter::once("sandbox")
            .chain(self.held.iter().map(String::as_str))
            .collect();
        Condition {
            type_: COMPONENTS_HELD.into(),
            status: "True".into(),
            reason: "ReleaseNotCurrent".into(),
            message: format!(
                "pinned to release {}; the App is at {}: {} planned at the App's release (spec.componentReleases), {} held at the pinned one",
                self.pinned,
                self.current,
                moved.join(", "),
                held.join(", ")
            ),
            observed_generation: install.metadata.generation,
            last_transition_time: Time(jiff::Timestamp::now()),
        }
    }
}

/// Deploy's steps with the pins applied ([`ComponentPins::select`]); unchanged
/// without pins.
pub(super) fn select(
    pins: Option<&ComponentPins>,
    steps: Vec<Step>,
    plans: &BTreeMap<String, Arc<Plan>>,
) -> Vec<Step> {
    match pins {
        Some(pins) => pins.select(steps, plans),
        None => steps,
    }
}

/// The actions deploy may plan outside the steps (cron and requested triggers):
/// none while components are pinned, as they are the App's current release's.
pub(super) fn actions(pins: Option<&ComponentPins>, actions: Vec<AppAction>) -> Vec<AppAction> {
    if pins.is_some() { Vec::new() } else { actions }
}

/// The phase and component states with the pins applied
/// ([`ComponentPins::hold_states`]); unchanged without pins.
pub(super) fn hold_states(
    pins: Option<&ComponentPins>,
    phase: InstallPhase,
    states: Vec<ComponentState>,
    install: &Install,
) -> (InstallPhase, Vec<ComponentState>) {
    match pins {
        Some(pins) => pins.hold_states(phase, states, install),
        None => (phase, states),
    }
}

/// The `ComponentsHeld` condition while pins are in effect.
pub(super) fn condition(pins: Option<&ComponentPins>, install: &Install) -> Option<Condition> {
    pins.map(|pins| pins.condition(install))
}

/// The newest of `plans` (by creation time, then name).
fn latest<'a>(plans: impl Iterator<Item = &'a Plan>) -> Option<&'a Plan> {
    plans.max_by(|a, b| {
        let created = |p: &Plan| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    })
}

#[cfg(test)]
#[path = "component_pins_tests.rs"]
mod tests;
