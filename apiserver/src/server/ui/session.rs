//! Logging in: the login form posts an API token; the server checks it exactly as a
//! bearer token and keeps it in an `HttpOnly`, `SameSite=Strict` cookie scoped to
//! `/ui`. Every page authenticates the cookie with the same code as the API, and every
//! form that changes something carries a CSRF token derived from the session.

use std::sync::Arc;

use axum::Form;
use axum::extract::{FromRequestParts, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::pages::login;
use crate::auth::{ADMINS, User};
use crate::server::ServerState;
use crate::server::dispatch::authenticate_token;

/// The session cookie: the API token, base64url.
pub const COOKIE: &str = "outpost_session";

/// A logged-in user of the dashboard.
pub struct Session {
    /// Who.
    pub user: User,
    /// The API token the session holds (requests made for the user carry it).
    pub token: String,
}

impl Session {
    /// Whether the user is in `outpost:admins` (the pages show admin actions as such;
    /// the API's authorizer still decides every request).
    pub fn is_admin(&self) -> bool {
        self.user.groups.iter().any(|g| g == ADMINS)
    }

    /// Whether the user may approve and deny Plans (an approver or an admin).
    pub fn may_decide(&self) -> bool {
        crate::server::approval::may_decide(&self.user)
    }

    /// The CSRF token forms must echo: bound to the session's token, so another site
    /// cannot know it.
    pub fn csrf(&self) -> String {
        csrf_for(&self.token)
    }

    /// Whether `sent` is this session's CSRF token.
    pub fn csrf_matches(&self, sent: &str) -> bool {
        bool::from(self.csrf().as_bytes().ct_eq(sent.as_bytes()))
    }
}

fn csrf_for(token: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"outpost-ui-csrf\0");
    hash.update(token.as_bytes());
    URL_SAFE_NO_PAD.encode(hash.finalize())
}

/// Why there is no session: the browser is sent to the login form.
pub struct LoginRequired {
    next: String,
}

impl IntoResponse for LoginRequired {
    fn into_response(self) -> Response {
        let to = format!("/ui/login?next={}", encode_query(&self.next));
        Redirect::to(&to).into_response()
    }
}

fn encode_query(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The session token from the request's cookies, if any.
fn cookie_token(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| URL_SAFE_NO_PAD.decode(value).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

impl FromRequestParts<Arc<ServerState>> for Session {
    type Rejection = LoginRequired;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ServerState>,
    ) -> Result<Self, Self::Rejection> {
        let next = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/ui".into());
        let token = cookie_token(parts).ok_or(LoginRequired { next: next.clone() })?;
        let user = authenticate_token(state, &token)
            .await
            .map_err(|_| LoginRequired { next })?;
        Ok(Session { user, token })
    }
}

/// `?next=` of the login form: where to go once logged in.
#[derive(Deserialize)]
pub struct Next {
    next: Option<String>,
}

/// Only paths of the dashboard itself, so the form cannot be used to redirect elsewhere.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with("/ui") && !n.starts_with("//") => n,
        _ => "/ui",
    }
}

/// `GET /ui/login`.
pub async fn login_form(Query(next): Query<Next>) -> Response {
    login::page(safe_next(next.next.as_deref()), None, StatusCode::OK)
}

/// The login form's fields.
#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// `POST /ui/login`: checks the token like a bearer token and sets the session cookie.
pub async fn login(State(state): State<Arc<ServerState>>, Form(form): Form<LoginForm>) -> Response {
    let next = safe_next(form.next.as_deref()).to_owned();
    let token = form.token.trim();
    match authenticate_token(&state, token).await {
        Ok(user) => {
            tracing::info!(user = %user.name, "dashboard login");
            let cookie = format!(
                "{COOKIE}={}; Path=/ui; HttpOnly; Secure; SameSite=Strict",
                URL_SAFE_NO_PAD.encode(token)
            );
            let mut response = Redirect::to(&next).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(_) => login::page(
            &next,
            Some(
                "that token is not valid: use one from the server's token file (--tokens), or a runner token",
            ),
            StatusCode::UNAUTHORIZED,
        ),
    }
}

/// `POST /ui/logout`: drops the cookie.
pub async fn logout() -> Response {
    let mut response = Redirect::to("/ui/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "outpost_session=; Path=/ui; HttpOnly; Secure; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_are_per_session() {
        let session = |token: &str| Session {
            user: User {
                name: "a".into(),
                uid: "1".into(),
                groups: vec![ADMINS.into()],
            },
            token: token.into(),
        };
        let alice = session("t1");
        assert!(alice.csrf_matches(&alice.csrf()));
        assert!(!alice.csrf_matches(&session("t2").csrf()));
        assert!(!alice.csrf_matches(""));
    }

    #[test]
    fn login_redirects_stay_on_the_dashboard() {
        assert_eq!(
            safe_next(Some("/ui/plans/default/p")),
            "/ui/plans/default/p"
        );
        assert_eq!(safe_next(Some("https://evil.example/")), "/ui");
        assert_eq!(safe_next(Some("//evil.example/ui")), "/ui");
        assert_eq!(safe_next(None), "/ui");
        assert_eq!(encode_query("/ui?a=b c"), "/ui%3Fa%3Db%20c");
    }
}
