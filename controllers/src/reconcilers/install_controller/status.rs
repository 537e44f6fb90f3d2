//! Writing an Install's status: what this controller owns of it, written only when it
//! changed (watched copies lag the controller's own writes).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_client::ResourceExt as _;
use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{App, ComponentState, Install, InstallPhase, InstallStatus, Lean};
use serde_json::json;

use super::{Context, InstallError};
use outpost_api::condition::{COMPONENTS_HELD, HELD, INPUTS_INVALID, RELEASE_PINNED};

pub(super) async fn set_status(
    install: &Install,
    ctx: &Context,
    phase: InstallPhase,
    components: Vec<ComponentState>,
    last_plan: Option<String>,
    held: Option<Condition>,
) -> Result<(), InstallError> {
    set_status_with(
        install,
        ctx,
        phase,
        components,
        last_plan,
        held.into_iter().collect(),
        None,
    )
    .await
}

/// Writes the status with `ours`: the conditions this controller owns (`Held`,
/// `ReleasePinned`, `ComponentsHeld`, and `InputsInvalid`, added here) present only while they hold, each keeping its
/// transition time while its message stays. Other controllers' conditions are kept.
/// With `fence`, the write only applies at that resourceVersion (409 otherwise). A
/// status equal to the install's, or to the one this controller last wrote when
/// `install` is an older copy than that write, is not written.
pub(super) async fn set_status_with(
    install: &Install,
    ctx: &Context,
    phase: InstallPhase,
    components: Vec<ComponentState>,
    last_plan: Option<String>,
    ours: Vec<Condition>,
    fence: Option<String>,
) -> Result<(), InstallError> {
    let mut ours = ours;
    let app = ctx
        .apps
        .app(&install.namespace().unwrap_or_default(), &install.spec.app);
    ours.extend(app.and_then(|app| inputs_invalid(&app, install)));
    let status = compose_status(install, phase, components, last_plan, ours);
    write_status(install, ctx, status, fence).await
}

/// The condition `InputsInvalid` while the install's inputs do not hold against its
/// App's declarations: the API server checks them when the Install is written, but the
/// App may change its declarations afterwards (nothing is rewritten; Plans are still
/// made from the inputs as they are, and the vendor fixes the Install).
pub(super) fn inputs_invalid(app: &App, install: &Install) -> Option<Condition> {
    let errors =
        outpost_api::input_value::validate_install_inputs(&app.spec, &install.spec.inputs, None);
    if errors.is_empty() {
        return None;
    }
    let causes: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Some(Condition {
        type_: INPUTS_INVALID.into(),
        status: "True".into(),
        reason: "AppDeclarationsChanged".into(),
        message: format!(
            "the inputs no longer hold against App {:?}: {}",
            install.spec.app,
            causes.join("; ")
        ),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: install.metadata.generation,
    })
}

/// The install's status with this controller's parts replaced (see [`set_status_with`]).
fn compose_status(
    install: &Install,
    phase: InstallPhase,
    components: Vec<ComponentState>,
    last_plan: Option<String>,
    ours: Vec<Condition>,
) -> InstallStatus {
    let previous = install.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = previous
        .conditions
        .iter()
        .filter(|c| {
            ![HELD, RELEASE_PINNED, COMPONENTS_HELD, INPUTS_INVALID].contains(&c.type_.as_str())
        })
        .cloned()
        .collect();
    for mut condition in ours {
        if let Some(before) = previous
            .conditions
            .iter()
            .find(|c| c.type_ == condition.type_ && c.message == condition.message)
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
        conditions.push(condition);
    }
    InstallStatus {
        phase: Some(phase),
        components,
        last_plan,
        conditions,
        observed_generation: install.metadata.generation,
        ..previous
    }
}

/// Writes `status` (see [`set_status_with`]).
async fn write_status(
    install: &Install,
    ctx: &Context,
    status: InstallStatus,
    fence: Option<String>,
) -> Result<(), InstallError> {
    if install.status.as_ref() == Some(&status) || ctx.written.already(install, &status) {
        return Ok(());
    }
    // A merge patch leaves out what serialises to nothing; say explicitly that emptied
    // fields are empty, or the stale values would stay.
    let mut body = serde_json::to_value(&status).unwrap_or_default();
    body["conditions"] = json!(status.conditions);
    body["components"] = json!(status.components);
    body["lastPlan"] = json!(status.last_plan);
    // The runner token hash is the apiserver's to write (minting rotates it): never send
    // back a possibly stale copy.
    if let Some(body) = body.as_object_mut() {
        body.remove("runnerTokenHash");
    }
    // The answer is read for its resourceVersion: decoded without managed fields.
    let Lean(written) = Api::<Lean<Install>>::namespaced(
        ctx.client.clone(),
        &install.namespace().unwrap_or_default(),
    )
    .patch_status(
        &install.name_any(),
        &PatchParams::default(),
        &Patch::Merge(match fence {
            Some(version) => {
                json!({ "metadata": {"resourceVersion": version}, "status": body })
            }
            None => json!({ "status": body }),
        }),
    )
    .await?;
    ctx.written.record(&written, status);
    Ok(())
}

/// The status this controller last wrote to each install and the resourceVersion that
/// write produced. The controller
/// works from watched copies of installs, which lag its own writes: a reconcile that
/// reaches the same status from a copy older than the write would otherwise write it
/// again.
#[derive(Default)]
pub(super) struct WrittenStatus(Mutex<HashMap<String, (InstallStatus, i64)>>);

impl WrittenStatus {
    /// Whether `status` is what was last written and `install` predates that write.
    pub(super) fn already(&self, install: &Install, status: &InstallStatus) -> bool {
        let (Some(uid), Some(seen)) = (install.uid(), revision_of(install)) else {
            return false;
        };
        self.0
            .lock()
            .expect("not poisoned")
            .get(&uid)
            .is_some_and(|(written, at)| written == status && seen < *at)
    }

    pub(super) fn record(&self, written: &Install, status: InstallStatus) {
        if let (Some(uid), Some(at)) = (written.uid(), revision_of(written)) {
            self.0
                .lock()
                .expect("not poisoned")
                .insert(uid, (status, at));
        }
    }

    pub(super) fn forget(&self, install: &Install) {
        if let Some(uid) = install.uid() {
            self.0.lock().expect("not poisoned").remove(&uid);
        }
    }
}

pub(super) fn revision_of(install: &Install) -> Option<i64> {
    install.resource_version()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::template::tests::{app, install};
    use serde_json::json;

    #[test]
    fn inputs_that_no_longer_hold_are_reported() {
        let app = app();
        let mut install = install();
        install.spec.inputs.remove("undeclared");
        assert_eq!(inputs_invalid(&app, &install), None);
        let mut changed = app.clone();
        changed.spec.inputs[1].type_ = outpost_api::InputType::String;
        let condition = inputs_invalid(&changed, &install).expect("node_count is a number");
        assert_eq!(condition.type_, INPUTS_INVALID);
        assert!(
            condition
                .message
                .contains("spec.inputs.node_count: Invalid value: \"5\": must be of type string"),
            "{}",
            condition.message
        );
        let mut fixed = install.clone();
        fixed.spec.inputs.insert("node_count".into(), json!("5"));
        assert_eq!(inputs_invalid(&changed, &fixed), None);
    }
}
