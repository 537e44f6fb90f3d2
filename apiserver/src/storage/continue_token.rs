use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::{Revision, StoreError};

/// Where a paged read stops and at which revision it continues.
///
/// Encoded as URL-safe base64 of a small JSON document, like the Kubernetes API
/// server's continue tokens. Callers treat the encoded form as opaque; the API server
/// decodes it only to build a fresh token after a 410.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    /// The revision every page of the read is taken at.
    #[serde(rename = "rv")]
    pub revision: Revision,
    /// The first key of the next page.
    pub start: String,
}

impl ContinueToken {
    /// A token continuing, at `revision`, with the first key after `key`.
    pub fn after(revision: Revision, key: &str) -> Self {
        ContinueToken {
            revision,
            start: key_after(key),
        }
    }

    /// The opaque text form.
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a ContinueToken always serialises to JSON");
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Parses a token and checks that it continues a read of `prefix`.
    pub fn decode(token: &str, prefix: &str) -> Result<Self, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidContinue {
            reason: reason.to_owned(),
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| invalid("not base64"))?;
        let token: ContinueToken =
            serde_json::from_slice(&bytes).map_err(|_| invalid("not a continue token"))?;
        if !token.start.starts_with(prefix) {
            return Err(invalid("token belongs to another listing"));
        }
        if token.revision <= 0 {
            return Err(invalid("token has no revision"));
        }
        Ok(token)
    }
}

/// The smallest key greater than `key` (what a page continues after).
pub(super) fn key_after(key: &str) -> String {
    format!("{key}\0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_prefix() {
        let token = ContinueToken {
            revision: 42,
            start: "/registry/a/b\0".into(),
        };
        let text = token.encode();
        assert_eq!(ContinueToken::decode(&text, "/registry/a/").unwrap(), token);
        assert!(matches!(
            ContinueToken::decode(&text, "/registry/c/"),
            Err(StoreError::InvalidContinue { .. })
        ));
        assert!(ContinueToken::decode("%%%", "/").is_err());
    }
}
