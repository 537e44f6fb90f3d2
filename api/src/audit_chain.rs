//! Verification of an install's audit log: the hash chain and the runner signatures of
//! [`AuditEventSpec`]s, shared by the runner, `outpost audit verify` and the dashboard.
//!
//! * `hash` is [`content_hash`] (SHA-256 over canonical JSON, keys sorted) of the
//!   event's spec without `hash` and `signature`, so it covers `previousHash` and chains
//!   the events.
//! * `signature` is the runner key's ed25519 signature over the UTF-8 bytes of `hash`.
//!
//! What verification trusts ([`Trust`]) comes from the customer's side
//! ([`crate::audit_anchor`]): the runner's public keys and its newest checkpoint, so a
//! log cut from the tail, re-signed with another key or continued after a lost state dir
//! (`key-reset`, flagged) is named even though the control plane holds nothing else.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::VerifyingKey;
use serde_json::Value;

use crate::audit_anchor::{Checkpoint, fingerprint};
use crate::{AuditEventSpec, AuditEventType, content_hash};

/// `sha256:<hex>` of the event's canonical JSON without `hash` and `signature`.
pub fn event_hash(event: &AuditEventSpec) -> String {
    let mut value = serde_json::to_value(event).expect("audit events serialise");
    if let Value::Object(map) = &mut value {
        map.remove("hash");
        map.remove("signature");
    }
    content_hash(&value)
}

/// Whether `signature` (base64) is `public_key`'s (base64) signature of `message`.
pub fn verify_signature(public_key: &str, message: &[u8], signature: &str) -> Result<(), String> {
    let key: [u8; 32] = STANDARD
        .decode(public_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("the runner's public key is not 32 bytes of base64")?;
    let key = VerifyingKey::from_bytes(&key).map_err(|e| format!("bad public key: {e}"))?;
    let signature: [u8; 64] = STANDARD
        .decode(signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("signature is not 64 bytes of base64")?;
    key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(&signature))
        .map_err(|_| "signature does not verify with the runner's public key".to_owned())
}

/// One event that fails verification (or is flagged), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The event, as `<install>-<sequence>`, a range `<install>-<a>..<install>-<b>`, or
    /// where it was found.
    pub event: String,
    /// Why it fails.
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.event.contains("..") {
            "events"
        } else {
            "event"
        };
        write!(f, "{noun} {}: {}", self.event, self.reason)
    }
}

/// Where the events being verified were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// The runner's local file: events must appear in sequence order. A runner that
    /// lost its state dir starts its file at the `key-reset` that continues the chain.
    Local,
    /// API objects, each with its object name, which must be `<install>-<sequence>`.
    Objects(&'a [String]),
}

/// What verification trusts: public keys and, when the customer keeps one, the
/// runner's newest checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct Trust<'a> {
    /// Public keys (base64) an event may be signed with. A `key-rotation` signed by one
    /// of them adds the key it names, for the events after it.
    pub keys: &'a [String],
    /// The newest checkpoint, from the customer's side: the log must reach it.
    pub checkpoint: Option<&'a Checkpoint>,
}

/// A log that verifies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// How many events verified.
    pub events: usize,
    /// Events that verify but that the customer must confirm: each `key-reset`.
    pub flags: Vec<Failure>,
}

