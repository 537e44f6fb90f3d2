//! The audit log's trust anchor on the customer's side: the runner's public keys and its
//! newest signed [`Checkpoint`], kept where the customer controls them and the vendor's
//! control plane cannot write (the runner's `--anchor-dir`).
//!
//! * `public-keys`: every public key the runner has signed with, one base64 key a line,
//!   appended, never rewritten. `outpost audit verify --key` reads this file.
//! * `checkpoint.json`: the newest [`Checkpoint`], replaced atomically. Verification
//!   compares the log with it, so a cut tail is named even when the events that would
//!   show it are gone from the control plane.
//!
//! The same two things are published into the customer's AWS account, in the install
//! stack's SSM parameters [`KEY_PARAMETER`] and [`CHECKPOINT_PARAMETER`], which only the
//! runner's instance role may write (`outpost audit verify --stack`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::audit_chain::verify_signature;
use crate::content_hash;

/// File name of the public keys in an anchor dir.
pub const KEYS_FILE: &str = "public-keys";
/// File name of the newest checkpoint in an anchor dir.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// Logical id and output of the install stack's SSM parameter holding the runner's
/// public key (the output's value is the parameter's name). Its version history is
/// every key the runner published.
pub const KEY_PARAMETER: &str = "RunnerPublicKeyParameter";
/// Logical id and output of the install stack's SSM parameter holding the runner's
/// newest [`Checkpoint`] (JSON).
pub const CHECKPOINT_PARAMETER: &str = "AuditCheckpointParameter";
/// What both parameters hold until the runner first writes them (SSM refuses an empty
/// value): neither a key nor a checkpoint.
pub const UNPUBLISHED: &str = "unpublished";

/// The runner's signed statement "the chain of `install` had reached `sequence`, whose
/// event hash is `hash`, at `timestamp`".
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Name of the Install.
    pub install: String,
    /// Name of the Runner that signed it.
    pub runner: String,
    /// The head of the chain: the sequence of its newest event.
    pub sequence: u64,
    /// The `hash` of that event.
    pub hash: String,
    /// When it was signed (RFC 3339).
    pub timestamp: String,
    /// The public key that signed it (base64).
    pub public_key: String,
    /// Base64 ed25519 signature of [`Checkpoint::message`].
    #[serde(default)]
    pub signature: String,
}

impl Checkpoint {
    /// What is signed: the UTF-8 bytes of the content hash of the checkpoint without its
    /// `signature`.
    pub fn message(&self) -> Vec<u8> {
        let mut value = serde_json::to_value(self).expect("checkpoints serialise");
        if let Value::Object(map) = &mut value {
            map.remove("signature");
        }
        content_hash(&value).into_bytes()
    }

    /// Whether the signature is `public_key`'s and the key is one of `trusted`.
    pub fn verify(&self, trusted: &[String]) -> Result<(), String> {
        if !trusted.contains(&self.public_key) {
            return Err(format!(
                "the checkpoint is signed by key {}, which is not a trusted key",
                fingerprint(&self.public_key)
            ));
        }
        verify_signature(&self.public_key, &self.message(), &self.signature)
            .map_err(|e| format!("the checkpoint's {e}"))
    }
}

/// The public keys of a `public-keys` file: one base64 key a line; blank lines and
/// lines starting with `#` are skipped. Every key must be an ed25519 public key.
pub fn parse_keys(text: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !crate::runner::is_ed25519_public_key(line) {
            return Err(format!(
                "line {}: {line:?} is not a base64 ed25519 public key",
                i + 1
            ));
        }
        if !keys.iter().any(|k| k == line) {
            keys.push(line.to_owned());
        }
    }
    Ok(keys)
}

/// A short, stable name of a public key for messages: its first 12 base64 characters.
pub fn fingerprint(public_key: &str) -> String {
    public_key.chars().take(12).collect::<String>() + "…"
}

/// One value the customer's key parameter held: a version of its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedKey {
    /// The parameter's version that held it.
    pub version: i64,
    /// The value: a base64 ed25519 public key, unless someone wrote something else.
    pub value: String,
    /// When the version was written.
    pub modified: String,
    /// Who wrote it (the principal's ARN, as SSM records it).
    pub by: String,
}

/// How one published key is accounted for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAccount {
    /// The first key the parameter held: the runner's key at first boot.
    First,
    /// Named by a `key-rotation` event (vouched for by the key before it).
    Rotation(u64),
    /// Announced by a `key-reset` event (flagged for the customer to confirm).
    Reset(u64),
}

