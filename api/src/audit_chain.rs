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
    let mut expected = 0u64;
    let mut previous: Option<&AuditEventSpec> = None;
    for event in sorted {
        let this = name(event.sequence);
        if event.sequence < expected {
            failures.push(Failure {
                event: this,
                reason: format!("sequence {} appears more than once", event.sequence),
            });
            continue;
        }
        if event.sequence > expected {
            let missing = if event.sequence - expected == 1 {
                name(expected)
            } else {
                format!("{} to {}", name(expected), name(event.sequence - 1))
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
        expected = event.sequence + 1;
        previous = Some(event);
    }
    if failures.is_empty() {
        Ok(events.len())
    } else {
        Err(failures)
    }
}
