//! Fencing tokens of leader election: the controllers' leader sends its token with every
//! write, and the API server refuses the write (409) once the Lease has moved on, so a
//! deposed leader that has not noticed yet cannot write.
//!
//! The token is `NAMESPACE/NAME@REVISION`: the Lease the leader holds and the Lease's
//! resourceVersion (a store revision) after the leader's last successful renewal. Any
//! later write of the Lease, by another replica taking it over or by anyone else,
//! makes it stale.

use std::fmt;
use std::str::FromStr;

/// The HTTP header that carries a [`FenceToken`] on a write.
pub const FENCE_HEADER: &str = "outpost-fence";

/// A leader's fencing token: its Lease and the Lease's revision.
///
/// ```
/// let token: outpost_meta::fence::FenceToken = "default/outpost-controllers@42".parse().unwrap();
/// assert_eq!(token.revision, 42);
/// assert_eq!(token.to_string(), "default/outpost-controllers@42");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceToken {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// The Lease's resourceVersion when the leader last renewed it.
    pub revision: i64,
}

/// Why a fencing token does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid fencing token {token:?}: want NAMESPACE/NAME@REVISION")]
pub struct InvalidFenceToken {
    token: String,
}

impl FromStr for FenceToken {
    type Err = InvalidFenceToken;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidFenceToken {
            token: s.to_owned(),
        };
        let (lease, revision) = s.rsplit_once('@').ok_or_else(invalid)?;
        let (namespace, name) = lease.split_once('/').ok_or_else(invalid)?;
        let revision: i64 = revision.parse().map_err(|_| invalid())?;
        if namespace.is_empty() || name.is_empty() || name.contains('/') || revision <= 0 {
            return Err(invalid());
        }
        Ok(FenceToken {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            revision,
        })
    }
}

impl fmt::Display for FenceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.namespace, self.name, self.revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_malformed_tokens() {
        for bad in [
            "", "a/b", "a@1", "/b@1", "a/@1", "a/b@x", "a/b@0", "a/b/c@1",
        ] {
            assert!(bad.parse::<FenceToken>().is_err(), "{bad:?}");
        }
    }
}
