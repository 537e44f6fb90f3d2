//! The page shell (navigation, stylesheet) and small pieces every page uses.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use outpost_apiserver::status::ApiError;

use crate::session::Session;

/// The one stylesheet.
const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f4f6f9}
a{color:#1f5fbf;text-decoration:none}a:hover{text-decoration:underline}
header{display:flex;align-items:center;gap:24px;padding:10px 24px;background:#16202e;color:#fff}
header .brand{font-weight:700;font-size:16px;color:#fff}
header nav a{color:#cfd8e6;margin-right:16px}header nav a.on{color:#fff;font-weight:600}
header .who{margin-left:auto;display:flex;gap:10px;align-items:center;color:#cfd8e6}
header .who form{margin:0}
main{padding:20px 24px;max-width:1400px}
h1{font-size:20px;margin:0 0 14px}h2{font-size:16px;margin:24px 0 8px}
.card{background:#fff;border:1px solid #dde3ec;border-radius:8px;padding:14px 16px;margin-bottom:16px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e6eaf0;vertical-align:top}
th{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#5b6678;background:#f8f9fb}
td.num{text-align:right}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#0f1722;color:#e6edf6;padding:10px 12px;border-radius:6px;overflow:auto;max-height:420px;margin:0}
.kv{margin:0;display:grid;grid-template-columns:max-content 1fr;gap:4px 18px}.kv dt{color:#5b6678}.kv dd{margin:0}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;background:#e6eaf0;color:#334}
.ok{background:#dff3e4;color:#17603a}.bad{background:#fbe0e0;color:#8a1c1c}.warn{background:#fdf0d5;color:#7a5200}.info{background:#dde9fb;color:#1f4f99}
.cell{display:block;padding:6px 8px;border-radius:6px;font-size:12px;font-weight:600;white-space:nowrap;text-align:center}
.s-in-sync{background:#cdeed6;color:#135c31}.s-drifted{background:#fde2b8;color:#7a4300}
.s-deploying{background:#d3e3fb;color:#1f4f99}.s-failed{background:#f8c9c9;color:#8a1c1c}
.s-denied{background:#e8d5f5;color:#5b1f83}.s-awaiting-approval{background:#fff1a8;color:#6a5600}
.s-runner-offline{background:#d6d9de;color:#383f4a}.s-pending{background:#eef0f3;color:#6b7585}
.legend{display:flex;flex-wrap:wrap;gap:8px;margin:0 0 12px}.legend .cell{display:inline-block}
.legend .cell b{margin-left:6px}
.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:end;margin-bottom:12px}
.filters label{display:flex;flex-direction:column;font-size:12px;color:#5b6678;gap:2px}
input,select,button{font:inherit;padding:5px 8px;border:1px solid #c5cdd9;border-radius:5px;background:#fff}
button{cursor:pointer;background:#1f5fbf;color:#fff;border-color:#1f5fbf;font-weight:600}
button.secondary{background:#fff;color:#1d2330;border-color:#c5cdd9}button.danger{background:#b42318;border-color:#b42318}
.diff td.desired{background:#fff5f5}.diff td.live{background:#f3fbf5}
.diff td.desired,.diff td.live{width:28%}.diff td{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
.muted{color:#6b7585}.notice{display:block;padding:8px 10px;border-radius:6px;margin:8px 0}.error{border-left:4px solid #b42318}
.live-dot{display:inline-block;width:8px;height:8px;border-radius:50%;background:#aab;margin-right:6px}
body[data-live=connected] .live-dot{background:#2fa35a}
.actions{display:flex;gap:10px;align-items:end}.actions form{display:flex;gap:8px;align-items:end;margin:0}
.login{max-width:420px;margin:80px auto}.login input{width:100%}
.bar{display:inline-block;width:90px;height:8px;border-radius:4px;background:#e6eaf0;overflow:hidden;vertical-align:middle}
.bar span{display:block;height:100%;background:#2fa35a}
.wave table{margin-top:6px;table-layout:fixed}.wave th:nth-child(1){width:22%}.wave th:nth-child(2){width:14%}.wave th:nth-child(3){width:12%}
"#;

/// A whole page: navigation, who is logged in, `body`.
pub fn page(title: &str, current: &str, session: Option<&Session>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Outpost" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a.brand href="/ui" { "Outpost" }
                    @if session.is_some() {
                        nav {
                            a class=@if current == "fleet" { "on" } href="/ui" { "Fleet" }
                            a class=@if current == "rollouts" { "on" } href="/ui/rollouts" { "Rollouts" }
                            a class=@if current == "policies" { "on" } href="/ui/policies" { "Policies" }
                        }
                    }
                    @if let Some(session) = session {
                        div.who {
                            span #who { (session.user.name) " · " (session.role()) }
                            form method="post" action="/ui/logout" {
                                button.secondary type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page for an error: the status code, and the API's message.
pub fn error_page(session: Option<&Session>, status: StatusCode, message: &str) -> Response {
    let title = match status {
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::CONFLICT => "Conflict",
        StatusCode::BAD_REQUEST => "Bad request",
        _ => "Error",
    };
    let body = html! {
        div.card.error #error data-status=(status.as_u16()) {
            h1 { (status.as_u16()) " " (title) }
            p { (message) }
            p { a href="/ui" { "Back to the fleet" } }
        }
    };
    (status, page(title, "", session, body)).into_response()
}

/// The page of the object `namespace/name` of `plural` (`installs`): `rendered` in the
/// shell, titled `title` under the navigation entry `current`; 404 when it was not
/// found (`Ok(None)`), the error page for an API error.
pub fn object_page(
    session: &Session,
    (title, current): (&str, &str),
    (plural, namespace, name): (&str, &str, &str),
    rendered: Result<Option<Markup>, ApiError>,
) -> Response {
    match rendered {
        Ok(Some(body)) => page(title, current, Some(session), body).into_response(),
        Ok(None) => error_page(
            Some(session),
            StatusCode::NOT_FOUND,
            &format!("{plural}.outpost.dev {name:?} not found in namespace {namespace:?}"),
        ),
        Err(err) => api_error(Some(session), &err),
    }
}

/// The error page for an API error.
pub fn api_error(session: Option<&Session>, err: &ApiError) -> Response {
    let status = err
        .status()
        .get("code")
        .and_then(serde_json::Value::as_u64)
        .and_then(|c| StatusCode::from_u16(c as u16).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error_page(session, status, &err.to_string())
}

/// A time as `2026-11-23 16:45:32 UTC (3m ago)`.
pub fn when(time: &Time, now: &Time) -> String {
    let at = time.0.strftime("%Y-%m-%d %H:%M:%S UTC");
    format!("{at} ({} ago)", age(time, now))
}

/// How long ago, like kubectl's AGE column.
pub fn age(time: &Time, now: &Time) -> String {
    let secs = (now.0.as_second() - time.0.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A JSON value as pretty text.
pub fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// A JSON value as YAML (multi-line strings, such as manifests, as block scalars),
/// or pretty JSON if it cannot be written as YAML.
pub fn yaml(value: &serde_json::Value) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|_| pretty(value))
}

/// A release's content hash, short: its first 12 hex digits.
pub fn short_hash(hash: &str) -> &str {
    let hex = hash.strip_prefix("sha256:").unwrap_or(hash);
    &hex[..hex.len().min(12)]
}

/// A JSON value compactly, strings without quotes.
pub fn short(value: Option<&serde_json::Value>) -> String {
    match value {
        None => "—".into(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}
