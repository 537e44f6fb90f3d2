//! The dashboard, served under `/ui` with the API's tokens: server-rendered pages
//! ([maud](https://maud.lambda.xyz)) and live fleet updates over server-sent events fed
//! by the watch caches. No JavaScript build chain: one inline stylesheet and a few
//! lines of inline script (an `EventSource`). See `README.md` next to this file.

mod cells;
mod data;
mod decide;
mod events;
mod fleet_feed;
mod pages;
mod session;
mod trigger;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use http::{HeaderValue, header};

use super::ServerState;
pub(super) use fleet_feed::FleetFeed;
pub(super) use session::Sessions;

/// The dashboard's pages may not be framed by any site (clickjacking an Approve button):
/// `frame-ancestors 'none'` for browsers with CSP, `X-Frame-Options: DENY` for older ones.
const CONTENT_SECURITY_POLICY: &str =
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

/// Adds the framing and sniffing headers to every response under `/ui`, whichever
/// handler (or the 404 fallback) answered it.
pub(super) async fn frame_guard(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let ui = path == "/ui" || path.starts_with("/ui/");
    let mut response = next.run(request).await;
    if ui {
        let headers = response.headers_mut();
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
    response
}

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
