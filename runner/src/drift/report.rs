//! Drift reports: the latest check of each component, its policy verdicts, and their
//! delivery to the control plane as `DriftReport` objects.
//!
//! The latest report of each component is kept in `STATE/drift/reports.json` with
//! whether it was delivered; the reporter delivers what is owed whenever the control
//! plane is reachable (an older undelivered report is simply replaced by a newer one:
//! only the latest state matters). The object is `<install>-<component>`, labelled
//! `outpost.dev/install` and `outpost.dev/component`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams, PostParams};
use outpost_api::{
    AuditEventType, DiffEntry, DriftReport, DriftReportSpec, Enforcement, EntityKind, EntityRef,
    Install, Policy, PolicyInput, Verdict,
};
use outpost_policy::{CompiledPolicy, PolicyMeta};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Notify;

use super::{Baseline, read_json, write_json};
use crate::audit::Subject;
use crate::session::{INSTALL_LABEL, Session};

/// The label naming a DriftReport's component.
pub use outpost_api::labels::COMPONENT as COMPONENT_LABEL;
/// File of the latest reports, under the drift directory.
const REPORTS_FILE: &str = "reports.json";
/// How long the reporter waits before trying again after a failure or when idle.
const AGAIN: Duration = Duration::from_secs(2);

/// A component's latest report and whether the control plane has it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Latest {
    spec: DriftReportSpec,
    reported: bool,
}

/// The latest report of each component, persisted until delivered.
pub struct OwedReports {
    path: PathBuf,
    latest: Mutex<BTreeMap<String, Latest>>,
    /// Wakes the reporter.
    pub to_report: Notify,
}

