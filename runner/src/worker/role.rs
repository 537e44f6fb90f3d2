//! The role a Plan runs under: audited, and in a customer AWS account assumed, its
//! temporary credentials going to the executor and its secrets read under it.

use std::collections::BTreeMap;

use kube_client::ResourceExt as _;
use outpost_api::{AuditEventType, Plan};
use serde_json::json;

use super::execute::{Failure, refused};
use crate::audit::Subject;
use crate::secrets::{SecretSource, SecretsManagerSecrets};
use crate::session::Session;

/// The executor's environment for a Plan's role, and where the Plan's secrets are read
/// when not from the runner's own store.
pub(super) type RoleEnvironment = (BTreeMap<String, String>, Option<Box<dyn SecretSource>>);

/// Audits the Plan's resolved role and, with a customer AWS account (`--stack`),
/// assumes it: the executor's environment gets its temporary credentials, and the
/// Plan's secrets are read from Secrets Manager under it (unless `--secrets-dir`). A
/// role that cannot be assumed fails the Plan closed; there is no fallback to another
/// role.
pub(super) async fn assume_role(
    session: &Session,
    plan: &Plan,
    subject: &Subject,
) -> Result<RoleEnvironment, Failure> {
    let Some(role) = &subject.role else {
        return match session.aws {
            Some(_) => Err(refused(
                "the plan has no resolved role, and every plan runs under one in the customer account",
            )),
            None => Ok((BTreeMap::new(), None)),
        };
    };
    let level = plan
        .status
        .as_ref()
        .and_then(|s| s.role.as_ref())
        .map(|r| r.level);
    let Some(account) = &session.aws else {
        session.audit(
            AuditEventType::Role,
            subject.clone(),
            json!({"role": role, "level": level}),
        );
        return Ok((BTreeMap::new(), None));
    };
    let uid = plan.uid().unwrap_or_default();
    match account.assume(role, &uid).await {
        Ok(assumed) => {
            // The identity and ARN only: credentials never enter the audit log.
            session.audit(
                AuditEventType::Role,
                subject.clone(),
                json!({"role": role, "level": level, "roleArn": assumed.role_arn,
                       "assumedRole": assumed.identity, "expires": assumed.expires,
                       "stack": account.stack_name}),
            );
            let secrets = role_secrets(session, account, &assumed);
            Ok((account.environment(&assumed), secrets))
        }
        Err(e) => {
            tracing::warn!(plan = %plan.name_any(), role = %role, reason = %e, "role not assumable; the plan fails closed");
            session.audit(
                AuditEventType::Role,
                subject.clone(),
                json!({"role": role, "level": level, "assumable": false, "reason": e.to_string(),
                       "stack": account.stack_name}),
            );
            Err(refused(crate::aws::RoleError::plan_message(role)))
        }
    }
}

/// Where work under `assumed` reads secrets: the install's Secrets Manager secrets with
/// the role's credentials, or `None` with `--secrets-dir` (the runner's store).
pub(crate) fn role_secrets(
    session: &Session,
    account: &crate::aws::Account,
    assumed: &crate::aws::AssumedRole,
) -> Option<Box<dyn SecretSource>> {
    match session.args.secrets_dir {
        Some(_) => None,
        None => Some(Box::new(SecretsManagerSecrets::new(
            &account.config_for(assumed),
            &session.namespace,
            &session.install,
        ))),
    }
}
