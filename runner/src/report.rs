//! What the runner owes the control plane, delivered whenever it is reachable: final
//! Plan phases (from the journal: `applied` or `failed` but not yet `reported`) and
//! audit events (from the local audit log, past what was shipped). While the control
//! plane is down both stay buffered in the state dir, and a restarted runner delivers
//! them too.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Patch, PatchParams, PostParams};
use outpost_api::{AuditEvent, AuditEventSpec, PlanPhase};
use serde_json::{Value, json};

use crate::journal::Stage;
use crate::session::{INSTALL_LABEL, Session};

/// File in the state dir holding how many audit events were shipped.
pub const SHIPPED_FILE: &str = "audit.shipped";

/// How long a reporter waits before trying again after a failure or when idle.
const AGAIN: Duration = Duration::from_secs(2);

/// Reports the final phase of every Plan the journal says finished, forever.
pub async fn report_plans(session: Arc<Session>) {
    loop {
        let owed: Vec<_> = session
            .journal
            .lock()
            .expect("journal lock is never poisoned")
            .unfinished()
            .into_iter()
            .filter(|r| matches!(r.stage, Stage::Applied { .. } | Stage::Failed { .. }))
            .collect();
        for record in owed {
            let (phase, message, outputs, log) = match &record.stage {
                Stage::Applied { outputs, log } => (
                    PlanPhase::Succeeded,
                    None,
                    outputs.clone(),
                    (!log.is_empty()).then(|| log.clone()),
                ),
                Stage::Failed { message } => (
                    PlanPhase::Failed,
                    Some(message.clone()),
                    BTreeMap::new(),
                    None,
                ),
                _ => unreachable!("filtered above"),
            };
            match report_phase(&session, &record.plan, phase, message, outputs, log).await {
                Ok(()) => session
                    .journal
                    .lock()
                    .expect("journal lock is never poisoned")
                    .record(&record.plan, &record.uid, Stage::Reported)
                    .expect("the journal in the state dir is writable"),
                Err(e) => {
                    tracing::warn!(plan = %record.plan, error = %e, "cannot report; will retry");
                    break;
                }
            }
        }
        let _ = tokio::time::timeout(AGAIN, session.to_report.notified()).await;
    }
}

/// Sets a claimed Plan's final phase. A Plan that is gone or already final counts as
/// reported.
async fn report_phase(
    session: &Session,
    plan: &str,
    phase: PlanPhase,
    message: Option<String>,
    outputs: BTreeMap<String, Value>,
    log: Option<String>,
) -> Result<(), kube_client::Error> {
    let patch = Patch::Merge(json!({"status": {
        "phase": phase,
        "finishedAt": Time(jiff::Timestamp::now()),
        "message": message,
        "outputs": outputs,
        "log": log,
    }}));
    let params = PatchParams::default();
    let result = crate::retry::retry(3, || session.plans.patch_status(plan, &params, &patch)).await;
    match result {
        Ok(_) => Ok(()),
        Err(kube_client::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(%plan, "plan deleted before its result was reported");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Ships the local audit log's events as `AuditEvent` objects named
/// `<install>-<sequence>`, in order, forever.
pub async fn ship_audit(session: Arc<Session>) {
    let marker: PathBuf = session.args.state_dir.join(SHIPPED_FILE);
    let mut shipped: usize = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    loop {
        let pending: Vec<AuditEventSpec> = {
            let audit = session.audit.lock().expect("audit lock is never poisoned");
            audit.events().get(shipped..).unwrap_or_default().to_vec()
        };
        for event in pending {
            match ship(&session, event).await {
                Ok(()) => {
                    shipped += 1;
                    // Losing this write only re-ships events, which 409 and count as shipped.
                    let _ = std::fs::write(&marker, shipped.to_string());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ship audit events; will retry");
                    break;
                }
            }
        }
        let _ = tokio::time::timeout(AGAIN, session.to_ship.notified()).await;
    }
}

async fn ship(session: &Session, spec: AuditEventSpec) -> Result<(), kube_client::Error> {
    let name = format!("{}-{}", session.install, spec.sequence);
    let hash = spec.hash.clone();
    let mut event = AuditEvent::new(&name, spec);
    event.metadata.labels = Some(BTreeMap::from([(
        INSTALL_LABEL.to_owned(),
        session.install.clone(),
    )]));
    let params = PostParams::default();
    let result = crate::retry::retry(3, || session.audit_events.create(&params, &event)).await;
    match result {
        Ok(_) => Ok(()),
        Err(kube_client::Error::Api(status)) if status.code == 409 => {
            // Shipped before (the marker was not written in time) — or another writer
            // took the name, which verification will show.
            match session.audit_events.get_opt(&name).await? {
                Some(existing) if existing.spec.hash == hash => {}
                _ => tracing::error!(event = %name, "audit event name taken by another event"),
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}
