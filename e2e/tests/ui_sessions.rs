//! The dashboard's sessions over plain HTTPS requests (no browser): logging in sets a
//! cookie holding an opaque, expiring session id — not the API token — that opens the
//! pages; logging out revokes it, so the same id no longer opens them; and every `/ui`
//! response forbids framing (`X-Frame-Options: DENY`, CSP `frame-ancestors 'none'`).

use outpost_testing::{Backend, ControlPlane, Reply};

/// The `outpost_session=...` pair of a `Set-Cookie` header, and the whole header.
fn session_cookie(reply: &Reply) -> (String, String) {
    let set = reply
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("outpost_session="))
        .unwrap_or_else(|| panic!("no session cookie in {:?}", reply.headers))
        .to_owned();
    let pair = set.split(';').next().expect("a cookie pair").to_owned();
    (pair, set)
}

fn assert_not_framable(reply: &Reply, what: &str) {
    assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{what}");
    let csp = reply.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("frame-ancestors 'none'"),
        "{what}: Content-Security-Policy {csp:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_opaque_and_revoked_at_logout() {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let form = [("content-type", "application/x-www-form-urlencoded")];

    let page = cp.raw(None, "GET", "/ui/login", &[], "").await;
    assert_eq!(page.status, 200);
    assert_not_framable(&page, "the login form");
    let anonymous = cp.raw(None, "GET", "/ui", &[], "").await;
    assert_eq!(anonymous.status, 303, "no session: to the login form");
    assert_not_framable(&anonymous, "a redirect to the login form");
    let missing = cp.raw(None, "GET", "/ui/no-such-page", &[], "").await;
    assert_not_framable(&missing, "a page that does not exist");

    let login = cp
        .raw(
            None,
            "POST",
            "/ui/login",
            &form,
            format!("token={}&next=%2Fui", cp.admin_token),
        )
        .await;
    assert_eq!(login.status, 303, "{}", login.text);
    assert_not_framable(&login, "the login answer");
    let (cookie, set_cookie) = session_cookie(&login);
    let id = cookie.trim_start_matches("outpost_session=");
    assert!(
        !set_cookie.contains(&cp.admin_token) && !id.is_empty(),
        "the cookie does not carry the API token: {set_cookie}"
    );
    assert!(
        id.len() >= 22,
        "the session id carries at least 128 bits: {id:?}"
    );
    for attribute in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Path=/ui",
        "Max-Age=",
    ] {
        assert!(
            set_cookie.contains(attribute),
            "{attribute} in {set_cookie}"
        );
    }
    // Two logins with one token are two sessions.
    let again = cp
        .raw(
            None,
            "POST",
            "/ui/login",
            &form,
            format!("token={}", cp.admin_token),
        )
        .await;
    assert_ne!(session_cookie(&again).0, cookie, "every login a new id");

    let fleet = cp.raw(None, "GET", "/ui", &[("cookie", &cookie)], "").await;
    assert_eq!(fleet.status, 200, "the session opens the fleet page");
    assert_not_framable(&fleet, "the fleet page");
    // The raw token in the cookie, as the dashboard used to set it, is no session.
    let token_cookie = format!("outpost_session={}", cp.admin_token);
    let forged = cp
        .raw(None, "GET", "/ui", &[("cookie", &token_cookie)], "")
        .await;
    assert_eq!(forged.status, 303, "an API token is not a session id");

    let logout = cp
        .raw(None, "POST", "/ui/logout", &[("cookie", &cookie)], "")
        .await;
    assert_eq!(logout.status, 303);
    let after = cp.raw(None, "GET", "/ui", &[("cookie", &cookie)], "").await;
    assert_eq!(
        after.status, 303,
        "the session id no longer opens a page after logout"
    );
    assert!(
        after
            .header("location")
            .unwrap_or_default()
            .starts_with("/ui/login"),
        "to the login form: {:?}",
        after.header("location")
    );
    let events = cp
        .raw(None, "GET", "/ui/events", &[("cookie", &cookie)], "")
        .await;
    assert_eq!(events.status, 303, "nor the event stream");
    // The other session lives on.
    let (other, _) = session_cookie(&again);
    let fleet = cp.raw(None, "GET", "/ui", &[("cookie", &other)], "").await;
    assert_eq!(fleet.status, 200, "logout ends only its own session");
}
