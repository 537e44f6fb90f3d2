//! The Rollout controller's decisions, without I/O: how selected installs form waves,
//! what each install of a started wave has come to, and what the rollout does next.

use std::time::Duration;

use kube_client::ResourceExt as _;
use outpost_api::{
    ComponentPhase, Install, InstallPhase, InstallProgress, InstallProgressState, Plan, PlanPhase,
    RolloutSpec, WaveStatus,
};

use outpost_api::condition::{HELD, RELEASE_PINNED};

/// The installs' names in waves of `size`, ordered by the value of label `order_by`
/// (numbers numerically, then other values as text, installs without the label last),
/// ties by name.
pub fn form_waves(installs: &[&Install], order_by: Option<&str>, size: usize) -> Vec<Vec<String>> {
    let mut keyed: Vec<(OrderKey, String)> = installs
        .iter()
        .map(|install| {
            let value = order_by.and_then(|label| install.labels().get(label).cloned());
            (OrderKey::of(value), install.name_any())
        })
        .collect();
    keyed.sort();
    keyed
        .into_iter()
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .chunks(size.max(1))
        .map(<[String]>::to_vec)
        .collect()
}

/// Where an install sorts by its order label's value.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OrderKey {
    Number(i64),
    Text(String),
    Missing,
}

impl OrderKey {
    fn of(value: Option<String>) -> Self {
        match value {
            None => Self::Missing,
            Some(text) => text.parse().map_or(Self::Text(text), Self::Number),
        }
    }
}

/// What one install of a wave has come to, relative to the rollout's release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not moved to the release yet (`spec.release`, or the component's entry in
    /// `spec.componentReleases`, is another).
    Waiting,
    /// Moved; its Plans of the release are still under way.
    Pending,
    /// Moved; a Plan of the release awaits approval, or one waits for the install's
    /// maintenance window (condition `Held`): why.
    Held(String),
    /// Active, every component deployed at the release; for a component rollout, that
    /// component deployed at the release.
    Succeeded,
    /// A Plan of the release failed: the Plan and its message.
    Failed(String),
    /// A Plan of the release was denied (policy, role, operator).
    Denied(String),
    /// The install no longer exists; it does not hold its wave up.
    Gone,
}

/// The outcome of `install` (`None`: deleted) given its Plans, for `release` — of the
/// whole release, or of `component` only.
pub fn outcome(
    install: Option<&Install>,
    plans: &[Plan],
    release: &str,
    component: Option<&str>,
) -> Outcome {
    let Some(install) = install else {
        return Outcome::Gone;
    };
    let on_whole_release = install.spec.release.as_deref() == Some(release);
    let moved = match component {
        None => on_whole_release,
        Some(c) => {
            on_whole_release
                || install.spec.component_releases.get(c).map(String::as_str) == Some(release)
        }
    };
    if !moved {
        return Outcome::Waiting;
    }
    let status = install.status.clone().unwrap_or_default();
    let observed = status.observed_generation >= install.metadata.generation;
    let done = match component {
        None => {
            let on_release = status
                .components
                .iter()
                .all(|c| c.release.as_deref() == Some(release));
            let pinned_elsewhere = status.conditions.iter().any(|c| c.type_ == RELEASE_PINNED);
            status.phase == Some(InstallPhase::Active) && on_release && !pinned_elsewhere
        }
        Some(c) => status.components.iter().any(|s| {
            s.name == c
                && s.phase == Some(ComponentPhase::Deployed)
                && s.release.as_deref() == Some(release)
        }),
    };
    if observed && done {
        return Outcome::Succeeded;
    }
    let of_release = |phase: PlanPhase| {
        plans.iter().find(|p| {
            p.spec.release.as_deref() == Some(release)
                && p.status.as_ref().and_then(|s| s.phase) == Some(phase)
        })
    };
    let describe = |plan: &Plan| {
        let message = plan
            .status
            .as_ref()
            .and_then(|s| s.message.clone())
            .unwrap_or_default();
        format!(
            "{}: plan {}: {message}",
            install.name_any(),
            plan.name_any()
        )
    };
    if let Some(plan) = of_release(PlanPhase::Failed) {
        return Outcome::Failed(describe(plan));
    }
    if let Some(plan) = of_release(PlanPhase::Denied) {
        return Outcome::Denied(describe(plan));
    }
    if let Some(plan) = of_release(PlanPhase::AwaitingApproval) {
        return Outcome::Held(format!(
            "{}: plan {} awaits approval",
            install.name_any(),
            plan.name_any()
        ));
    }
    if let Some(held) = status.conditions.iter().find(|c| c.type_ == HELD) {
        return Outcome::Held(format!("{}: {}", install.name_any(), held.message));
    }
    Outcome::Pending
}

