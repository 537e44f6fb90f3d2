//! The dashboard, served under `/ui` with the API's tokens: server-rendered pages
//! ([maud](https://maud.lambda.xyz)) and live fleet updates over server-sent events fed
//! by the watch caches. No JavaScript build chain: one inline stylesheet and a few
//! lines of inline script (an `EventSource`). See `README.md` next to this file.

mod cells;
mod data;
mod decide;
mod events;
mod pages;
mod session;
mod trigger;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::ServerState;

/// The dashboard's routes.
pub(super) fn routes() -> Router<Arc<ServerState>> {
    Router::new()
        .route("/ui", get(pages::fleet::page))
        .route("/ui/", get(pages::fleet::page))
        .route("/ui/login", get(session::login_form).post(session::login))
        .route("/ui/logout", post(session::logout))
        .route("/ui/events", get(events::fleet_events))
        .route("/ui/policies", get(pages::policies::page))
        .route("/ui/rollouts", get(pages::rollouts::list_page))
        .route(
            "/ui/rollouts/{namespace}/{name}",
            get(pages::rollouts::page),
        )
        .route("/ui/installs/{namespace}/{name}", get(pages::install::page))
        .route(
            "/ui/installs/{namespace}/{name}/trigger",
            post(trigger::trigger),
        )
        .route("/ui/plans/{namespace}/{name}", get(pages::plan::page))
        .route(
            "/ui/plans/{namespace}/{name}/approve",
            post(decide::approve),
        )
        .route("/ui/plans/{namespace}/{name}/deny", post(decide::deny))
}