/// Checks order, hash chain, signatures (against `trust.keys`), gaps, key changes and
/// the newest checkpoint. Returns what verified, or every failure found.
pub fn verify(
    install: &str,
    events: &[AuditEventSpec],
    source: Source<'_>,
    trust: &Trust<'_>,
) -> Result<Verified, Vec<Failure>> {
    let mut failures = Vec::new();
    let mut flags = Vec::new();
    let name = |seq: u64| format!("{install}-{seq}");
    // A local copy restarted after a lost state dir begins at its key-reset.
    let base = match (source, events.first()) {
        (Source::Local, Some(first)) if first.type_ == AuditEventType::KeyReset => first.sequence,
        _ => 0,
    };
    // Order: where each event was found must match its sequence number.
    for (i, event) in events.iter().enumerate() {
        let at = base.saturating_add(i as u64);
        match source {
            Source::Local if event.sequence != at => failures.push(Failure {
                event: name(event.sequence),
                reason: format!(
                    "out of order: found at position {i} of the log (line {}), expected sequence {at} there",
                    i + 1
                ),
            }),
            Source::Objects(names) if names[i] != name(event.sequence) => failures.push(Failure {
                event: names[i].clone(),
                reason: format!(
                    "out of order: object {} holds sequence {}",
                    names[i], event.sequence
                ),
            }),
            _ => {}
        }
        if event.install != install {
            failures.push(Failure {
                event: name(event.sequence),
                reason: format!("belongs to install {:?}", event.install),
            });
        }
    }
    let mut keys: Vec<String> = trust.keys.to_vec();
    let mut sorted: Vec<&AuditEventSpec> = events.iter().collect();
    sorted.sort_by_key(|e| e.sequence);
    // `None` once sequence `u64::MAX` was seen: nothing can follow it.
    let mut expected = Some(base);
    let mut previous: Option<&AuditEventSpec> = None;
    for event in sorted {
        let this = name(event.sequence);
        let mut fail = |reason: String| {
            failures.push(Failure {
                event: this.clone(),
                reason,
            })
        };
        let Some(next) = expected.filter(|next| event.sequence >= *next) else {
            fail(format!(
                "sequence {} appears more than once",
                event.sequence
            ));
            continue;
        };
        if event.sequence > next {
            let missing = if event.sequence - next == 1 {
                name(next)
            } else {
                format!("{} to {}", name(next), name(event.sequence - 1))
            };
            fail(format!("gap before it: {missing} missing"));
            previous = None;
        }
        let hash = event_hash(event);
        if hash != event.hash {
            fail(format!(
                "content does not match its hash (stored {}, computed {hash}): edited",
                event.hash
            ));
        }
        if let Some(previous) = previous
            && event.previous_hash.as_deref() != Some(previous.hash.as_str())
        {
            fail(format!(
                "previousHash does not match the hash of {}: chain broken",
                name(previous.sequence)
            ));
        }
        if event.sequence == 0 && event.previous_hash.is_some() {
            fail("the first event has a previousHash".into());
        }
        match signed_by(&keys, event) {
            Err(reason) => fail(reason),
            Ok(key) => match key_change(install, event, key, trust) {
                Ok(KeyChange::None) => {}
                Ok(KeyChange::Rotated(new)) => keys.push(new),
                Ok(KeyChange::Reset(reason)) => flags.push(Failure {
                    event: this.clone(),
                    reason,
                }),
                Err(reason) => fail(reason),
            },
        }
        expected = event.sequence.checked_add(1);
        previous = Some(event);
    }
    if let Some(checkpoint) = trust.checkpoint {
        failures.extend(against_checkpoint(install, events, checkpoint, &keys));
    }
    if failures.is_empty() {
        Ok(Verified {
            events: events.len(),
            flags,
        })
    } else {
        Err(failures)
    }
}

/// The key of `keys` whose signature `event` carries.
fn signed_by<'k>(keys: &'k [String], event: &AuditEventSpec) -> Result<&'k str, String> {
    if keys.is_empty() {
        return Err(format!(
            "no trusted public key to check runner {:?}'s signature with",
            event.runner
        ));
    }
    keys.iter()
        .find(|key| verify_signature(key, event.hash.as_bytes(), &event.signature).is_ok())
        .map(String::as_str)
        .ok_or_else(|| {
            format!(
                "signature does not verify with the trusted public key(s) ({}): not signed by the runner",
                keys.iter().map(|k| fingerprint(k)).collect::<Vec<_>>().join(", ")
            )
        })
}

enum KeyChange {
    None,
    /// A `key-rotation` signed by a trusted key: the new key is trusted after it.
    Rotated(String),
    /// A `key-reset`: why the customer must confirm it.
    Reset(String),
}

/// What a `key-rotation` or `key-reset` event (signed by `key`) changes.
fn key_change(
    install: &str,
    event: &AuditEventSpec,
    key: &str,
    trust: &Trust<'_>,
) -> Result<KeyChange, String> {
    let detail = |field: &str| {
        event
            .details
            .as_ref()
            .and_then(|d| d.get(field))
            .and_then(Value::as_str)
    };
    match event.type_ {
        AuditEventType::KeyRotation => {
            let new = detail("newPublicKey")
                .filter(|k| crate::runner::is_ed25519_public_key(k))
                .ok_or("a key-rotation without details.newPublicKey")?;
            Ok(KeyChange::Rotated(new.to_owned()))
        }
        AuditEventType::KeyReset => {
            if detail("publicKey") != Some(key) {
                return Err("a key-reset not signed by the key it announces".into());
            }
            // The reset says which checkpoint the runner found on the customer's side:
            // continuing from before it means events it had signed were cut.
            let said = event
                .details
                .as_ref()
                .and_then(|d| d.pointer("/checkpoint/sequence"))
                .and_then(Value::as_u64);
            let continues = event.sequence.checked_sub(1);
            if let Some(said) = said
                && continues.is_none_or(|c| c < said)
            {
                return Err(format!(
                    "a key-reset that continues from {} although the runner's checkpoint had reached {}: {} cut before the reset",
                    continues.map_or("nothing".to_owned(), |c| format!("{install}-{c}")),
                    format_args!("{install}-{said}"),
                    range(install, event.sequence, said)
                ));
            }
            let known = trust.keys.iter().any(|k| k == key);
            Ok(KeyChange::Reset(format!(
                "key-reset: runner {:?} lost its state dir and signs with a new key {} from here on ({}); \
                 nothing proves it is the same runner — confirm with whoever runs it before trusting the events after it",
                event.runner,
                fingerprint(key),
                if known {
                    "the key is among the trusted keys"
                } else {
                    "the key is NOT among the trusted keys"
                }
            )))
        }
        _ => Ok(KeyChange::None),
    }
}

