use super::*;
use outpost_api::audit_chain::Trust;
use serde_json::json;

/// A log of `n` events in a temp dir, and the keys to verify it.
fn log(n: usize) -> (tempfile::TempDir, Vec<AuditEventSpec>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(Identity::load_or_create(dir.path()).unwrap());
    let keys = vec![identity.public_key()];
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", identity).unwrap();
    for i in 0..n {
        let subject = Subject {
            plan: Some(format!("plan-{i}")),
            ..Subject::default()
        };
        audit
            .append(AuditEventType::Apply, subject, Some(json!({"i": i})))
            .unwrap();
    }
    let events = read_local(dir.path()).unwrap();
    (dir, events, keys)
}

/// [`verify`] trusting `keys`, without a checkpoint.
fn verify(
    install: &str,
    events: &[AuditEventSpec],
    source: Source<'_>,
    keys: &[String],
) -> Result<usize, Vec<Failure>> {
    let trust = Trust {
        keys,
        checkpoint: None,
    };
    super::verify(install, events, source, &trust).map(|v| {
        assert_eq!(v.flags, [], "no key-reset in these logs");
        v.events
    })
}

fn failing<T: std::fmt::Debug>(result: Result<T, Vec<Failure>>) -> Vec<String> {
    result
        .expect_err("verification should fail")
        .into_iter()
        .map(|f| f.to_string())
        .collect()
}

#[test]
fn an_untouched_log_verifies_and_survives_a_reopen() {
    let (dir, events, keys) = log(5);
    assert_eq!(verify("acme", &events, Source::Local, &keys), Ok(5));
    // Reopening continues the chain.
    let identity = Arc::new(Identity::load_or_create(dir.path()).unwrap());
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", identity).unwrap();
    let sixth = audit
        .append(AuditEventType::Register, Subject::default(), None)
        .unwrap();
    assert_eq!(sixth.sequence, 5);
    assert_eq!(
        sixth.previous_hash.as_deref(),
        Some(events[4].hash.as_str())
    );
    let events = read_local(dir.path()).unwrap();
    assert_eq!(verify("acme", &events, Source::Local, &keys), Ok(6));
}

#[test]
fn an_edited_event_is_named() {
    let (_dir, mut events, keys) = log(5);
    events[2].details = Some(json!({"i": 99}));
    let failures = failing(verify("acme", &events, Source::Local, &keys));
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].starts_with("event acme-2: content does not match its hash"));
}

#[test]
fn an_edit_with_a_recomputed_hash_breaks_the_signature_and_the_chain() {
    let (_dir, mut events, keys) = log(5);
    events[2].details = Some(json!({"i": 99}));
    events[2].hash = event_hash(&events[2]);
    let failures = failing(verify("acme", &events, Source::Local, &keys));
    assert!(
        failures[0].starts_with("event acme-2: signature does not verify"),
        "{failures:?}"
    );
    assert!(
        failures[1].starts_with("event acme-3: previousHash does not match the hash of acme-2"),
        "{failures:?}"
    );
}

#[test]
fn a_deleted_event_is_a_named_gap() {
    let (_dir, mut events, keys) = log(5);
    events.remove(3);
    let failures = failing(verify("acme", &events, Source::Local, &keys));
    assert!(
        failures.contains(&"event acme-4: gap before it: acme-3 missing".to_owned()),
        "{failures:?}"
    );
    // The same deletion among API objects.
    let (_dir, mut events, keys) = log(5);
    events.remove(1);
    let names: Vec<String> = events
        .iter()
        .map(|e| format!("acme-{}", e.sequence))
        .collect();
    let failures = failing(verify("acme", &events, Source::Objects(&names), &keys));
    assert_eq!(
        failures,
        ["event acme-2: gap before it: acme-1 missing".to_owned()]
    );
}

#[test]
fn reordered_events_are_named() {
    let (_dir, mut events, keys) = log(5);
    events.swap(1, 3);
    let failures = failing(verify("acme", &events, Source::Local, &keys));
    assert!(
        failures[0].starts_with("event acme-3: out of order: found at position 1"),
        "{failures:?}"
    );
    // Objects whose contents were swapped.
    let names: Vec<String> = (0..5).map(|i| format!("acme-{i}")).collect();
    let failures = failing(verify("acme", &events, Source::Objects(&names), &keys));
    assert_eq!(
        failures[0],
        "event acme-1: out of order: object acme-1 holds sequence 3"
    );
}

#[test]
fn another_key_does_not_verify() {
    let (_dir, events, _) = log(2);
    let other = tempfile::tempdir().unwrap();
    let stranger = Identity::load_or_create(other.path()).unwrap();
    let keys = vec![stranger.public_key()];
    let failures = failing(verify("acme", &events, Source::Local, &keys));
    assert_eq!(failures.len(), 2);
    assert!(failures[0].contains("signature does not verify"));
}

#[path = "audit_anchor_tests.rs"]
mod anchor;
