//! Verification of an install's audit log: the hash chain and the runner signatures of
//! [`AuditEventSpec`]s, shared by the runner, `outpost audit verify` and the dashboard.
//!
//! * `hash` is [`content_hash`] (SHA-256 over canonical JSON, keys sorted) of the
//!   event's spec without `hash` and `signature`, so it covers `previousHash` and chains
//!   the events.
//! * `signature` is the runner key's ed25519 signature over the UTF-8 bytes of `hash`.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::VerifyingKey;
use serde_json::Value;

use crate::{AuditEventSpec, content_hash};

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

/// One event that fails verification, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The event, as `<install>-<sequence>` (or where it was found).
    pub event: String,
    /// Why it fails.
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event {}: {}", self.event, self.reason)
    }
}

/// Where the events being verified were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// The runner's local file: events must appear in sequence order.
    Local,
    /// API objects, each with its object name, which must be `<install>-<sequence>`.
    Objects(&'a [String]),
}

/// Checks order, hash chain, signatures (against `keys`: runner name → public key) and
/// gaps. Returns the number of events verified, or every failure found.
pub fn verify(
    install: &str,
    events: &[AuditEventSpec],
    source: Source<'_>,
    keys: &BTreeMap<String, String>,
) -> Result<usize, Vec<Failure>> {
    let mut failures = Vec::new();
    let name = |seq: u64| format!("{install}-{seq}");
    // Order: where each event was found must match its sequence number.
    for (i, event) in events.iter().enumerate() {
        match source {
            Source::Local if event.sequence != i as u64 => failures.push(Failure {
                event: name(event.sequence),
                reason: format!(
                    "out of order: found at position {i} of the log (line {}), expected sequence {i} there",
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
    let mut sorted: Vec<&AuditEventSpec> = events.iter().collect();
    sorted.sort_by_key(|e| e.sequence);
    // `None` once sequence `u64::MAX` was seen: nothing can follow it.
    let mut expected = Some(0u64);
    let mut previous: Option<&AuditEventSpec> = None;
    for event in sorted {
        let this = name(event.sequence);
        let Some(next) = expected.filter(|next| event.sequence >= *next) else {
            failures.push(Failure {
                event: this,
                reason: format!("sequence {} appears more than once", event.sequence),
            });
            continue;
        };
        if event.sequence > next {
            let missing = if event.sequence - next == 1 {
                name(next)
            } else {
                format!("{} to {}", name(next), name(event.sequence - 1))
            };
            failures.push(Failure {
                event: this.clone(),
                reason: format!("gap before it: {missing} missing"),
            });
            previous = None;
        }
        let hash = event_hash(event);
        if hash != event.hash {
            failures.push(Failure {
                event: this.clone(),
                reason: format!(
                    "content does not match its hash (stored {}, computed {hash}): edited",
                    event.hash
                ),
            });
        }
        if let Some(previous) = previous
            && event.previous_hash.as_deref() != Some(previous.hash.as_str())
        {
            failures.push(Failure {
                event: this.clone(),
                reason: format!(
                    "previousHash does not match the hash of {}: chain broken",
                    name(previous.sequence)
                ),
            });
        }
        if event.sequence == 0 && event.previous_hash.is_some() {
            failures.push(Failure {
                event: this.clone(),
                reason: "the first event has a previousHash".into(),
            });
        }
        match keys.get(&event.runner) {
            None => failures.push(Failure {
                event: this.clone(),
                reason: format!("runner {:?} has no registered public key", event.runner),
            }),
            Some(key) => {
                if let Err(reason) = verify_signature(key, event.hash.as_bytes(), &event.signature)
                {
                    failures.push(Failure {
                        event: this.clone(),
                        reason,
                    });
                }
            }
        }
        expected = event.sequence.checked_add(1);
        previous = Some(event);
    }
    if failures.is_empty() {
        Ok(events.len())
    } else {
        Err(failures)
    }
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer as _, SigningKey};
    use serde_json::json;

    use super::*;

    /// Events of install `web` with the given sequence numbers, each chained to the one
    /// before it and signed by `runner-a`'s key; the keys to verify them with.
    fn signed(sequences: &[u64]) -> (Vec<AuditEventSpec>, BTreeMap<String, String>) {
        let key = SigningKey::from_bytes(&[7; 32]);
        let keys = BTreeMap::from([(
            "runner-a".to_owned(),
            STANDARD.encode(key.verifying_key().to_bytes()),
        )]);
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
        assert_eq!(verify("web", &events[..2], Source::Local, &keys), Ok(2));
        let failures = verify("web", &events, Source::Local, &keys).unwrap_err();
        let max = format!("web-{}", u64::MAX);
        assert!(
            failures.iter().any(|f| f.event == max
                && f.reason == format!("gap before it: web-2 to web-{} missing", u64::MAX - 1)),
            "{failures:?}"
        );
        let mut twice = events.clone();
        twice.push(events[2].clone());
        let failures = verify("web", &twice, Source::Local, &keys).unwrap_err();
        assert!(
            failures.iter().any(|f| f.event == max
                && f.reason == format!("sequence {} appears more than once", u64::MAX)),
            "{failures:?}"
        );
    }
}
