//! The dashboard, served under `/ui` with the API's tokens: server-rendered pages
//! ([maud](https://maud.lambda.xyz)) and live fleet updates over server-sent events fed
//! by the watch caches. No JavaScript build chain: one inline stylesheet and a few
//! lines of inline script (an `EventSource`).
//!
//! It runs in the API server's process but uses only the server's public interface
//! ([`ApiHandle`]: read the watch caches, authenticate and authorize as the API does,
//! act through the API's own request handler); [`mount`] serves it beside the API.
//! The pages, sessions and decisions are described in `README.md` next to this crate;
//! where the dashboard sits in the design, in `docs/ARCHITECTURE.md`.

// The handlers return the API server's own error (`ApiError`, answered as the API
// answers it); it is large, but an error page is not a hot path.
#![allow(clippy::result_large_err)]

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
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{any, get, post};
use http::{HeaderValue, header};
use outpost_apiserver::server::{ApiHandle, ApiServer};

use fleet_feed::FleetFeed;
use session::Sessions;

/// The dashboard's pages may not be framed by any site (clickjacking an Approve button):
/// `frame-ancestors 'none'` for browsers with CSP, `X-Frame-Options: DENY` for older ones.
const CONTENT_SECURITY_POLICY: &str =
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

/// What every dashboard handler shares: the API server's public interface, the open
/// sessions and the live fleet of the `/ui/events` streams.
pub struct Dashboard {
    api: ApiHandle,
    sessions: Sessions,
    fleet_feed: Arc<FleetFeed>,
}

/// Serves the dashboard under `/ui` beside `server`'s API (with its metrics in
/// `/metrics`); every other path stays the API's.
pub fn mount(server: ApiServer) -> ApiServer {
    let dashboard = Arc::new(Dashboard {
        api: server.handle(),
        sessions: Sessions::default(),
        fleet_feed: Arc::default(),
    });
    server.add_metrics(dashboard.fleet_feed.clone());
    server.mount(router(dashboard))
}

/// Adds the framing and sniffing headers to every response under `/ui`, whichever
/// handler answered it.
async fn frame_guard(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
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
    response
}

/// Any other path under `/ui`: the API's handler answers it (its 404), with the
/// dashboard's headers.
async fn not_a_page(State(state): State<Arc<Dashboard>>, request: Request) -> Response {
    state.api.call(request).await
}

/// The dashboard's routes, every one under `/ui`.
fn router(dashboard: Arc<Dashboard>) -> Router {
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
        .route("/ui/{*rest}", any(not_a_page))
        .layer(axum::middleware::from_fn(frame_guard))
        .with_state(dashboard)
}
