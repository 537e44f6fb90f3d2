//! Self-signed serving certificates for a local control plane (a local development server, tests):
//! a CA and a serving certificate for `localhost` and `127.0.0.1` signed by it. kubectl
//! only sends bearer tokens over TLS, so even a loopback server needs one.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// Where a self-signed serving certificate lives.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The serving certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA certificate clients trust (PEM).
    pub ca: PathBuf,
}

impl SelfSigned {
    /// The files in `dir`, created on first use and reused afterwards.
    pub fn ensure(dir: &Path) -> Result<Self, std::io::Error> {
        let files = SelfSigned {
            cert: dir.join("serving.crt"),
            key: dir.join("serving.key"),
            ca: dir.join("ca.crt"),
        };
        if files.cert.exists() && files.key.exists() && files.ca.exists() {
            return Ok(files);
        }
        // The serving key is a credential: 0600 in a 0700 directory.
        outpost_meta::secret_file::private_dir(dir)?;
        let (ca_pem, cert_pem, key_pem) = generate().map_err(std::io::Error::other)?;
        std::fs::write(&files.ca, ca_pem)?;
        std::fs::write(&files.cert, cert_pem)?;
        outpost_meta::secret_file::write(&files.key, key_pem)?;
        Ok(files)
    }

    /// The CA certificate, base64-encoded as kubeconfig's `certificate-authority-data`.
    pub fn ca_data(&self) -> Result<String, std::io::Error> {
        use base64::Engine as _;
        let pem = std::fs::read(&self.ca)?;
        Ok(base64::engine::general_purpose::STANDARD.encode(pem))
    }
}

fn generate() -> Result<(String, String, String), rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "outpost local CA");
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "outpost apiserver");
    let cert = params.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn creates_once_and_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let first = super::SelfSigned::ensure(dir.path()).unwrap();
        let pem = std::fs::read_to_string(&first.cert).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let again = super::SelfSigned::ensure(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&again.cert).unwrap(), pem);
        assert!(!first.ca_data().unwrap().is_empty());
    }
}