/// Accounts for every key the customer's key parameter held (`history`, oldest first)
/// with the log: the first is the runner's key at first boot; each later one must be
/// the new key of a `key-rotation` or the key of a `key-reset` in `events`. The runner's
/// role can rewrite the parameter, so a key written there that no event of the signed
/// chain announces is a swap. Returns each key's account, or the failures: a value that
/// is not a public key, a key nothing accounts for.
pub fn account_for_keys(
    parameter: &str,
    history: &[PublishedKey],
    events: &[crate::AuditEventSpec],
) -> Result<Vec<(PublishedKey, KeyAccount)>, Vec<crate::audit_chain::Failure>> {
    use crate::AuditEventType;
    use crate::audit_chain::Failure;
    let announced = |key: &str| {
        events.iter().find_map(|event| {
            let field = match event.type_ {
                AuditEventType::KeyRotation => "newPublicKey",
                AuditEventType::KeyReset => "publicKey",
                _ => return None,
            };
            let named = event.details.as_ref()?.get(field)?.as_str()?;
            let account = match event.type_ {
                AuditEventType::KeyRotation => KeyAccount::Rotation(event.sequence),
                _ => KeyAccount::Reset(event.sequence),
            };
            (named == key).then_some(account)
        })
    };
    let mut accounts = Vec::new();
    let mut failures = Vec::new();
    let first = history.first().map(|k| k.value.as_str());
    for published in history {
        let at = format!("{parameter} version {}", published.version);
        let written = format!("written {} by {}", published.modified, published.by);
        if !crate::runner::is_ed25519_public_key(&published.value) {
            failures.push(Failure {
                event: at,
                reason: format!(
                    "holds {:?} ({written}), which is not a public key",
                    published.value
                ),
            });
            continue;
        }
        let account = match announced(&published.value) {
            Some(account) => Some(account),
            None if Some(published.value.as_str()) == first => Some(KeyAccount::First),
            None => None,
        };
        match account {
            Some(account) => accounts.push((published.clone(), account)),
            None => failures.push(Failure {
                event: at,
                reason: format!(
                    "holds key {} ({written}), which no key-rotation or key-reset in the log accounts for: swapped",
                    fingerprint(&published.value)
                ),
            }),
        }
    }
    if history.is_empty() {
        failures.push(Failure {
            event: parameter.to_owned(),
            reason: "holds no public key: the runner has not published one".into(),
        });
    }
    if failures.is_empty() {
        Ok(accounts)
    } else {
        Err(failures)
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;

    use super::*;
    use crate::AuditEventSpec;

    fn key(seed: u8) -> String {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        base64::engine::general_purpose::STANDARD.encode(key.verifying_key().to_bytes())
    }

    fn published(version: i64, value: &str) -> PublishedKey {
        PublishedKey {
            version,
            value: value.to_owned(),
            modified: format!("2026-01-0{version}T00:00:00Z"),
            by: "arn:aws:sts::123456789012:assumed-role/runner/i-1".into(),
        }
    }

    fn event(sequence: u64, type_: &str, details: serde_json::Value) -> AuditEventSpec {
        serde_json::from_value(json!({
            "install": "web", "runner": "web", "sequence": sequence,
            "timestamp": "2026-01-02T03:04:05Z", "type": type_, "details": details,
            "hash": "", "signature": "",
        }))
        .expect("a valid event")
    }

    fn failures(result: Result<Vec<(PublishedKey, KeyAccount)>, Vec<Failure>>) -> Vec<String> {
        result
            .expect_err("accounting should fail")
            .into_iter()
            .map(|f| f.to_string())
            .collect()
    }

    use crate::audit_chain::Failure;

    #[test]
    fn every_published_key_is_the_first_or_announced_by_the_log() {
        let (first, rotated, reset) = (key(1), key(2), key(3));
        let events = [
            event(0, "register", json!({"publicKey": first})),
            event(1, "key-rotation", json!({"newPublicKey": rotated})),
            event(2, "key-reset", json!({"publicKey": reset})),
        ];
        let history = [
            published(1, &first),
            published(2, &rotated),
            published(3, &reset),
            // The runner wrote the first key again (a parameter restored by hand).
            published(4, &first),
        ];
        let accounts: Vec<KeyAccount> = account_for_keys("/p", &history, &events)
            .unwrap()
            .into_iter()
            .map(|(_, account)| account)
            .collect();
        assert_eq!(
            accounts,
            [
                KeyAccount::First,
                KeyAccount::Rotation(1),
                KeyAccount::Reset(2),
                KeyAccount::First
            ]
        );
    }

    #[test]
    fn a_key_no_event_announces_or_a_value_that_is_no_key_fails() {
        let (first, swapped) = (key(1), key(9));
        let events = [event(0, "register", json!({"publicKey": first}))];
        let history = [
            published(1, &first),
            published(2, &swapped),
            published(3, "hello"),
        ];
        assert_eq!(
            failures(account_for_keys("/p", &history, &events)),
            [
                format!(
                    "event /p version 2: holds key {} (written 2026-01-02T00:00:00Z by arn:aws:sts::123456789012:assumed-role/runner/i-1), which no key-rotation or key-reset in the log accounts for: swapped",
                    fingerprint(&swapped)
                ),
                "event /p version 3: holds \"hello\" (written 2026-01-03T00:00:00Z by arn:aws:sts::123456789012:assumed-role/runner/i-1), which is not a public key".to_owned(),
            ]
        );
        // A rotation event that names another key accounts for nothing.
        let other = [event(1, "key-rotation", json!({"newPublicKey": key(4)}))];
        assert_eq!(
            failures(account_for_keys("/p", &history[..2], &other)).len(),
            1
        );
        assert_eq!(
            failures(account_for_keys("/p", &[], &events)),
            ["event /p: holds no public key: the runner has not published one"]
        );
    }
}
