//! Fenced writes ([`outpost_meta::fence`]): a write that carries a fencing token is
//! refused with 409 unless the token's Lease is still at the token's revision, so a
//! deposed controllers leader cannot write once another replica has taken the Lease.
//! Writes without the header are not fenced.
//!
//! # Warning
//! The check reads the Lease, then the write happens: a takeover that lands between
//! the two (the length of one request) is not caught. The store has no transaction over
//! two keys; the window it leaves is that of one request, not the lease's 15 s.

use outpost_meta::fence::{FENCE_HEADER, FenceToken};
use serde_json::Value;

use super::dispatch::Call;
use crate::status::ApiError;

/// Refuses the call's write (409) if it carries a stale fencing token, 400 if the token
/// does not parse.
pub async fn check(call: &Call) -> Result<(), ApiError> {
    let Some(header) = call.headers.get(FENCE_HEADER) else {
        return Ok(());
    };
    let token: FenceToken = header
        .to_str()
        .map_err(|_| ApiError::BadRequest(format!("the {FENCE_HEADER} header is not text")))?
        .parse()
        .map_err(|err: outpost_meta::fence::InvalidFenceToken| {
            ApiError::BadRequest(err.to_string())
        })?;
    let leases = call
        .state
        .config
        .registry
        .get("coordination.k8s.io", "v1", "leases")
        .ok_or_else(|| ApiError::Internal("no Lease type to fence writes with".into()))?;
    let stored = call
        .state
        .store
        .get(&leases.key(Some(&token.namespace), &token.name))
        .await
        .map_err(|err| ApiError::Internal(format!("storage: {err}")))?;
    let stale = match stored {
        Some(kv) if kv.mod_revision == token.revision => return Ok(()),
        Some(kv) => {
            let holder = serde_json::from_slice::<Value>(&kv.value)
                .ok()
                .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
                .unwrap_or_default();
            format!(
                "which is now at revision {} (held by {holder:?})",
                kv.mod_revision
            )
        }
        None => "which no longer exists".to_owned(),
    };
    Err(ApiError::Conflict {
        subject: call.subject(),
        reason: format!(
            "fenced out: the writer's token is revision {} of lease {}/{}, {stale}",
            token.revision, token.namespace, token.name
        ),
    })
}
