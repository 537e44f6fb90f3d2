//! The Plan gate's decision, as a function of values ([`judge`]): the role the
//! precedence chain resolves and the vendor's policies' verdicts, `Ready` or `Denied`.
//! The gate (`reconcilers/plan_gate.rs`) calls it once its caches caught up with a
//! Plan; the Install controller calls it on the objects it renders a Plan from and
//! creates the Plan with the decision.

use std::sync::Arc;

use outpost_api::{App, Install, Plan, PlanPhase, PlanStatus, Policy, Verdict};

use crate::logic::app_objects::AppObjects;
use crate::logic::role_chain::resolve_role;
use crate::logic::template::{InstallOutputs, TemplateContext};

/// Evaluates policies on a Plan; returns the verdicts (a denying one denies the Plan).
pub type PolicyCheck = Arc<dyn Fn(&Plan, &[Policy]) -> Vec<Verdict> + Send + Sync>;

/// The gate's decision on `plan`, made from `install` and the `app` and its `objects`
/// it was rendered from: the role the precedence chain resolves, the verdicts of those
/// of the namespace's `policies` that apply to the install (by `check`); `Ready`, or `Denied` with why.
/// Never `Approved`: whether a person must approve is decided on the real diff.
pub fn judge(
    plan: &Plan,
    install: &Install,
    app: &App,
    objects: &AppObjects<'_>,
    mut policies: Vec<Policy>,
    check: &PolicyCheck,
) -> PlanStatus {
    let mut status = PlanStatus::default();
    let context = match TemplateContext::new(app, install, &InstallOutputs::default()) {
        Ok(context) => context,
        Err(err) => {
            return deny(
                status,
                format!(
                    "cannot render templates for install {}: {err}",
                    plan.spec.install
                ),
            );
        }
    };
    match resolve_role(&plan.spec, objects, &context) {
        Ok(role) => status.role = Some(role),
        Err(err) => return deny(status, err.to_string()),
    }

    policies.retain(|p| outpost_policy::applies_to_install(p, install));
    status.verdicts = check(plan, &policies);
    let denials: Vec<String> = status
        .verdicts
        .iter()
        .filter(|v| v.denied)
        .flat_map(|v| v.messages.iter().map(move |m| format!("{}: {m}", v.policy)))
        .collect();
    if !denials.is_empty() {
        return deny(status, format!("denied by policy: {}", denials.join("; ")));
    }

    // The Plan goes to its runner, which plans against live state; whether a person
    // must approve (the install's approval mode, an `approve` policy's verdict here or on
    // the diff) is decided there, on the real diff. The gate never approves.
    status.phase = Some(PlanPhase::Ready);
    status
}

/// `status` (what was decided so far) denying the Plan for `message`.
pub fn deny(mut status: PlanStatus, message: String) -> PlanStatus {
    status.phase = Some(PlanPhase::Denied);
    status.message = Some(message);
    status
}
