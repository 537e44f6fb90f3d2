//! The runner's ed25519 signing key: generated on first start, kept in the state dir
//! (mode 0600), its public half registered on the `Runner` object.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey};

/// File name of the key in the state dir (32 raw secret bytes, base64).
pub const KEY_FILE: &str = "signing.key";

/// The runner's signing identity.
pub struct Identity {
    key: SigningKey,
}

impl Identity {
    /// Loads the key from `state_dir`, generating and storing it (0600) on first start.
    pub fn load_or_create(state_dir: &Path) -> anyhow::Result<Self> {
        let path = state_dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let bytes = STANDARD
                    .decode(text.trim())
                    .with_context(|| format!("{} is not base64", path.display()))?;
                let secret: [u8; 32] = bytes
                    .try_into()
                    .map_err(|_| anyhow::anyhow!("{} does not hold 32 bytes", path.display()))?;
                Ok(Self {
                    key: SigningKey::from_bytes(&secret),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = SigningKey::from_bytes(&rand::random::<[u8; 32]>());
                let tmp = state_dir.join(format!("{KEY_FILE}.tmp"));
                let mut file = open_private(&tmp)?;
                file.write_all(STANDARD.encode(key.to_bytes()).as_bytes())?;
                file.sync_all()?;
                std::fs::rename(&tmp, &path)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                Ok(Self { key })
            }
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// The public key, standard base64 (what `Runner.spec.publicKey` holds).
    pub fn public_key(&self) -> String {
        STANDARD.encode(self.key.verifying_key().to_bytes())
    }

    /// Base64 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> String {
        STANDARD.encode(self.key.sign(message).to_bytes())
    }
}

pub use outpost_api::audit_chain::verify_signature;

fn open_private(path: &Path) -> anyhow::Result<std::fs::File> {
    outpost_api::secret_file::create(path)
        .with_context(|| format!("cannot create {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_kept_private_and_reloaded() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let first = Identity::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Identity::load_or_create(dir.path()).unwrap();
        assert_eq!(first.public_key(), again.public_key());
        assert!(outpost_api::runner::is_ed25519_public_key(
            &first.public_key()
        ));
        let signature = first.sign(b"hello");
        assert_eq!(
            verify_signature(&again.public_key(), b"hello", &signature),
            Ok(())
        );
        assert!(verify_signature(&again.public_key(), b"hellO", &signature).is_err());
    }
}
