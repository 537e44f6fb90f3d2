//! The policies a Plan's diff is checked against in the runner: the vendor's (as the
//! gate evaluates them, now on the real diff) and the customer's local ones.

use kube_client::api::{Api, ListParams};
use outpost_api::{ApprovalMode, AuditEventType, Install, Lean, Policy, Verdict};
use outpost_policy::{CompiledPolicy, PolicyMeta};
use serde_json::{Value, json};

use super::execute::{Failure, refused};
use crate::audit::Subject;
use crate::executor::Diff;
use crate::session::Session;

/// Reads the install's vendor policies: the Policies of its App that select it, as the
/// control plane's gate does. Read right after the claim, while the control plane was
/// just reachable; when it is not, the last list read is used, and if none was ever read
/// the Plan fails closed. An install object that is gone selects no policy.
///
/// Also says whether the install asks a person to approve every diff (`approvalMode:
/// prompt`); when the install cannot be read now, it is taken to (a person is asked
/// rather than nobody).
pub(super) async fn read_vendor_policies(
    session: &Session,
) -> Result<(Vec<Policy>, bool), Failure> {
    let client = session.plans.clone().into_client();
    // Read without their managed fields, which nothing here reads.
    let installs = Api::<Lean<Install>>::namespaced(client.clone(), &session.namespace);
    let all = Api::<Lean<Policy>>::namespaced(client, &session.namespace);
    let every = ListParams::default();
    let read = async {
        let Some(Lean(install)) =
            crate::retry::retry(2, || installs.get_opt(&session.install)).await?
        else {
            // Gone since the gate passed the Plan (which it does only for an existing
            // install): no policy selects it, and no mode asks for a person.
            return Ok((Vec::new(), false));
        };
        let policies = crate::retry::retry(2, || all.list(&every)).await?;
        Ok::<_, kube_client::Error>((
            policies
                .items
                .into_iter()
                .map(Lean::into_inner)
                .filter(|p| outpost_policy::applies_to_install(p, &install))
                .collect::<Vec<_>>(),
            install.spec.approval_mode() == ApprovalMode::Prompt,
        ))
    };
    match read.await {
        Ok((policies, prompt)) => {
            *session.vendor_policies.lock().expect("not poisoned") = Some(policies.clone());
            Ok((policies, prompt))
        }
        Err(e) => match session
            .vendor_policies
            .lock()
            .expect("not poisoned")
            .clone()
        {
            Some(policies) => {
                tracing::warn!(error = %e, "cannot read the vendor policies; using the last read");
                Ok((policies, true))
            }
            None => Err(refused(format!(
                "the install's vendor policies cannot be read to check the real diff, so \
                 nothing is applied: {e}"
            ))),
        },
    }
}

/// Evaluates the vendor policies on the real diff too: the gate saw only the desired
/// state (a terraform plan, for one, exists only here). A deny fails the Plan; the
/// verdicts (an `approve` policy's asks a person) go with the diff.
pub(super) fn vendor_policies(
    session: &Session,
    policies: Vec<Policy>,
    diff: &Diff,
    subject: &Subject,
) -> Result<Vec<Verdict>, Failure> {
    let policies: Vec<Policy> = policies
        .into_iter()
        .filter(|p| p.spec.inputs.contains(&diff.input))
        .collect();
    if policies.is_empty() {
        return Ok(Vec::new());
    }
    let mut compiled = Vec::new();
    let mut denials = Vec::new();
    for policy in &policies {
        let meta = PolicyMeta::from_policy(policy);
        match outpost_policy::compile(&meta.name, &policy.spec.module) {
            Ok(module) => compiled.push((meta, module)),
            Err(e) => denials.push(format!("{}: the policy does not compile: {e}", meta.name)),
        }
    }
    let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> = compiled.iter().map(|(m, c)| (m, c)).collect();
    let verdicts = outpost_policy::evaluate(&pairs, diff.input, &diff.document);
    session.audit(
        AuditEventType::Verdict,
        subject.clone(),
        json!({"vendor": true, "input": diff.input, "verdicts": audited_verdicts(&verdicts)}),
    );
    denials.extend(
        verdicts
            .iter()
            .filter(|v| v.denied())
            .map(|v| format!("{}: {}", v.policy, v.denials.join("; "))),
    );
    if denials.is_empty() {
        Ok(verdicts.into_iter().map(Verdict::from).collect())
    } else {
        Err(refused(format!(
            "denied by vendor policy on the real diff {}",
            denials.join("; ")
        )))
    }
}

/// Evaluates the local policies (if any) on `diff` (the real diff, or the static
/// configuration before it runs); a deny fails the Plan. The verdicts go with the diff,
/// marked `local`; they are audited (with none, only if `audit_none`).
pub(super) fn local_policies(
    session: &Session,
    diff: &Diff,
    subject: &Subject,
    audit_none: bool,
) -> Result<Vec<Verdict>, Failure> {
    local_verdicts(session, diff, subject, json!({}), audit_none).map_err(refused)
}

/// Evaluates the local policies (if any) on `diff` and audits their verdicts (with
/// `details` added; with none, only if `audit_none`); `Err` with the message of a deny,
/// or of policies that do not load.
pub(crate) fn local_verdicts(
    session: &Session,
    diff: &Diff,
    subject: &Subject,
    details: Value,
    audit_none: bool,
) -> Result<Vec<Verdict>, String> {
    let Some(dir) = &session.args.policies else {
        return Ok(Vec::new());
    };
    // Read on every Plan: the customer may change them without restarting the runner.
    let verdicts = match crate::local_policy::load(dir) {
        Ok(policies) => policies.evaluate(diff),
        Err(e) => {
            return Err(format!(
                "local policies in {} cannot be loaded, so nothing is run: {e:#}",
                dir.display()
            ));
        }
    };
    let mut audited =
        json!({"local": true, "input": diff.input, "verdicts": audited_verdicts(&verdicts)});
    if let (Some(audited), Value::Object(more)) = (audited.as_object_mut(), details) {
        audited.extend(more);
    }
    if audit_none || !verdicts.is_empty() {
        session.audit(AuditEventType::Verdict, subject.clone(), audited);
    }
    let denials: Vec<String> = verdicts
        .iter()
        .filter(|v| v.denied())
        .map(|v| format!("{}: {}", v.policy, v.denials.join("; ")))
        .collect();
    if denials.is_empty() {
        Ok(verdicts
            .into_iter()
            .map(|v| Verdict {
                local: true,
                ..Verdict::from(v)
            })
            .collect())
    } else {
        Err(format!("denied by local policy {}", denials.join("; ")))
    }
}

/// Verdicts as the `verdict` audit event lists them.
fn audited_verdicts(verdicts: &[outpost_policy::PolicyVerdict]) -> Vec<Value> {
    verdicts
        .iter()
        .map(|v| json!({"policy": v.policy, "denied": v.denied(), "denials": v.denials, "warnings": v.warnings}))
        .collect()
}
