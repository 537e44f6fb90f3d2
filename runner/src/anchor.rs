//! The runner's side of the customer's trust anchor ([`outpost_api::audit_anchor`]):
//! it appends its public key to `--anchor-dir`'s `public-keys` and keeps the newest
//! signed [`Checkpoint`] of its audit log in `checkpoint.json` there — after every
//! event (so at the end of every Plan) and at least every `--checkpoint-seconds`. It
//! publishes the same into the install stack's SSM parameters when started with
//! `--publish-key-parameter` / `--publish-checkpoint-parameter`
//! ([`crate::aws::anchor_parameters`]).
//!
//! The anchor dir is a place the customer controls and the vendor cannot write (a
//! mounted volume, a directory synchronised to the customer's storage); it survives the
//! runner's state dir, which is how a runner that lost its state finds the checkpoint it
//! continues from.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use outpost_api::AuditEventSpec;
use outpost_api::audit_anchor::{CHECKPOINT_FILE, Checkpoint, KEYS_FILE, parse_keys};

use crate::aws::anchor_parameters::AnchorParameters;
use crate::identity::Identity;
use crate::session::Session;

/// The customer-side anchor dir.
pub struct Anchor {
    dir: PathBuf,
}

impl Anchor {
    /// The anchor in `dir` (created when missing, 0755: its contents are public).
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the anchor dir {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// Appends `public_key` to `public-keys` unless it is there (fsync'd).
    pub fn publish_key(&self, public_key: &str) -> anyhow::Result<()> {
        let path = self.dir.join(KEYS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let keys = parse_keys(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if keys.iter().any(|k| k == public_key) {
            return Ok(());
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let separator = if text.is_empty() || text.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        file.write_all(format!("{separator}{public_key}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot append to {}", path.display()))
    }

    /// The newest checkpoint, if one was written.
    pub fn checkpoint(&self) -> anyhow::Result<Option<Checkpoint>> {
        let path = self.dir.join(CHECKPOINT_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a checkpoint", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Replaces the checkpoint (written aside, fsync'd, renamed).
    pub fn write_checkpoint(&self, checkpoint: &Checkpoint) -> anyhow::Result<()> {
        let path = self.dir.join(CHECKPOINT_FILE);
        let tmp = self.dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        let mut file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.write_all(&serde_json::to_vec_pretty(checkpoint)?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))
    }
}

/// `identity`'s signed checkpoint of `head`.
pub fn sign_checkpoint(identity: &Identity, head: &AuditEventSpec) -> Checkpoint {
    let mut checkpoint = Checkpoint {
        install: head.install.clone(),
        runner: head.runner.clone(),
        sequence: head.sequence,
        hash: head.hash.clone(),
        timestamp: jiff::Timestamp::now().to_string(),
        public_key: identity.public_key(),
        signature: String::new(),
    };
    checkpoint.signature = identity.sign(&checkpoint.message());
    checkpoint
}

/// Writes a checkpoint of the audit log's head to the anchor dir and the checkpoint
/// parameter whenever an event is recorded and at least every `--checkpoint-seconds`,
/// forever; first publishes the runner's key to the key parameter. A write that fails
/// is retried on the next turn; it never stops the runner.
pub async fn keep_checkpoints(
    session: Arc<Session>,
    anchor: Option<Arc<Anchor>>,
    parameters: Option<Arc<AnchorParameters>>,
) {
    let every = Duration::from_secs(session.args.checkpoint_seconds.max(1));
    let mut key_published = false;
    loop {
        if let Some(parameters) = &parameters
            && !key_published
        {
            match parameters.publish_key(&session.public_key()).await {
                Ok(wrote) => {
                    key_published = true;
                    if wrote {
                        tracing::info!("published the public key to the customer's key parameter");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot publish the public key; will retry")
                }
            }
        }
        if let Some(checkpoint) = session.checkpoint() {
            if let Some(anchor) = &anchor
                && let Err(e) = anchor.write_checkpoint(&checkpoint)
            {
                tracing::warn!(error = %e, "cannot write the audit checkpoint; will retry");
            }
            if let Some(parameters) = &parameters
                && let Err(e) = parameters.write_checkpoint(&checkpoint).await
            {
                tracing::warn!(error = %format!("{e:#}"), "cannot publish the audit checkpoint; will retry");
            }
        }
        let _ = tokio::time::timeout(every, session.to_checkpoint.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_appended_once_and_checkpoints_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = Anchor::open(&dir.path().join("anchor")).unwrap();
        let state = tempfile::tempdir().unwrap();
        let identity = Identity::load_or_create(state.path()).unwrap();
        anchor.publish_key(&identity.public_key()).unwrap();
        anchor.publish_key(&identity.public_key()).unwrap();
        let other = tempfile::tempdir().unwrap();
        let second = Identity::load_or_create(other.path()).unwrap();
        anchor.publish_key(&second.public_key()).unwrap();
        let text = std::fs::read_to_string(dir.path().join("anchor").join(KEYS_FILE)).unwrap();
        assert_eq!(
            parse_keys(&text).unwrap(),
            [identity.public_key(), second.public_key()]
        );
        assert_eq!(anchor.checkpoint().unwrap(), None);
        let head: AuditEventSpec = serde_json::from_value(serde_json::json!({
            "install": "acme", "runner": "acme", "sequence": 4,
            "timestamp": "2025-01-15T10:00:00Z", "type": "apply",
            "hash": outpost_api::content_hash(&serde_json::json!(4)), "signature": "c2ln"
        }))
        .unwrap();
        let checkpoint = sign_checkpoint(&identity, &head);
        anchor.write_checkpoint(&checkpoint).unwrap();
        let read = anchor.checkpoint().unwrap().unwrap();
        assert_eq!(read, checkpoint);
        assert_eq!(read.verify(&[identity.public_key()]), Ok(()));
        assert!(read.verify(&[second.public_key()]).is_err());
    }
}
