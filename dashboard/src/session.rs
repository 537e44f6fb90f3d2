//! Logging in: the login form posts an API token; the server checks it exactly as a
//! bearer token, keeps it in a server-side session, and gives the browser only the
//! session's id: 256 random bits in an `HttpOnly`, `Secure`, `SameSite=Strict` cookie
//! scoped to `/ui`, valid for [`SESSION_LIFETIME`] or until logout. Every page
//! authenticates the session's token with the same code as the API, and every form
//! that changes something carries a CSRF token derived from the session id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
use crate::Dashboard;
use outpost_api::plan_lifecycle::APPROVERS;
use outpost_apiserver::auth::{ADMINS, User};

/// The session cookie: the session id, base64url.
pub const COOKIE: &str = "outpost_session";

/// How long a session lasts from login (a working day).
pub const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);

/// Sessions one user may hold; logging in again drops their oldest.
const SESSIONS_PER_USER: usize = 32;

/// The dashboard's open sessions, by the SHA-256 of their id (the ids themselves are
/// only in the browsers' cookies).
#[derive(Default)]
pub struct Sessions {
    open: Mutex<HashMap<[u8; 32], Stored>>,
}

struct Stored {
    token: String,
    user: String,
    expires: Instant,
}

fn id_hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// Opens a session holding `token` of `user`; returns its id.
    fn open(&self, token: &str, user: &str) -> String {
        let id = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        let now = Instant::now();
        let mut open = self.open.lock().expect("sessions lock");
        open.retain(|_, s| s.expires > now);
        let mut theirs: Vec<_> = open
            .iter()
            .filter(|(_, s)| s.user == user)
            .map(|(k, s)| (s.expires, *k))
            .collect();
        if theirs.len() >= SESSIONS_PER_USER {
            theirs.sort();
            for (_, k) in &theirs[..=theirs.len() - SESSIONS_PER_USER] {
                open.remove(k);
            }
        }
        open.insert(
            id_hash(&id),
            Stored {
                token: token.to_owned(),
                user: user.to_owned(),
                expires: now + SESSION_LIFETIME,
            },
        );
        id
    }

    /// The token of the live session `id`.
    fn token(&self, id: &str) -> Option<String> {
        let key = id_hash(id);
        let mut open = self.open.lock().expect("sessions lock");
        match open.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.token.clone()),
            Some(_) => {
                open.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session `id`.
    fn close(&self, id: &str) {
        self.open
            .lock()
            .expect("sessions lock")
            .remove(&id_hash(id));
    }
}

/// A logged-in user of the dashboard.
pub struct Session {
    /// Who.
    pub user: User,
    /// The API token the session holds (requests made for the user carry it).
    pub token: String,
    /// The session's id (the cookie).
    id: String,
}

impl Session {
    /// Whether the user is in `outpost:admins` (the pages show admin actions as such;
    /// the API's authorizer still decides every request).
    pub fn is_admin(&self) -> bool {
        self.user.groups.iter().any(|g| g == ADMINS)
    }

    /// What the header calls the user: `admin`, `approver` (may decide on Plans) or
    /// `viewer`.
    pub fn role(&self) -> &'static str {
        match (self.is_admin(), self.may_decide()) {
            (true, _) => "admin",
            (false, true) => "approver",
            (false, false) => "viewer",
        }
    }

    /// Whether the user may approve and deny Plans (an approver or an admin, the groups
    /// the server's approval check admits; the API still decides every request).
    pub fn may_decide(&self) -> bool {
        self.is_admin() || self.user.groups.iter().any(|g| g == APPROVERS)
    }

    /// The CSRF token forms must echo: bound to the session's id, so another site
    /// cannot know it.
    pub fn csrf(&self) -> String {
        csrf_for(&self.id)
    }

    /// Whether `sent` is this session's CSRF token.
    pub fn csrf_matches(&self, sent: &str) -> bool {
        bool::from(self.csrf().as_bytes().ct_eq(sent.as_bytes()))
    }
}

fn csrf_for(session_id: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"outpost-ui-csrf\0");
    hash.update(session_id.as_bytes());
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

/// The session id from the request's cookies, if any.
fn cookie_session(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

impl FromRequestParts<Arc<Dashboard>> for Session {
    type Rejection = LoginRequired;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Dashboard>,
    ) -> Result<Self, Self::Rejection> {
        let next = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/ui".into());
        let Some((id, token)) = cookie_session(&parts.headers)
            .and_then(|id| Some((id.clone(), state.sessions.token(&id)?)))
        else {
            return Err(LoginRequired { next });
        };
        // The token again, so a token removed from the token file or a rotated runner
        // token ends the session at once.
        let user = state
            .api
            .authenticate(&token)
            .await
            .map_err(|_| LoginRequired { next })?;
        Ok(Session { user, token, id })
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

/// `POST /ui/login`: checks the token like a bearer token, opens a session and sets
/// its id as the cookie.
pub async fn login(State(state): State<Arc<Dashboard>>, Form(form): Form<LoginForm>) -> Response {
    let next = safe_next(form.next.as_deref()).to_owned();
    let token = form.token.trim();
    match state.api.authenticate(token).await {
        Ok(user) => {
            tracing::info!(user = %user.name, "dashboard login");
            let id = state.sessions.open(token, &user.name);
            let cookie = format!(
                "{COOKIE}={id}; Path=/ui; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
                SESSION_LIFETIME.as_secs()
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

/// `POST /ui/logout`: ends the session (its id no longer works) and drops the cookie.
pub async fn logout(State(state): State<Arc<Dashboard>>, headers: http::HeaderMap) -> Response {
    if let Some(id) = cookie_session(&headers) {
        state.sessions.close(&id);
    }
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
        let session = |id: &str| Session {
            user: User {
                name: "a".into(),
                uid: "1".into(),
                groups: vec![ADMINS.into()],
            },
            token: "t".into(),
            id: id.into(),
        };
        let alice = session("s1");
        assert!(alice.csrf_matches(&alice.csrf()));
        // The same token in another session has another CSRF token.
        assert!(!alice.csrf_matches(&session("s2").csrf()));
        assert!(!alice.csrf_matches(""));
    }

    #[test]
    fn sessions_are_opaque_revocable_and_bounded() {
        let sessions = Sessions::default();
        let id = sessions.open("secret-token", "alice");
        assert!(!id.contains("secret"));
        assert_eq!(URL_SAFE_NO_PAD.decode(&id).expect("base64url").len(), 32);
        assert_eq!(sessions.token(&id).as_deref(), Some("secret-token"));
        assert_ne!(sessions.open("secret-token", "alice"), id);
        sessions.close(&id);
        assert_eq!(sessions.token(&id), None);
        assert_eq!(sessions.token("made-up"), None);

        let ids: Vec<_> = (0..SESSIONS_PER_USER + 1)
            .map(|_| sessions.open("t", "bob"))
            .collect();
        let live = ids.iter().filter(|id| sessions.token(id).is_some()).count();
        assert_eq!(live, SESSIONS_PER_USER);
        assert!(
            sessions.token(ids.last().unwrap()).is_some(),
            "the newest stays"
        );
    }

    #[test]
    fn sessions_expire() {
        let sessions = Sessions::default();
        let id = sessions.open("t", "alice");
        sessions
            .open
            .lock()
            .unwrap()
            .values_mut()
            .for_each(|s| s.expires = Instant::now());
        assert_eq!(sessions.token(&id), None);
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
