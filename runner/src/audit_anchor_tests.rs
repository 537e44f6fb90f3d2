//! Verification against the customer's anchor: checkpoints, key rotations and resets.

use super::*;
use crate::anchor::sign_checkpoint;
use outpost_api::audit_anchor::Checkpoint;
use outpost_api::audit_chain::Verified;

fn names(events: &[AuditEventSpec]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("acme-{}", e.sequence))
        .collect()
}

fn check(
    events: &[AuditEventSpec],
    keys: &[String],
    checkpoint: Option<&Checkpoint>,
) -> Result<Verified, Vec<Failure>> {
    let names = names(events);
    let trust = Trust { keys, checkpoint };
    super::super::verify("acme", events, Source::Objects(&names), &trust)
}

/// A runner that lost its state dir: a new key continuing after `head` with a key-reset
/// that names `checkpoint`, then `more` events.
fn reset_after(
    head: &AuditEventSpec,
    checkpoint: Option<&Checkpoint>,
    more: usize,
) -> (tempfile::TempDir, Vec<AuditEventSpec>, String) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(Identity::load_or_create(dir.path()).unwrap());
    let key = identity.public_key();
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", identity).unwrap();
    audit.continue_after(head);
    let details = json!({
        "publicKey": key,
        "continuesFrom": {"sequence": head.sequence, "hash": head.hash},
        "checkpoint": checkpoint.map(|c| json!({"sequence": c.sequence, "hash": c.hash})),
    });
    audit
        .append(AuditEventType::KeyReset, Subject::default(), Some(details))
        .unwrap();
    for _ in 0..more {
        audit
            .append(AuditEventType::Claim, Subject::default(), None)
            .unwrap();
    }
    let events = read_local(dir.path()).unwrap();
    (dir, events, key)
}

#[test]
fn a_cut_tail_is_named_against_the_checkpoint() {
    let (dir, mut events, keys) = log(10);
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let checkpoint = sign_checkpoint(&identity, &events[9]);
    assert_eq!(check(&events, &keys, Some(&checkpoint)).unwrap().events, 10);
    events.truncate(7);
    // Without the checkpoint the shortened log looks whole.
    assert_eq!(check(&events, &keys, None).unwrap().events, 7);
    let failures = failing(check(&events, &keys, Some(&checkpoint)));
    assert_eq!(
        failures,
        [format!(
            "events acme-7..acme-9: missing: the log ends at acme-6 but the runner's checkpoint at {} says acme-9: cut from the tail (or not shipped yet)",
            checkpoint.timestamp
        )]
    );
    events.clear();
    let failures = failing(check(&events, &keys, Some(&checkpoint)));
    assert!(
        failures[0].starts_with("events acme-0..acme-9: missing: the log is empty"),
        "{failures:?}"
    );
}

#[test]
fn a_checkpoint_by_another_key_or_of_another_event_fails() {
    let (dir, events, keys) = log(4);
    let stranger = tempfile::tempdir().unwrap();
    let stranger = Identity::load_or_create(stranger.path()).unwrap();
    let forged = sign_checkpoint(&stranger, &events[3]);
    let failures = failing(check(&events, &keys, Some(&forged)));
    assert!(
        failures[0].starts_with("event checkpoint: the checkpoint is signed by key"),
        "{failures:?}"
    );
    // A checkpoint edited after signing.
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let mut edited = sign_checkpoint(&identity, &events[3]);
    edited.sequence = 2;
    let failures = failing(check(&events, &keys, Some(&edited)));
    assert!(
        failures[0].contains("signature does not verify"),
        "{failures:?}"
    );
    // A signed checkpoint whose event was replaced in the log.
    let mut replaced = events[1].clone();
    replaced.hash = events[2].hash.clone();
    let checkpoint = sign_checkpoint(&identity, &replaced);
    let failures = failing(check(&events, &keys, Some(&checkpoint)));
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("event acme-1: is not the event the runner's checkpoint")),
        "{failures:?}"
    );
}

#[test]
fn a_key_reset_verifies_flagged_when_the_customer_holds_the_new_key() {
    let (dir, mut events, mut keys) = log(5);
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let checkpoint = sign_checkpoint(&identity, &events[4]);
    let (_new, after, new_key) = reset_after(&events[4], Some(&checkpoint), 2);
    assert_eq!(after[0].sequence, 5);
    // The new runner's own copy starts at its reset and verifies on its own.
    let trust = Trust {
        keys: std::slice::from_ref(&new_key),
        checkpoint: None,
    };
    let local = super::super::verify("acme", &after, Source::Local, &trust).unwrap();
    assert_eq!((local.events, local.flags.len()), (3, 1));
    events.extend(after);
    // The customer's anchor holds only the old key: the new key's events fail.
    let failures = failing(check(&events, &keys, Some(&checkpoint)));
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(failures[0].starts_with("event acme-5: signature does not verify"));
    keys.push(new_key);
    let verified = check(&events, &keys, Some(&checkpoint)).unwrap();
    assert_eq!(verified.events, 8);
    assert_eq!(verified.flags.len(), 1, "{verified:?}");
    let flag = verified.flags[0].to_string();
    assert!(
        flag.starts_with("event acme-5: key-reset: runner \"acme\" lost its state dir"),
        "{flag}"
    );
}

