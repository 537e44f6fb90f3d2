//! What the runner owes the control plane, delivered whenever it is reachable: final
//! Plan phases and `AwaitingApproval` with the diff (from the journal: `applied`,
//! `failed` or `awaiting` but not yet `reported` or `released`) and
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
            .filter(|r| {
                matches!(
                    r.stage,
                    Stage::Applied { .. } | Stage::Failed { .. } | Stage::Awaiting { .. }
                )
            })
            .collect();
        for record in owed {
            let (status, next) = match &record.stage {
                Stage::Applied {
                    outputs,
                    log,
                    diff,
                    reason,
                } => {
                    let mut status = json!({
                        "phase": PlanPhase::Succeeded,
                        "finishedAt": Time(jiff::Timestamp::now()),
                        "message": null,
                        "outputs": outputs,
                        "log": (!log.is_empty()).then(|| log.clone()),
                        "reason": reason,
                    });
                    if let Some(diff) = diff {
                        status["diff"] = json!(diff);
                    }
                    (status, Stage::Reported)
                }
                Stage::Failed { message } => (
                    json!({
                        "phase": PlanPhase::Failed,
                        "finishedAt": Time(jiff::Timestamp::now()),
                        "message": message,
                        "outputs": BTreeMap::<String, Value>::new(),
                        "log": null,
                    }),
                    Stage::Reported,
                ),
                // One write: the diff with the phase, the claim released.
                Stage::Awaiting { diff, reason } => (
                    json!({
                        "phase": PlanPhase::AwaitingApproval,
                        "diff": diff,
                        "reason": reason,
                        "message": null,
                    }),
                    Stage::Released {
                        diff_hash: diff.hash.clone(),
                    },
                ),
                _ => unreachable!("filtered above"),
            };
            match report_phase(&session, &record.plan, status).await {
                Ok(()) => session
                    .journal
                    .lock()
                    .expect("journal lock is never poisoned")
                    .record(&record.plan, &record.uid, next)
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

/// Sets a claimed Plan's final phase (or `AwaitingApproval`) with `status`. A Plan that
/// is gone counts as reported.
async fn report_phase(
    session: &Session,
    plan: &str,
    status: Value,
) -> Result<(), kube_client::Error> {
    let patch = Patch::Merge(json!({ "status": status }));
    let params = PatchParams::default();
    let result =
        crate::retry::retry(3, || session.lean_plans.patch_status(plan, &params, &patch)).await;
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
