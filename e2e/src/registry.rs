//! A real OCI registry for tests: Debian's `docker-registry` (distribution 2.8) on a
//! free loopback port, with filesystem storage in a temporary directory, and a small
//! multi-platform test image pushed to it with `oci-client`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
use oci_client::{Client, Reference};
use serde_json::json;
use sha2::Digest as _;
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
}

impl Registry {
    /// Starts a registry on a free port and waits until `/v2/` answers.
    pub async fn start() -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("outpost-registry-")
            .tempdir()
            .expect("a temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("registry config written");
        let mut registry = Registry {
            child: None,
            host,
            config,
            dir,
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.answers().await {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("the registry exited with {status}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "the registry did not answer within 30 s: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether `GET /v2/` answers 200.
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
        reply.starts_with(b"HTTP/1.0 200") || reply.starts_with(b"HTTP/1.1 200")
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

    /// A client of this registry (plain HTTP: it is on loopback).
    pub fn client(&self) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        })
    }

    /// `HOST/repository:tag`.
    pub fn reference(&self, repository: &str, tag: &str) -> Reference {
        Reference::with_tag(self.host.clone(), repository.to_owned(), tag.to_owned())
    }

    /// The digest `repository:tag` resolves to here, `None` if it does not.
    pub async fn digest_of(&self, repository: &str, tag: &str) -> Option<String> {
        self.client()
            .fetch_manifest_digest(
                &self.reference(repository, tag),
                &oci_client::secrets::RegistryAuth::Anonymous,
            )
            .await
            .ok()
    }

    /// Whether the registry has blob `digest` in `repository`.
    pub async fn has_blob(&self, repository: &str, digest: &str) -> bool {
        self.client()
            .blob_exists(&self.reference(repository, "latest"), digest)
            .await
            .expect("the registry answers")
    }

    /// Builds and pushes a two-platform image (an OCI index of linux/amd64 and
    /// linux/arm64 manifests, each with its own config, a layer shared by both and a
    /// layer of its own) as `repository:tag`. `version` goes into the per-platform
    /// layers and configs; the shared layer is the same for every version.
    pub async fn push_test_image(&self, repository: &str, tag: &str, version: &str) -> TestImage {
        let client = self.client();
        let at = self.reference(repository, tag);
        let shared = tar(&[("etc/os-release", b"ID=outpost-test\n".as_slice())]);
        let mut blobs = vec![self.push_blob(&client, &at, shared.clone()).await];
        let mut children = Vec::new();
        for arch in ["amd64", "arm64"] {
            let app = format!("{version} for {arch}\n");
            let layer = tar(&[("app/version", app.as_bytes())]);
            let diff_ids = [sha256(&shared), sha256(&layer)];
            let config = serde_json::to_vec(&json!({
                "architecture": arch, "os": "linux",
                "config": {"Entrypoint": ["/app/run"], "Labels": {"version": version}},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            }))
            .expect("config serialises");
            let config_digest = self.push_blob(&client, &at, config.clone()).await;
            let layer_digest = self.push_blob(&client, &at, layer.clone()).await;
            blobs.extend([config_digest.clone(), layer_digest.clone()]);
            let manifest = serde_json::to_vec(&json!({
                "schemaVersion": 2,
                "mediaType": OCI_IMAGE_MEDIA_TYPE,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": config_digest, "size": config.len()},
                "layers": [
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar",
                     "digest": sha256(&shared), "size": shared.len()},
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar",
                     "digest": layer_digest, "size": layer.len()},
                ],
            }))
            .expect("manifest serialises");
            let digest = sha256(&manifest);
            self.push_manifest(
                &client,
                repository,
                &digest,
                &manifest,
                OCI_IMAGE_MEDIA_TYPE,
            )
            .await;
            children.push(json!({"mediaType": OCI_IMAGE_MEDIA_TYPE, "digest": digest,
                "size": manifest.len(), "platform": {"architecture": arch, "os": "linux"}}));
        }
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": children,
        }))
        .expect("index serialises");
        let digest = sha256(&index);
        self.push_manifest(&client, repository, tag, &index, OCI_IMAGE_INDEX_MEDIA_TYPE)
            .await;
        TestImage {
            digest,
            manifests: children
                .iter()
                .map(|c| c["digest"].as_str().expect("a digest").to_owned())
                .collect(),
            shared_layer: blobs[0].clone(),
            blobs,
        }
    }

    async fn push_blob(&self, client: &Client, at: &Reference, bytes: Vec<u8>) -> String {
        let digest = sha256(&bytes);
        client
            .push_blob(at, bytes, &digest)
            .await
            .unwrap_or_else(|e| panic!("pushing blob {digest} to {}: {e}", self.host));
        digest
    }

    async fn push_manifest(
        &self,
        client: &Client,
        repository: &str,
        tag_or_digest: &str,
        bytes: &[u8],
        media_type: &str,
    ) {
        let reference = if tag_or_digest.starts_with("sha256:") {
            Reference::with_digest(
                self.host.clone(),
                repository.to_owned(),
                tag_or_digest.to_owned(),
            )
        } else {
            self.reference(repository, tag_or_digest)
        };
        client
            .push_manifest_raw(
                &reference,
                bytes.to_vec(),
                http::HeaderValue::from_str(media_type).expect("a media type"),
            )
            .await
            .unwrap_or_else(|e| panic!("pushing manifest {reference}: {e}"));
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

/// What [`Registry::push_test_image`] pushed.
#[derive(Clone, Debug)]
pub struct TestImage {
    /// The index's digest: what the tag resolves to.
    pub digest: String,
    /// The two platform manifests' digests.
    pub manifests: Vec<String>,
    /// Every blob (configs and layers), each once: the shared layer first.
    pub blobs: Vec<String>,
    /// The layer every version shares.
    pub shared_layer: String,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let hash = sha2::Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A POSIX (ustar) tarball of regular files, as a layer holds.
fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, content) in files {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        header[100..107].copy_from_slice(b"0000644");
        header[108..115].copy_from_slice(b"0000000");
        header[116..123].copy_from_slice(b"0000000");
        header[124..135].copy_from_slice(format!("{:011o}", content.len()).as_bytes());
        header[136..147].copy_from_slice(b"00000000000");
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is computed with its own field as spaces.
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(content);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}