/// `<install>-<a>` or `<install>-<a>..<install>-<b>`.
fn range(install: &str, from: u64, to: u64) -> String {
    if from == to {
        format!("{install}-{from}")
    } else {
        format!("{install}-{from}..{install}-{to}")
    }
}

/// Whether the log reaches `checkpoint` and holds the event it names.
fn against_checkpoint(
    install: &str,
    events: &[AuditEventSpec],
    checkpoint: &Checkpoint,
    keys: &[String],
) -> Vec<Failure> {
    let mut failures = Vec::new();
    let at = &checkpoint.timestamp;
    if let Err(reason) = checkpoint.verify(keys) {
        failures.push(Failure {
            event: "checkpoint".into(),
            reason,
        });
        return failures;
    }
    if checkpoint.install != install {
        failures.push(Failure {
            event: "checkpoint".into(),
            reason: format!("is of install {:?}", checkpoint.install),
        });
        return failures;
    }
    let head = events.iter().map(|e| e.sequence).max();
    match head {
        Some(head) if head >= checkpoint.sequence => {}
        _ => {
            let from = head.map_or(0, |h| h + 1);
            let ends = head.map_or("the log is empty".to_owned(), |h| {
                format!("the log ends at {install}-{h}")
            });
            failures.push(Failure {
                event: range(install, from, checkpoint.sequence),
                reason: format!(
                    "missing: {ends} but the runner's checkpoint at {at} says {install}-{}: cut from the tail (or not shipped yet)",
                    checkpoint.sequence
                ),
            });
        }
    }
    if let Some(event) = events.iter().find(|e| e.sequence == checkpoint.sequence)
        && event.hash != checkpoint.hash
    {
        failures.push(Failure {
            event: format!("{install}-{}", event.sequence),
            reason: format!(
                "is not the event the runner's checkpoint at {at} names (hash {}): replaced",
                checkpoint.hash
            ),
        });
    }
    failures
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer as _, SigningKey};
    use serde_json::json;

    use super::*;

    /// Events of install `web` with the given sequence numbers, each chained to the one
    /// before it and signed by `runner-a`'s key; the keys to verify them with.
    fn signed(sequences: &[u64]) -> (Vec<AuditEventSpec>, Vec<String>) {
        let key = SigningKey::from_bytes(&[7; 32]);
        let keys = vec![STANDARD.encode(key.verifying_key().to_bytes())];
        let mut events: Vec<AuditEventSpec> = Vec::new();
        for &sequence in sequences {
            let mut event: AuditEventSpec = serde_json::from_value(json!({
                "install": "web", "runner": "runner-a", "sequence": sequence,
                "timestamp": "2026-01-02T03:04:05Z", "type": "claim",
                "previousHash": events.last().map(|e| e.hash.clone()),
                "hash": "", "signature": "",
            }))
            .expect("a valid event");
            event.hash = event_hash(&event);
            event.signature = STANDARD.encode(key.sign(event.hash.as_bytes()).to_bytes());
            events.push(event);
        }
        (events, keys)
    }

    /// Fuzzing finding (`audit_verify`): an event numbered `u64::MAX` made verification
    /// overflow computing the next sequence (a panic in debug builds, a wrap to 0 that
    /// hid duplicates in release ones). It is now a gap, and a second one a duplicate.
    #[test]
    fn the_last_possible_sequence_is_a_gap_not_an_overflow() {
        let (events, keys) = signed(&[0, 1, u64::MAX]);
        let trust = Trust {
            keys: &keys,
            checkpoint: None,
        };
        assert_eq!(
            verify("web", &events[..2], Source::Local, &trust).map(|v| v.events),
            Ok(2)
        );
        let failures = verify("web", &events, Source::Local, &trust).unwrap_err();
        let max = format!("web-{}", u64::MAX);
        assert!(
            failures.iter().any(|f| f.event == max
                && f.reason == format!("gap before it: web-2 to web-{} missing", u64::MAX - 1)),
            "{failures:?}"
        );
        let mut twice = events.clone();
        twice.push(events[2].clone());
        let failures = verify("web", &twice, Source::Local, &trust).unwrap_err();
        assert!(
            failures.iter().any(|f| f.event == max
                && f.reason == format!("sequence {} appears more than once", u64::MAX)),
            "{failures:?}"
        );
    }
}
