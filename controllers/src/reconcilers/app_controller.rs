//! The App controller: validates an App with its Components, Actions and
//! OperationRoles as a whole and writes `Ready`/`Invalid` conditions and the release
//! (a content hash of the whole app) into its status.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_client::api::{Api, ListParams, Patch, PatchParams};
use kube_client::runtime::controller::{Action, Controller};
use kube_client::runtime::reflector::ObjectRef;
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Action as AppAction, App, AppStatus, Component, OperationRole};

use crate::logic::app_check::{check_app, release_hash};
use crate::logic::app_objects::AppObjects;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The API server refused or failed a call.
    #[error("api call failed")]
    Api(#[from] kube_client::Error),
}

struct Context {
    client: Client,
}

/// Runs the App controller until the stream ends.
pub async fn run(client: Client) {
    let ctx = Arc::new(Context {
        client: client.clone(),
    });
    let to_app =
        |app: String, namespace: Option<String>| Some(ObjectRef::new(&app).within(&namespace?));
    Controller::new(Api::<App>::all(client.clone()), crate::watch_config())
        .watches(
            Api::<Component>::all(client.clone()),
            crate::watch_config(),
            move |c| to_app(c.spec.app.clone(), c.namespace()),
        )
        .watches(
            Api::<AppAction>::all(client.clone()),
            crate::watch_config(),
            move |a| to_app(a.spec.app.clone(), a.namespace()),
        )
        .watches(
            Api::<OperationRole>::all(client),
            crate::watch_config(),
            move |r| to_app(r.spec.app.clone(), r.namespace()),
        )
        .with_config(crate::controller_config())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "app reconcile");
            }
        })
        .await;
}

async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Action, AppError> {
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let of_app = ListParams::default().fields(&format!("spec.app={name}"));
    let components = Api::<Component>::namespaced(ctx.client.clone(), &namespace)
        .list(&of_app)
        .await?
        .items;
    let actions = Api::<AppAction>::namespaced(ctx.client.clone(), &namespace)
        .list(&of_app)
        .await?
        .items;
    let roles = Api::<OperationRole>::namespaced(ctx.client.clone(), &namespace)
        .list(&of_app)
        .await?
        .items;

    let problems: Vec<String> = check_app(&AppObjects {
        app: &app,
        components: &components,
        actions: &actions,
        operation_roles: &roles,
    })
    .iter()
    .map(ToString::to_string)
    .collect();
    let release = release_hash(&app, &components, &actions, &roles);
    let previous = app.status.clone().unwrap_or_default();
    let ready = problems.is_empty();
    let message = if ready {
        "the app, its components, actions and operation roles are consistent".to_owned()
    } else {
        problems.join("; ")
    };
    let conditions = vec![
        condition(
            &previous,
            "Ready",
            ready,
            if ready { "Valid" } else { "Invalid" },
            &message,
            &app,
        ),
        condition(
            &previous,
            "Invalid",
            !ready,
            if ready { "Valid" } else { "Invalid" },
            &message,
            &app,
        ),
    ];
    let status = AppStatus {
        conditions,
        release: Some(release),
        observed_generation: app.metadata.generation,
    };
    if app.status.as_ref() != Some(&status) {
        Api::<App>::namespaced(ctx.client.clone(), &namespace)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": status})),
            )
            .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// A condition, keeping its last transition time when its status did not change.
fn condition(
    previous: &AppStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    app: &App,
) -> Condition {
    let status = if value { "True" } else { "False" };
    let unchanged = previous
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status);
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: app.metadata.generation,
        last_transition_time: unchanged
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| Time(jiff::Timestamp::now())),
    }
}

fn error_policy(_: Arc<App>, err: &AppError, _: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "app reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}