impl OwedReports {
    /// Opens the reports kept in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(REPORTS_FILE);
        let latest = read_json(&path)?.unwrap_or_default();
        Ok(OwedReports {
            path,
            latest: Mutex::new(latest),
            to_report: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Latest>> {
        self.latest
            .lock()
            .expect("drift reports lock is never poisoned: updates do not panic")
    }

    /// The latest report of `component`.
    pub fn last(&self, component: &str) -> Option<DriftReportSpec> {
        self.lock().get(component).map(|l| l.spec.clone())
    }

    /// Makes `spec` the latest report of `component`, owed to the control plane.
    fn put(&self, component: &str, spec: DriftReportSpec) {
        let mut latest = self.lock();
        latest.insert(
            component.to_owned(),
            Latest {
                spec,
                reported: false,
            },
        );
        write_json(&self.path, &*latest).expect("the drift state in the state dir is writable");
        drop(latest);
        self.to_report.notify_one();
    }

    /// The reports not delivered yet.
    fn owed(&self) -> Vec<(String, DriftReportSpec)> {
        self.lock()
            .iter()
            .filter(|(_, l)| !l.reported)
            .map(|(c, l)| (c.clone(), l.spec.clone()))
            .collect()
    }

    /// Marks `spec` delivered, unless a newer report replaced it meanwhile.
    fn delivered(&self, component: &str, spec: &DriftReportSpec) {
        let mut latest = self.lock();
        if let Some(l) = latest.get_mut(component).filter(|l| l.spec == *spec) {
            l.reported = true;
            // Losing this write only delivers the same report again.
            let _ = write_json(&self.path, &*latest);
        }
    }
}

/// Records the result of a check of `baseline`'s component: a report with the policy
/// verdicts, owed to the control plane, and an audit event when the drift is new
/// (or changed) or when the component is back in sync.
/// Secret values in flight ([`Session::masks`]) are masked in the diff first.
pub async fn record(session: &Session, baseline: &Baseline, diff: Vec<DiffEntry>) {
    let masker = session.masks.current();
    let diff: Vec<DiffEntry> = diff
        .into_iter()
        .map(|entry| DiffEntry {
            path: masker.mask(&entry.path),
            desired: entry.desired.map(|v| masker.mask_json(&v)),
            live: entry.live.map(|v| masker.mask_json(&v)),
            ..entry
        })
        .collect();
    let component = &baseline.component;
    let previous = session.drift.reports.last(component);
    let now = Time(jiff::Timestamp::now());
    let in_sync = diff.is_empty();
    let drifted_since = match &previous {
        _ if in_sync => None,
        Some(p) if !p.in_sync && p.plan.as_deref() == Some(baseline.plan.as_str()) => {
            p.drifted_since.clone().or_else(|| Some(now.clone()))
        }
        _ => Some(now.clone()),
    };
    let entity = EntityRef {
        kind: EntityKind::Component,
        name: component.clone(),
    };
    let mut spec = DriftReportSpec {
        install: session.install.clone(),
        entity: entity.clone(),
        in_sync,
        observed_at: now,
        diff,
        plan: Some(baseline.plan.clone()),
        drifted_since,
        verdicts: Vec::new(),
    };
    spec.verdicts = verdicts(session, &spec).await;
    let new_drift = !in_sync && previous.as_ref().is_none_or(|p| p.diff != spec.diff);
    let back_in_sync = in_sync && previous.as_ref().is_some_and(|p| !p.in_sync);
    if new_drift || back_in_sync {
        let fields: Vec<&str> = spec.diff.iter().map(|d| d.path.as_str()).collect();
        tracing::info!(%component, in_sync, ?fields, "drift check");
        session.audit(
            AuditEventType::Drift,
            Subject {
                plan: Some(baseline.plan.clone()),
                entity: Some(entity),
                role: None,
            },
            json!({"inSync": in_sync, "fields": fields, "verdicts": spec.verdicts}),
        );
    }
    session.drift.reports.put(component, spec);
}

/// The verdicts of the runner's local policies and of the install's vendor Policies
/// that take the `drift` input, on `spec`. A local policy directory that does not load
/// is one denying verdict; vendor policies that cannot be read now are left out (the
/// next check tries again).
async fn verdicts(session: &Session, spec: &DriftReportSpec) -> Vec<Verdict> {
    let document = outpost_policy::input::drift(spec);
    let mut verdicts = Vec::new();
    if let Some(dir) = &session.args.policies {
        match crate::local_policy::load(dir) {
            Ok(local) => verdicts.extend(
                local
                    .evaluate_document(PolicyInput::Drift, &document)
                    .into_iter()
                    .map(Verdict::from),
            ),
            Err(e) => verdicts.push(Verdict {
                policy: format!("{}*", crate::local_policy::NAME_PREFIX),
                enforcement: Enforcement::Deny,
                denied: true,
                messages: vec![format!(
                    "local policies in {} cannot be loaded: {e:#}",
                    dir.display()
                )],
                ..Default::default()
            }),
        }
    }
    match vendor_policies(session).await {
        Ok(policies) => {
            let mut compiled: Vec<(PolicyMeta, CompiledPolicy)> = Vec::new();
            for policy in &policies {
                let meta = PolicyMeta::from_policy(policy);
                match outpost_policy::compile(&meta.name, &policy.spec.module) {
                    Ok(module) => compiled.push((meta, module)),
                    Err(e) => verdicts.push(Verdict {
                        policy: meta.name.clone(),
                        enforcement: meta.enforcement,
                        denied: true,
                        messages: vec![format!("the policy does not compile: {e}")],
                        ..Default::default()
                    }),
                }
            }
            let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> =
                compiled.iter().map(|(m, c)| (m, c)).collect();
            verdicts.extend(
                outpost_policy::evaluate(&pairs, PolicyInput::Drift, &document)
                    .into_iter()
                    .map(Verdict::from),
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the install's policies; drift verdicts without them");
        }
    }
    verdicts
}

/// The install's vendor Policies that take the `drift` input.
async fn vendor_policies(session: &Session) -> Result<Vec<Policy>, kube_client::Error> {
    let client = session.plans.clone().into_client();
    let install = Api::<Install>::namespaced(client.clone(), &session.namespace)
        .get(&session.install)
        .await?;
    let policies = Api::<Policy>::namespaced(client, &session.namespace)
        .list(&ListParams::default())
        .await?;
    Ok(policies
        .items
        .into_iter()
        .filter(|p| p.spec.inputs.contains(&PolicyInput::Drift))
        .filter(|p| outpost_policy::applies_to_install(p, &install))
        .collect())
}

/// Delivers owed reports, forever.
pub async fn report_drift(session: Arc<Session>) {
    let api: Api<DriftReport> =
        Api::namespaced(session.plans.clone().into_client(), &session.namespace);
    loop {
        for (component, spec) in session.drift.reports.owed() {
            match deliver(&session, &api, &component, &spec).await {
                Ok(()) => session.drift.reports.delivered(&component, &spec),
                Err(e) => {
                    tracing::warn!(%component, error = %e, "cannot report drift; will retry");
                    break;
                }
            }
        }
        let _ = tokio::time::timeout(AGAIN, session.drift.reports.to_report.notified()).await;
    }
}

/// Creates or replaces the component's DriftReport with `spec`.
async fn deliver(
    session: &Session,
    api: &Api<DriftReport>,
    component: &str,
    spec: &DriftReportSpec,
) -> Result<(), kube_client::Error> {
    let name = format!("{}-{component}", session.install);
    let mut report = DriftReport::new(&name, spec.clone());
    report.metadata.labels = Some(BTreeMap::from([
        (INSTALL_LABEL.to_owned(), session.install.clone()),
        (COMPONENT_LABEL.to_owned(), component.to_owned()),
    ]));
    let params = PostParams::default();
    let mut conflicts = 0;
    loop {
        let existing = crate::retry::retry(3, || api.get_opt(&name)).await?;
        let written = match existing {
            Some(existing) => {
                report.metadata.resource_version = existing.resource_version();
                crate::retry::retry(3, || api.replace(&name, &params, &report)).await
            }
            None => {
                report.metadata.resource_version = None;
                crate::retry::retry(3, || api.create(&params, &report)).await
            }
        };
        match written {
            Ok(_) => return Ok(()),
            // Written meanwhile (a retried create that landed): read it again.
            Err(kube_client::Error::Api(status)) if status.code == 409 && conflicts < 3 => {
                conflicts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
