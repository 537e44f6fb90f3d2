//! Runner tokens: one per install, minted by an admin, stored only as a SHA-256 hash in
//! the Install's `status.runnerTokenHash`.
//!
//! A token reads `opr_<namespace>_<install>_<secret>`, the secret being 32 random bytes
//! in unpadded base64url. Namespace and install names are DNS labels, so they hold no
//! `_`: the authenticator parses them from the token, reads that one Install and
//! compares hashes in constant time.

use base64::Engine as _;
use outpost_apiserver::admission::Reads;
use outpost_apiserver::auth::{Authenticator, User};
use outpost_apiserver::status::ApiError;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// Every runner token starts with this.
pub const PREFIX: &str = "opr_";
/// The group of every runner user.
pub const RUNNERS: &str = "outpost:runners";
/// Runner users are named `system:runner:<namespace>:<install>`.
const USER_PREFIX: &str = "system:runner:";

/// A runner token, parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct RunnerToken {
    /// The install's namespace.
    pub namespace: String,
    /// The install's name.
    pub install: String,
    token: String,
}

impl std::fmt::Debug for RunnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerToken")
            .field("namespace", &self.namespace)
            .field("install", &self.install)
            .finish_non_exhaustive()
    }
}

impl RunnerToken {
    /// A fresh token for `namespace/install`.
    pub fn generate(namespace: &str, install: &str) -> RunnerToken {
        let secret =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        RunnerToken {
            namespace: namespace.to_owned(),
            install: install.to_owned(),
            token: format!("{PREFIX}{namespace}_{install}_{secret}"),
        }
    }

    /// Parses a bearer token; `None` if it is not shaped like a runner token.
    pub fn parse(token: &str) -> Option<RunnerToken> {
        let rest = token.strip_prefix(PREFIX)?;
        let (namespace, rest) = rest.split_once('_')?;
        let (install, secret) = rest.split_once('_')?;
        if namespace.is_empty() || install.is_empty() || secret.is_empty() {
            return None;
        }
        Some(RunnerToken {
            namespace: namespace.to_owned(),
            install: install.to_owned(),
            token: token.to_owned(),
        })
    }

    /// The token, to hand out once.
    pub fn secret(&self) -> &str {
        &self.token
    }

    /// SHA-256 of the whole token, lowercase hex: what the Install stores.
    pub fn hash(&self) -> String {
        Sha256::digest(self.token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether the token's hash is `stored`, compared in constant time.
    pub fn matches(&self, stored: &str) -> bool {
        bool::from(self.hash().as_bytes().ct_eq(stored.as_bytes()))
    }

    /// The user the token authenticates as.
    pub fn user(&self) -> User {
        User {
            name: format!("{USER_PREFIX}{}:{}", self.namespace, self.install),
            uid: format!("runner/{}/{}", self.namespace, self.install),
            groups: vec![RUNNERS.to_owned()],
        }
    }
}

/// Authenticates runner tokens against their Install's stored hash, read from the
/// watch cache (minting answers only once the cache has the new hash, so a rotation
/// takes effect at once).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunnerTokens;

impl Authenticator for RunnerTokens {
    fn authenticate(&self, token: &str, reads: &Reads<'_>) -> Result<Option<User>, ApiError> {
        let Some(runner) = RunnerToken::parse(token) else {
            return Ok(None);
        };
        let installs = reads
            .resource(outpost_api::GROUP, outpost_api::VERSION, "installs")
            .ok_or(ApiError::Unauthorized)?;
        let install = reads
            .cache(&installs)?
            .get(Some(&runner.namespace), &runner.install)
            .ok_or(ApiError::Unauthorized)?;
        // Only the hash is read out of the Install (the rest of it is skipped, not decoded).
        #[derive(serde::Deserialize)]
        struct Stored {
            status: Option<StoredStatus>,
        }
        #[derive(serde::Deserialize)]
        struct StoredStatus {
            #[serde(rename = "runnerTokenHash")]
            runner_token_hash: Option<String>,
        }
        let hash = serde_json::from_slice::<Stored>(&install.json())
            .ok()
            .and_then(|i| i.status?.runner_token_hash)
            .ok_or(ApiError::Unauthorized)?;
        if runner.matches(&hash) {
            Ok(Some(runner.user()))
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

/// The install (namespace, name) a runner user acts for, if `user` is one.
pub fn runner_install(user: &User) -> Option<(&str, &str)> {
    if !user.groups.iter().any(|g| g == RUNNERS) {
        return None;
    }
    user.name.strip_prefix(USER_PREFIX)?.split_once(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_compare_by_hash() {
        let token = RunnerToken::generate("shop", "acme");
        assert!(token.secret().starts_with("opr_shop_acme_"));
        let parsed = RunnerToken::parse(token.secret()).unwrap();
        assert_eq!(
            (parsed.namespace.as_str(), parsed.install.as_str()),
            ("shop", "acme")
        );
        assert!(parsed.matches(&token.hash()));
        assert!(!RunnerToken::generate("shop", "acme").matches(&token.hash()));
        assert_eq!(token.hash().len(), 64);
        assert!(RunnerToken::parse("opr_shop_acme").is_none());
        assert!(RunnerToken::parse("admin-token").is_none());
        let user = token.user();
        assert_eq!(user.name, "system:runner:shop:acme");
        assert_eq!(runner_install(&user), Some(("shop", "acme")));
        assert!(!format!("{token:?}").contains(token.secret()));
    }
}