impl Outcome {
    /// Whether the Plans must be looked at to know more (the install is moved and not
    /// done; held only by what its status says).
    pub fn needs_plans(&self) -> bool {
        matches!(self, Outcome::Pending | Outcome::Held(_))
    }

    /// The install's progress as the Rollout's status shows it (the message without
    /// the install's name, which the failures start with).
    pub fn progress(&self, install: &str) -> InstallProgress {
        let (state, message) = match self {
            Outcome::Waiting => (InstallProgressState::Pending, None),
            Outcome::Pending => (InstallProgressState::Moving, None),
            Outcome::Held(why) => (InstallProgressState::Held, Some(why)),
            Outcome::Succeeded => (InstallProgressState::Done, None),
            Outcome::Failed(why) => (InstallProgressState::Failed, Some(why)),
            Outcome::Denied(why) => (InstallProgressState::Denied, Some(why)),
            Outcome::Gone => (InstallProgressState::Gone, None),
        };
        let prefix = format!("{install}: ");
        InstallProgress {
            install: install.to_owned(),
            state,
            message: message.map(|m| m.strip_prefix(&prefix).unwrap_or(m).to_owned()),
        }
    }
}

/// `wave` with its counts, failures and each install's progress taken from `outcomes`
/// (one per install, in order).
pub fn tally(wave: &WaveStatus, outcomes: &[Outcome]) -> WaveStatus {
    let mut counted = WaveStatus {
        installs: wave.installs.clone(),
        started_at: wave.started_at.clone(),
        completed_at: wave.completed_at.clone(),
        progress: wave
            .installs
            .iter()
            .zip(outcomes)
            .map(|(install, outcome)| outcome.progress(install))
            .collect(),
        ..WaveStatus::default()
    };
    for outcome in outcomes {
        match outcome {
            Outcome::Waiting | Outcome::Pending | Outcome::Held(_) => counted.pending += 1,
            Outcome::Succeeded => counted.succeeded += 1,
            Outcome::Failed(why) => {
                counted.failed += 1;
                counted.failures.push(why.clone());
            }
            Outcome::Denied(why) => {
                counted.denied += 1;
                counted.failures.push(why.clone());
            }
            Outcome::Gone => {}
        }
    }
    counted
}

/// What the rollout does next, from its waves' counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Wave `n` (0-based) has more failed and denied installs than it may.
    Halt(usize),
    /// Wave `n` still has installs converging.
    InProgress(usize),
    /// The previous wave completed; wave `n` starts after the pause, in this long.
    PauseBefore(usize, Duration),
    /// Wave `n` starts now.
    Start(usize),
    /// Every wave completed.
    Completed,
}

/// The next step of a rollout whose waves are `waves` (counted with [`tally`]), at `now`.
/// Any started wave over its failure threshold halts the rollout, even one completed
/// earlier; otherwise the first wave with installs still converging is waited for; then
/// the next wave starts once the pause after the previous one's completion is over.
pub fn next_step(spec: &RolloutSpec, waves: &[WaveStatus], now: jiff::Timestamp) -> Next {
    let started = waves.iter().take_while(|w| w.started_at.is_some());
    for (i, wave) in started.clone().enumerate() {
        let bad = (wave.failed + wave.denied) as usize;
        if bad > spec.max_failures_of(wave.installs.len()) {
            return Next::Halt(i);
        }
    }
    if let Some(i) = started.clone().position(|w| w.pending > 0) {
        return Next::InProgress(i);
    }
    let next = started.count();
    if next == waves.len() {
        return Next::Completed;
    }
    let pause = jiff::SignedDuration::from_secs(i64::from(spec.pause_seconds()));
    let previous_done = next
        .checked_sub(1)
        .and_then(|p| waves[p].completed_at.as_ref())
        .map(|t| t.0);
    match previous_done {
        Some(done) if done + pause > now => {
            let left = Duration::try_from((done + pause).duration_since(now)).unwrap_or_default();
            Next::PauseBefore(next, left)
        }
        _ => Next::Start(next),
    }
}

#[cfg(test)]
#[path = "rollout_waves_tests.rs"]
mod tests;
