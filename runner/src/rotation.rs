//! Explicit key rotation (`--rotate-key`): the old key still exists, so it vouches for
//! the new one. The runner
//!
//! 1. generates the new key into `signing.key.next` (0600, fsync'd),
//! 2. appends a `key-rotation` event naming the new public key (`newPublicKey`), signed
//!    by the old key (fsync'd),
//! 3. renames `signing.key.next` over `signing.key`: the old key is gone.
//!
//! A crash between the steps is finished or undone at the next start ([`recover`]): a
//! next key the log already names is promoted; one it does not name is deleted.
//!
//! A runner that lost its state dir lost its key with it (the key lives there and
//! nowhere else, on purpose): it cannot rotate and records a flagged `key-reset`
//! instead ([`crate::session`]).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use outpost_api::AuditEventType;

use crate::audit::AuditLog;
use crate::identity::{Identity, KEY_FILE};

/// File name of the key a rotation is switching to, until the switch is done.
pub const NEXT_KEY_FILE: &str = "signing.key.next";

/// Rotates the key of the runner whose state dir is `state_dir` and whose audit log is
/// `audit`; returns the new identity, which `audit` signs with from then on.
pub fn rotate(state_dir: &Path, audit: &mut AuditLog) -> anyhow::Result<Arc<Identity>> {
    anyhow::ensure!(
        !audit.events().is_empty(),
        "--rotate-key: the state dir has no audit log yet, so no key to rotate from"
    );
    let next_path = state_dir.join(NEXT_KEY_FILE);
    let next = Arc::new(Identity::create(&next_path)?);
    audit.rotate(next.clone())?;
    promote(state_dir)?;
    Ok(next)
}

/// Finishes or undoes a rotation a crash cut short: promotes `signing.key.next` when the
/// local audit log's newest `key-rotation` names it, deletes it otherwise.
pub fn recover(state_dir: &Path) -> anyhow::Result<()> {
    let next_path = state_dir.join(NEXT_KEY_FILE);
    let Some(next) = Identity::load(&next_path)? else {
        return Ok(());
    };
    // No log (or none readable) names no key: the next key is dropped.
    let events = crate::audit::read_local(state_dir).unwrap_or_default();
    let named = events
        .iter()
        .rev()
        .find(|e| e.type_ == AuditEventType::KeyRotation)
        .and_then(|e| {
            e.details
                .as_ref()?
                .get("newPublicKey")?
                .as_str()
                .map(str::to_owned)
        });
    if named.as_deref() == Some(next.public_key().as_str()) {
        tracing::warn!("finishing a key rotation a crash interrupted");
        promote(state_dir)
    } else {
        tracing::warn!("dropping the key of a rotation that was never recorded");
        std::fs::remove_file(&next_path)
            .with_context(|| format!("cannot remove {}", next_path.display()))
    }
}

fn promote(state_dir: &Path) -> anyhow::Result<()> {
    let path = state_dir.join(KEY_FILE);
    std::fs::rename(state_dir.join(NEXT_KEY_FILE), &path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    std::fs::File::open(state_dir)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("cannot sync {}", state_dir.display()))
}
