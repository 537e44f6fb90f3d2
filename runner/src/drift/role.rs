//! The role a drift check runs under: in the customer's AWS account (`--stack`), the
//! role the component's last deploy Plan ran under, assumed like a Plan's (the stack must
//! enable it, it must exist and trust the runner) with session name `drift-<component>`.
//! The executor reads live state with its credentials (terraform's provider, say), and
//! the desired state's secrets are read from Secrets Manager under it. A role that
//! cannot be assumed skips the check (logged, and audited as a `role` event with
//! `assumable: false`): never the runner's own role, never another one. Credentials are
//! reused until two minutes before they expire, so a component watched for changes does
//! not assume its role on every event. Without `--stack`, checks read secrets from the
//! runner's store, as before.

use std::collections::BTreeMap;
use std::time::Duration;

use outpost_api::{AuditEventType, EntityKind, EntityRef};
use serde_json::json;
use tokio::time::Instant;

use super::Baseline;
use crate::audit::Subject;
use crate::secrets::SecretSource;
use crate::session::Session;

/// How long before they expire assumed credentials are replaced.
const RENEW_BEFORE: Duration = Duration::from_secs(120);

/// The component's role assumed for drift checks, while its credentials last.
pub struct DriftRole {
    /// The executor's environment (the role's credentials and region).
    pub env: BTreeMap<String, String>,
    /// Where the desired state's secrets are read (`None`: the runner's `--secrets-dir`).
    pub secrets: Option<Box<dyn SecretSource>>,
    renew_at: Instant,
}

/// The STS session name of drift checks of `component` (at most 64 characters).
pub fn session_name(component: &str) -> String {
    format!("drift-{component}").chars().take(64).collect()
}

/// The environment and secret store for a check of `baseline`: `Ok(None)` without an AWS
/// account (no role to assume), the cached or newly assumed role with one, `Err` with
/// the reason the check is skipped.
pub async fn assume<'a>(
    session: &Session,
    baseline: &Baseline,
    cached: &'a mut Option<DriftRole>,
) -> Result<Option<&'a DriftRole>, String> {
    let Some(account) = &session.aws else {
        return Ok(None);
    };
    if cached.as_ref().is_some_and(|c| Instant::now() < c.renew_at) {
        return Ok(cached.as_ref());
    }
    *cached = None;
    let subject = Subject {
        plan: None,
        entity: Some(EntityRef {
            kind: EntityKind::Component,
            name: baseline.component.clone(),
        }),
        role: baseline.role.clone(),
    };
    let Some(role) = &baseline.role else {
        let reason = format!(
            "the deploy plan {} recorded no role, and every check runs under one in the customer account",
            baseline.plan
        );
        session.audit(
            AuditEventType::Role,
            subject,
            json!({"drift": true, "assumable": false, "reason": reason, "stack": account.stack_name}),
        );
        return Err(reason);
    };
    match account
        .assume(role, &session_name(&baseline.component))
        .await
    {
        Ok(assumed) => {
            session.audit(
                AuditEventType::Role,
                subject,
                json!({"role": role, "drift": true, "roleArn": assumed.role_arn,
                       "assumedRole": assumed.identity, "expires": assumed.expires,
                       "stack": account.stack_name}),
            );
            let lifetime = Duration::from_secs(crate::aws::SESSION_SECONDS.unsigned_abs().into());
            Ok(Some(cached.insert(DriftRole {
                env: account.environment(&assumed),
                secrets: crate::worker::role::role_secrets(session, account, &assumed),
                renew_at: Instant::now() + lifetime.saturating_sub(RENEW_BEFORE),
            })))
        }
        Err(e) => {
            session.audit(
                AuditEventType::Role,
                subject,
                json!({"role": role, "drift": true, "assumable": false, "reason": e.to_string(),
                       "stack": account.stack_name}),
            );
            Err(format!(
                "{}: {e}",
                crate::aws::RoleError::plan_message(role)
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_names_fit_sts() {
        assert_eq!(super::session_name("web"), "drift-web");
        assert_eq!(super::session_name(&"x".repeat(63)).len(), 64);
    }
}
