//! The fleet matrix: one row per install, one cell per component of its App, each in one
//! [`CellState`] computed from the Install's status, the component's latest Plan, its
//! DriftReport and the install's runner heartbeat.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::runner::is_online;
use outpost_api::{
    App, Component, ComponentPhase, ComponentState, DriftReport, DriftState, EntityKind, Install,
    Plan, PlanPhase, Runner, RunnerSettings,
};
use serde::Serialize;

/// The state of one install × component cell, most urgent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellState {
    /// The component's latest Plan waits for an admin.
    AwaitingApproval,
    /// The component's latest Plan was denied (by a policy, or by a person).
    Denied,
    /// The latest deploy failed.
    Failed,
    /// The install's runner has not heartbeated for three intervals.
    RunnerOffline,
    /// A Plan is on its way (pending, approved, claimed, running).
    Deploying,
    /// Deployed, but the runner found live state differing from what it applied.
    Drifted,
    /// Deployed and as applied.
    InSync,
    /// Nothing deployed yet.
    Pending,
}

impl CellState {
    /// Every state, in the order the legend lists them.
    pub const ALL: [CellState; 8] = [
        CellState::InSync,
        CellState::Drifted,
        CellState::Deploying,
        CellState::Failed,
        CellState::Denied,
        CellState::AwaitingApproval,
        CellState::RunnerOffline,
        CellState::Pending,
    ];

    /// The name in URLs, CSS classes and `data-state` attributes.
    pub fn slug(self) -> &'static str {
        match self {
            CellState::AwaitingApproval => "awaiting-approval",
            CellState::Denied => "denied",
            CellState::Failed => "failed",
            CellState::RunnerOffline => "runner-offline",
            CellState::Deploying => "deploying",
            CellState::Drifted => "drifted",
            CellState::InSync => "in-sync",
            CellState::Pending => "pending",
        }
    }

    /// What the legend says.
    pub fn label(self) -> &'static str {
        match self {
            CellState::AwaitingApproval => "awaiting approval",
            CellState::Denied => "denied by policy",
            CellState::Failed => "failed",
            CellState::RunnerOffline => "runner offline",
            CellState::Deploying => "deploying",
            CellState::Drifted => "drifted",
            CellState::InSync => "in sync",
            CellState::Pending => "not deployed",
        }
    }

    /// The state named `slug`.
    pub fn from_slug(slug: &str) -> Option<CellState> {
        CellState::ALL.into_iter().find(|s| s.slug() == slug)
    }
}

/// One cell: its state and the short text shown in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// The state.
    pub state: CellState,
    /// The text in the cell (`drifted · 1 field`, `failed`, ...).
    pub text: String,
    /// The Plan to open from the cell, if any.
    #[serde(skip)]
    pub plan: Option<String>,
}

/// What a cell is computed from.
#[derive(Default)]
pub struct CellInputs<'a> {
    /// The component's entry in the Install's status.
    pub status: Option<&'a ComponentState>,
    /// The component's newest Plan.
    pub latest_plan: Option<&'a Plan>,
    /// The component's DriftReport.
    pub drift: Option<&'a DriftReport>,
    /// Whether the install's runner is online.
    pub runner_online: bool,
}

/// The state of one cell.
pub fn cell(inputs: &CellInputs<'_>) -> Cell {
    let plan_phase = inputs
        .latest_plan
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase);
    let plan_name = inputs.latest_plan.and_then(|p| p.metadata.name.clone());
    let component_phase = inputs.status.and_then(|s| s.phase);
    let drifted_fields = match inputs.drift {
        Some(report) if !report.spec.in_sync => Some(report.spec.diff.len()),
        Some(_) => None,
        None => inputs
            .status
            .filter(|s| s.drift == Some(DriftState::Drifted))
            .map(|s| s.drifted_fields.unwrap_or(0) as usize),
    };
    let denied_by_policy = inputs
        .latest_plan
        .and_then(|p| p.status.as_ref())
        .is_some_and(|s| s.verdicts.iter().any(|v| v.denied));
    let (state, text) = if plan_phase == Some(PlanPhase::AwaitingApproval) {
        (CellState::AwaitingApproval, "awaiting approval".to_owned())
    } else if plan_phase == Some(PlanPhase::Denied) {
        let text = if denied_by_policy {
            "denied by policy"
        } else {
            "denied"
        };
        (CellState::Denied, text.to_owned())
    } else if plan_phase == Some(PlanPhase::Failed)
        || component_phase == Some(ComponentPhase::Failed)
    {
        (CellState::Failed, "failed".to_owned())
    } else if !inputs.runner_online && (inputs.status.is_some() || inputs.latest_plan.is_some()) {
        (CellState::RunnerOffline, "runner offline".to_owned())
    } else if matches!(
        plan_phase,
        Some(
            PlanPhase::Pending
                | PlanPhase::Ready
                | PlanPhase::Approved
                | PlanPhase::Claimed
                | PlanPhase::Planning
                | PlanPhase::Planned
                | PlanPhase::Applying
        )
    ) || inputs.latest_plan.is_some_and(|p| p.status.is_none())
        || matches!(
            component_phase,
            Some(ComponentPhase::Deploying | ComponentPhase::TearingDown)
        )
    {
        (CellState::Deploying, "deploying".to_owned())
    } else if component_phase == Some(ComponentPhase::Deployed) {
        match drifted_fields {
            Some(1) => (CellState::Drifted, "drifted · 1 field".to_owned()),
            Some(n) => (CellState::Drifted, format!("drifted · {n} fields")),
            None => (CellState::InSync, "in sync".to_owned()),
        }
    } else {
        (CellState::Pending, "not deployed".to_owned())
    };
    Cell {
        state,
        text,
        plan: plan_name,
    }
}

