//! An etcd member that speaks TLS only, to clients and peers, and serves only clients
//! with a certificate of its CA (`--client-cert-auth`), as the chart's bundled etcd
//! runs: a CA, etcd's serving certificate and an API server client certificate made
//! with rcgen in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::free_port;
use crate::pki::TestCa;

/// PEM files of a CA, etcd's serving certificate and the API server's client
/// certificate (certificate, key), all signed by the CA.
pub struct Pki {
    /// The CA certificate.
    pub ca: PathBuf,
    /// etcd's serving (and peer) certificate and key.
    pub server: (PathBuf, PathBuf),
    /// The client certificate and key etcd accepts.
    pub client: (PathBuf, PathBuf),
}

fn write_pki(dir: &Path) -> Pki {
    let ca = TestCa::new(dir, "etcd test CA");
    Pki {
        server: ca.leaf(dir, "etcd-server", "etcd"),
        client: ca.leaf(dir, "apiserver-etcd-client", "outpost-apiserver"),
        ca: ca.cert,
    }
}

/// One etcd member serving clients and peers over TLS only, clients by certificate
/// only; killed when dropped.
pub struct TlsEtcd {
    child: Child,
    /// The client port on 127.0.0.1.
    pub port: u16,
    /// Its certificates.
    pub pki: Pki,
    _dir: tempfile::TempDir,
}

fn spawn_etcd(dir: &Path, pki: &Pki) -> (Child, u16) {
    let (port, peer) = (free_port(), free_port());
    let client_url = format!("https://127.0.0.1:{port}");
    let peer_url = format!("https://127.0.0.1:{peer}");
    let log = std::fs::File::create(dir.join("etcd.log")).expect("etcd log");
    let child = Command::new("etcd")
        .arg("--name=tls")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=tls={peer_url}"))
        .arg(format!("--cert-file={}", pki.server.0.display()))
        .arg(format!("--key-file={}", pki.server.1.display()))
        .arg(format!("--trusted-ca-file={}", pki.ca.display()))
        .arg("--client-cert-auth")
        .arg(format!("--peer-cert-file={}", pki.server.0.display()))
        .arg(format!("--peer-key-file={}", pki.server.1.display()))
        .arg(format!("--peer-trusted-ca-file={}", pki.ca.display()))
        .arg("--peer-client-cert-auth")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("etcd starts (`./x deps` installs etcd-server)");
    (child, port)
}

/// A get of one key through a client with `tls` (or none), to `scheme://127.0.0.1:port`.
pub async fn try_get(scheme: &str, port: u16, tls: Option<TlsOptions>) -> Result<(), String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(2));
    if let Some(tls) = tls {
        options = options.with_tls(tls);
    }
    let endpoint = format!("{scheme}://127.0.0.1:{port}");
    let mut client = Client::connect([endpoint], Some(options))
        .await
        .map_err(|e| e.to_string())?;
    client
        .get("/registry", None)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

impl TlsEtcd {
    /// Starts the member on free ports and waits until it serves a client with the
    /// certificate.
    pub async fn start() -> TlsEtcd {
        let dir = tempfile::tempdir().expect("a temp dir");
        let pki = write_pki(dir.path());
        let (child, port) = spawn_etcd(dir.path(), &pki);
        let etcd = TlsEtcd {
            child,
            port,
            pki,
            _dir: dir,
        };
        crate::eventually(30, "etcd serving TLS clients", async || {
            try_get("https", etcd.port, Some(etcd.tls(true))).await.ok()
        })
        .await;
        etcd
    }

    /// TLS options that trust its CA, with the client certificate when `identity`.
    pub fn tls(&self, identity: bool) -> TlsOptions {
        let read = |p: &Path| std::fs::read(p).expect("PEM file");
        let tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&self.pki.ca)));
        if identity {
            tls.identity(Identity::from_pem(
                read(&self.pki.client.0),
                read(&self.pki.client.1),
            ))
        } else {
            tls
        }
    }

    /// The `--store` of an `outpost server` on it (add `--etcd-cafile` and the client
    /// certificate: [`TlsEtcd::server_flags`]).
    pub fn store(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile` for its files.
    pub fn server_flags(&self) -> Vec<String> {
        vec![
            format!("--etcd-cafile={}", self.pki.ca.display()),
            format!("--etcd-certfile={}", self.pki.client.0.display()),
            format!("--etcd-keyfile={}", self.pki.client.1.display()),
        ]
    }

    /// A client with the certificate.
    pub async fn client(&self) -> Client {
        let options = ConnectOptions::new().with_tls(self.tls(true));
        Client::connect([format!("https://127.0.0.1:{}", self.port)], Some(options))
            .await
            .expect("the certificate holder connects")
    }
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
