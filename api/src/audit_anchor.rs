//! The audit log's trust anchor on the customer's side: the runner's public keys and its
//! newest signed [`Checkpoint`], kept where the customer controls them and the vendor's
//! control plane cannot write (the runner's `--anchor-dir`).
//!
//! * `public-keys`: every public key the runner has signed with, one base64 key a line,
//!   appended, never rewritten. `outpost audit verify --key` reads this file.
//! * `checkpoint.json`: the newest [`Checkpoint`], replaced atomically. Verification
//!   compares the log with it, so a cut tail is named even when the events that would
//!   show it are gone from the control plane.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::audit_chain::verify_signature;
use crate::content_hash;

/// File name of the public keys in an anchor dir.
pub const KEYS_FILE: &str = "public-keys";
/// File name of the newest checkpoint in an anchor dir.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

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
