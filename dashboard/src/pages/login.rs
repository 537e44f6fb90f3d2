//! The login form: an API token (the same as `kubectl`'s bearer token).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use maud::html;

use super::layout;

/// The login page, with an error when a token was refused.
pub fn page_with(next: &str, error: Option<&str>) -> maud::Markup {
    let body = html! {
        div.login {
            div.card {
                h1 { "Log in to Outpost" }
                p.muted { "Paste an API token: admins may approve and deny Plans, viewers see everything." }
                @if let Some(error) = error {
                    p.notice.bad #login-error { (error) }
                }
                form method="post" action="/ui/login" {
                    input type="hidden" name="next" value=(next);
                    p {
                        label for="token" { "Token" }
                        input #token type="password" name="token" autocomplete="off" autofocus;
                    }
                    button #login type="submit" { "Log in" }
                }
            }
        }
    };
    layout::page("Log in", "login", None, body)
}

/// The login page as a response.
pub fn page(next: &str, error: Option<&str>, status: StatusCode) -> Response {
    (status, page_with(next, error)).into_response()
}
