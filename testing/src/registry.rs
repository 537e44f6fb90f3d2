//! A real OCI registry for tests: Debian's `docker-registry` (distribution 2.8) on a
//! free loopback port, with filesystem storage in a temporary directory, and a small
//! multi-platform test image pushed to it (the example's: `outpost_e2e::PushTestImage`). [`Registry::start_with_htpasswd`] starts one that
//! refuses every request without its user's password (`auth: htpasswd`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The registry binary (`docker-registry` package; `./x deps` installs it).
const REGISTRY_BINARY: &str = "docker-registry";

/// A running `docker-registry serve`, stopped (SIGKILL) when dropped.
pub struct Registry {
    child: Option<Child>,
    /// `127.0.0.1:PORT`: the registry part of image references.
    pub host: String,
    config: PathBuf,
    dir: tempfile::TempDir,
    /// The htpasswd user and password, when the registry requires them.
    credentials: Option<(String, String)>,
}

impl Registry {
    /// Starts a registry on a free port and waits until `/v2/` answers.
    pub async fn start() -> Registry {
        Registry::start_with(None).await
    }

    /// Starts a registry that requires `username` and `password` (HTTP basic, from an
    /// htpasswd file with the password's bcrypt hash) for every request.
    pub async fn start_with_htpasswd(username: &str, password: &str) -> Registry {
        Registry::start_with(Some((username.to_owned(), password.to_owned()))).await
    }

    async fn start_with(credentials: Option<(String, String)>) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("outpost-registry-")
            .tempdir()
            .expect("a temp dir");
        let port = crate::free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
            dir.path().join("data").display()
        );
        if let Some((username, password)) = &credentials {
            // The lowest cost bcrypt allows: the registry checks it on every request.
            let hash = bcrypt::hash(password, 4).expect("a bcrypt hash");
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{username}:{hash}\n")).expect("htpasswd written");
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: outpost-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, text).expect("registry config written");
        let mut registry = Registry {
            child: None,
            host,
            config,
            dir,
            credentials,
        };
        registry.start_again().await;
        registry
    }

    /// Stops the registry (SIGKILL); its storage stays for [`Registry::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a stopped registry again on the same port and storage.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "the registry is already running");
        let log = std::fs::File::create(self.dir.path().join("registry.log")).expect("log file");
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {REGISTRY_BINARY} (`./x deps` installs docker-registry): {e}")
            });
        self.child = Some(child);
        let answered = crate::wait_for(Duration::from_secs(30), async || {
            if self.answers().await {
                return Some(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("the registry exited with {status}: {}", self.log());
            }
            None
        })
        .await;
        assert!(
            answered.is_some(),
            "the registry did not answer within 30 s: {}",
            self.log()
        );
    }

    /// Whether `GET /v2/` answers (200, or 401 when it requires credentials).
    async fn answers(&self) -> bool {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&self.host).await else {
            return false;
        };
        let request = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.host);
        if stream.write_all(request.as_bytes()).await.is_err() {
            return false;
        }
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply).await;
        let status = if self.credentials.is_some() {
            "401"
        } else {
            "200"
        };
        [b"HTTP/1.0 ".as_slice(), b"HTTP/1.1 "]
            .iter()
            .any(|version| reply.starts_with(&[*version, status.as_bytes()].concat()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Where the registry keeps a blob's bytes (`sha256:…`) in its filesystem storage:
    /// overwrite it to make the registry serve corrupted bytes.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// A client of this registry (plain HTTP: it is on loopback), with its
    /// credentials when it requires them.
    pub async fn client(&self) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        });
        client.store_auth_if_needed(&self.host, &self.auth()).await;
        client
    }

    /// The registry's credentials: basic with its htpasswd user, else anonymous.
    pub fn auth(&self) -> RegistryAuth {
        match &self.credentials {
            Some((username, password)) => RegistryAuth::Basic(username.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// `HOST/repository:tag`.
    pub fn reference(&self, repository: &str, tag: &str) -> Reference {
        Reference::with_tag(self.host.clone(), repository.to_owned(), tag.to_owned())
    }

    /// The digest `repository:tag` resolves to here, `None` if it does not.
    pub async fn digest_of(&self, repository: &str, tag: &str) -> Option<String> {
        self.client()
            .await
            .fetch_manifest_digest(&self.reference(repository, tag), &self.auth())
            .await
            .ok()
    }

    /// Whether the registry has manifest `digest` in `repository`.
    pub async fn has_manifest(&self, repository: &str, digest: &str) -> bool {
        let reference =
            Reference::with_digest(self.host.clone(), repository.to_owned(), digest.to_owned());
        self.client()
            .await
            .fetch_manifest_digest(&reference, &self.auth())
            .await
            .is_ok_and(|found| found == digest)
    }

    /// Whether the registry has blob `digest` in `repository`.
    pub async fn has_blob(&self, repository: &str, digest: &str) -> bool {
        self.client()
            .await
            .blob_exists(&self.reference(repository, "latest"), digest)
            .await
            .expect("the registry answers")
    }

    /// The registry's storage directory.
    pub fn storage(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
