//! A test CA and the leaf certificates it signs (rcgen, in a temporary directory): the
//! control plane's serving certificate and a TLS etcd's serving and client certificates.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA whose certificate is written to a PEM file; it signs leaves for `localhost`
/// and `127.0.0.1`.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM file).
    pub(crate) cert: PathBuf,
}

impl TestCa {
    /// A new CA named `common_name`, its certificate written to `dir/ca.crt`.
    pub(crate) fn new(dir: &Path, common_name: &str) -> TestCa {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.self_signed(&key).expect("the CA signs itself");
        let path = dir.join("ca.crt");
        std::fs::write(&path, cert.pem()).expect("CA written");
        TestCa {
            issuer: Issuer::new(params, key),
            cert: path,
        }
    }

    /// A leaf for `localhost` and `127.0.0.1` named `common_name`, written to
    /// `dir/NAME.crt` and `dir/NAME.key`; returns (certificate, key).
    pub(crate) fn leaf(&self, dir: &Path, name: &str, common_name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("a key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.issuer).expect("the CA signs");
        let (cert_path, key_path) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("cert written");
        std::fs::write(&key_path, key.serialize_pem()).expect("key written");
        (cert_path, key_path)
    }
}