/// One install's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its App.
    pub app: String,
    /// Its labels.
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    /// Lifecycle phase.
    pub phase: String,
    /// Whether its runner is online.
    pub runner_online: bool,
    /// Cells by component name (components of its App only).
    pub cells: BTreeMap<String, Cell>,
}

impl Row {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The id of a cell: `namespace/install/component`.
    pub fn cell_id(&self, component: &str) -> String {
        format!("{}/{}/{component}", self.namespace, self.name)
    }
}

/// The whole matrix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// Every component name, the columns.
    pub columns: Vec<String>,
    /// One row per install, by namespace and name.
    pub rows: Vec<Row>,
}

impl Fleet {
    /// How many cells are in each state.
    pub fn counts(&self) -> BTreeMap<CellState, usize> {
        let mut counts = BTreeMap::new();
        for cell in self.rows.iter().flat_map(|r| r.cells.values()) {
            *counts.entry(cell.state).or_default() += 1;
        }
        counts
    }
}

/// The objects the matrix is computed from.
#[derive(Default)]
pub struct FleetObjects {
    /// Installs.
    pub installs: Vec<Install>,
    /// Apps (for the runner heartbeat interval).
    pub apps: Vec<App>,
    /// Components (the columns of each App).
    pub components: Vec<Component>,
    /// Plans.
    pub plans: Vec<Plan>,
    /// Runners (heartbeats).
    pub runners: Vec<Runner>,
    /// DriftReports.
    pub drift: Vec<DriftReport>,
}

fn ns(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// Whether the newest heartbeat of `install`'s runners is recent enough.
pub fn runner_online(objects: &FleetObjects, install: &Install, now: &Time) -> bool {
    let namespace = ns(&install.metadata);
    let name = install.metadata.name.clone().unwrap_or_default();
    let interval = objects
        .apps
        .iter()
        .find(|a| {
            ns(&a.metadata) == namespace && a.metadata.name.as_deref() == Some(&install.spec.app)
        })
        .and_then(|a| a.spec.runner.as_ref())
        .and_then(|r| r.heartbeat_seconds)
        .unwrap_or(RunnerSettings::DEFAULT_HEARTBEAT_SECONDS);
    objects
        .runners
        .iter()
        .filter(|r| ns(&r.metadata) == namespace && r.spec.install == name)
        .filter_map(|r| r.status.as_ref()?.last_heartbeat.as_ref())
        .any(|beat| is_online(beat, now, interval))
}

/// The newest Plan of `entity` (a component) in an install.
pub fn latest_plan<'a>(
    plans: &'a [Plan],
    namespace: &str,
    install: &str,
    component: &str,
) -> Option<&'a Plan> {
    plans
        .iter()
        .filter(|p| {
            ns(&p.metadata) == namespace
                && p.spec.install == install
                && p.spec.entity.kind == EntityKind::Component
                && p.spec.entity.name == component
        })
        .max_by(|a, b| {
            let created = |p: &Plan| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
}

/// The matrix at `now`.
pub fn fleet(objects: &FleetObjects, now: &Time) -> Fleet {
    let mut columns = BTreeSet::new();
    let mut rows = Vec::new();
    for install in &objects.installs {
        let namespace = ns(&install.metadata);
        let name = install.metadata.name.clone().unwrap_or_default();
        let status = install.status.clone().unwrap_or_default();
        let online = runner_online(objects, install, now);
        // The App's components, and any the status still names (e.g. a removed one).
        let mut components: BTreeSet<String> = objects
            .components
            .iter()
            .filter(|c| ns(&c.metadata) == namespace && c.spec.app == install.spec.app)
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        components.extend(status.components.iter().map(|c| c.name.clone()));
        let cells = components
            .into_iter()
            .map(|component| {
                let inputs = CellInputs {
                    status: status.components.iter().find(|c| c.name == component),
                    latest_plan: latest_plan(&objects.plans, &namespace, &name, &component),
                    drift: objects.drift.iter().find(|d| {
                        ns(&d.metadata) == namespace
                            && d.spec.install == name
                            && d.spec.entity.kind == EntityKind::Component
                            && d.spec.entity.name == component
                    }),
                    runner_online: online,
                };
                columns.insert(component.clone());
                (component, cell(&inputs))
            })
            .collect();
        rows.push(Row {
            app: install.spec.app.clone(),
            labels: install.metadata.labels.clone().unwrap_or_default(),
            phase: status
                .phase
                .map_or_else(|| "Pending".to_owned(), |p| format!("{p:?}")),
            runner_online: online,
            cells,
            namespace,
            name,
        });
    }
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Fleet {
        columns: columns.into_iter().collect(),
        rows,
    }
}

#[cfg(test)]
#[path = "cells_tests.rs"]
mod tests;