#[test]
fn a_key_reset_that_continues_before_the_checkpoint_names_the_cut() {
    let (dir, mut events, mut keys) = log(10);
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let checkpoint = sign_checkpoint(&identity, &events[9]);
    events.truncate(7);
    let (_new, after, new_key) = reset_after(&events[6], Some(&checkpoint), 0);
    events.extend(after);
    keys.push(new_key);
    let failures = failing(check(&events, &keys, None));
    assert_eq!(
        failures,
        [
            "event acme-7: a key-reset that continues from acme-6 although the runner's checkpoint had reached acme-9: acme-7..acme-9 cut before the reset"
        ]
    );
}

#[test]
fn a_key_rotation_signed_by_the_old_key_carries_trust_to_the_new() {
    let (dir, _, keys) = log(3);
    let old = Arc::new(Identity::load_or_create(dir.path()).unwrap());
    let next_dir = tempfile::tempdir().unwrap();
    let next = Arc::new(Identity::load_or_create(next_dir.path()).unwrap());
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", old).unwrap();
    audit
        .append(
            AuditEventType::KeyRotation,
            Subject::default(),
            Some(json!({"newPublicKey": next.public_key()})),
        )
        .unwrap();
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", next.clone()).unwrap();
    audit
        .append(AuditEventType::Claim, Subject::default(), None)
        .unwrap();
    let events = read_local(dir.path()).unwrap();
    let verified = check(&events, &keys, Some(&sign_checkpoint(&next, &events[4]))).unwrap();
    assert_eq!((verified.events, verified.flags.len()), (5, 0));
    // Without the rotation the new key's event is not trusted.
    let mut cut = events.clone();
    cut.remove(3);
    let failures = failing(check(&cut, &keys, None));
    assert!(
        failures.contains(&"event acme-4: gap before it: acme-3 missing".to_owned()),
        "{failures:?}"
    );
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("event acme-4: signature does not verify")),
        "{failures:?}"
    );
}

#[test]
fn rotate_key_records_a_rotation_signed_by_the_old_key_and_forgets_the_old_key() {
    use crate::identity::KEY_FILE;
    use crate::rotation::{NEXT_KEY_FILE, rotate};
    let (dir, _, old_keys) = log(3);
    let old = Arc::new(Identity::load_or_create(dir.path()).unwrap());
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", old.clone()).unwrap();
    let next = rotate(dir.path(), &mut audit).unwrap();
    assert_ne!(next.public_key(), old.public_key());
    audit
        .append(AuditEventType::Claim, Subject::default(), None)
        .unwrap();
    // The state dir holds the new key only.
    assert!(!dir.path().join(NEXT_KEY_FILE).exists());
    let reloaded = Identity::load(&dir.path().join(KEY_FILE)).unwrap().unwrap();
    assert_eq!(reloaded.public_key(), next.public_key());
    let events = read_local(dir.path()).unwrap();
    assert_eq!(events[3].type_, AuditEventType::KeyRotation);
    let details = events[3].details.clone().unwrap();
    assert_eq!(details["newPublicKey"], next.public_key());
    assert_eq!(details["previousPublicKey"], old.public_key());
    // A customer holding only the old key verifies the whole chain, unflagged, up to a
    // checkpoint the new key signed.
    let checkpoint = sign_checkpoint(&next, &events[4]);
    let verified = check(&events, &old_keys, Some(&checkpoint)).unwrap();
    assert_eq!((verified.events, verified.flags.len()), (5, 0));
    // The rotation signed by another key than the old one carries no trust.
    let stranger_dir = tempfile::tempdir().unwrap();
    let stranger = Identity::load_or_create(stranger_dir.path()).unwrap();
    let failures = failing(check(&events, &[stranger.public_key()], None));
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("event acme-3: signature does not verify")),
        "{failures:?}"
    );
}

#[test]
fn a_rotation_cut_by_a_crash_is_finished_when_recorded_and_dropped_when_not() {
    use crate::identity::KEY_FILE;
    use crate::rotation::{NEXT_KEY_FILE, recover};
    let (dir, _, _) = log(2);
    let old = Arc::new(Identity::load_or_create(dir.path()).unwrap());
    // Crash after the next key was written, before the rotation was recorded.
    Identity::create(&dir.path().join(NEXT_KEY_FILE)).unwrap();
    recover(dir.path()).unwrap();
    assert!(!dir.path().join(NEXT_KEY_FILE).exists());
    let kept = Identity::load(&dir.path().join(KEY_FILE)).unwrap().unwrap();
    assert_eq!(kept.public_key(), old.public_key());
    // Crash after the rotation was recorded, before the key was replaced.
    let next = Arc::new(Identity::create(&dir.path().join(NEXT_KEY_FILE)).unwrap());
    let mut audit = AuditLog::open(dir.path(), "acme", "acme", old.clone()).unwrap();
    audit.rotate(next.clone()).unwrap();
    recover(dir.path()).unwrap();
    assert!(!dir.path().join(NEXT_KEY_FILE).exists());
    let promoted = Identity::load(&dir.path().join(KEY_FILE)).unwrap().unwrap();
    assert_eq!(promoted.public_key(), next.public_key());
}
