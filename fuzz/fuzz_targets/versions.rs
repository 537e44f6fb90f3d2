//! `resourceVersion` values (query parameter and `metadata.resourceVersion`) and
//! `continue` tokens through the server's parsers.
//!
//! Properties: a resourceVersion the server accepts is written as it writes them
//! (decimal digits, no sign: a revision it could have issued); a continue token that decodes belongs to the listing it was sent
//! to, at a positive revision, and encodes back to a token that decodes to the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_apiserver::object_meta::sent_resource_version;
use outpost_apiserver::request::parse_resource_version;
use outpost_apiserver::status::Subject;
use outpost_apiserver::storage::ContinueToken;
use serde_json::json;

const PREFIX: &str = "/registry/outpost.dev/plans/acme/";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let issued = |revision: i64| revision >= 0 && text.bytes().all(|b| b.is_ascii_digit());
    if let Ok(revision) = parse_resource_version(text) {
        assert!(
            issued(revision),
            "resourceVersion {text:?} accepted as {revision}"
        );
    }
    let object = json!({"metadata": {"name": "web-1", "resourceVersion": text}});
    let subject = Subject {
        group: "outpost.dev".into(),
        resource: "plans".into(),
        kind: "Plan".into(),
        name: "web-1".into(),
    };
    if let Ok(Some(revision)) = sent_resource_version(&object, &subject) {
        assert!(
            issued(revision),
            "metadata.resourceVersion {text:?} accepted as {revision}"
        );
    }
    if let Ok(token) = ContinueToken::decode(text, PREFIX) {
        assert!(token.revision > 0);
        assert!(token.start.starts_with(PREFIX));
        let again = ContinueToken::decode(&token.encode(), PREFIX).expect("a token re-decodes");
        assert_eq!(again, token);
    }
});
