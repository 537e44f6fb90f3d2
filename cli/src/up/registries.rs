//! The local OCI registries of `outpost up`: Debian's `docker-registry`, one for the
//! vendor (holding the example's image) and one for the install (which the runner
//! copies the image into). Each keeps its storage and its port in `DATA/registry-*`,
//! so a second run serves the same images at the same address.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::children::Supervised;

/// The registry binary (`docker-registry` package; `./x deps` installs it).
pub const BINARY: &str = "docker-registry";
/// The example's image in the vendor registry, as `manifests/components.yaml` names it.
const EXAMPLE_REPOSITORY: &str = "acme/shopfront";
const EXAMPLE_TAG: &str = "1.8.2";

/// A running local registry.
pub struct LocalRegistry {
    /// `127.0.0.1:PORT`: the registry part of image references.
    pub host: String,
    /// The `docker-registry serve` process.
    pub process: Supervised,
}

/// Starts the registry kept in `dir` (creating it on a free port the first time) and
/// waits until `/v2/` answers.
pub async fn start(binary: &Path, dir: &Path, name: &str) -> anyhow::Result<LocalRegistry> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let config = dir.join("config.yml");
    if !config.exists() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                std::path::absolute(dir.join("data"))?.display()
            ),
        )
        .with_context(|| format!("cannot write {}", config.display()))?;
    }
    let text = std::fs::read_to_string(&config)?;
    let host = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("addr: "))
        .with_context(|| format!("{} has no http addr", config.display()))?
        .trim()
        .to_owned();
    // The port is the one kept in the config; right after an earlier run's registry
    // was stopped it can still be taken for a moment, so a failed bind is tried again.
    let mut attempt = 1;
    loop {
        let mut command = tokio::process::Command::new(binary);
        command.arg("serve").arg(&config);
        let mut process = Supervised::spawn(
            name,
            command,
            &dir.join("registry.log"),
            &dir.join("registry.pid"),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if answers(&host).await {
                return Ok(LocalRegistry { host, process });
            }
            if let Some(status) = process.exited() {
                let log = process.log_tail();
                if attempt < 5 && log.contains("address already in use") {
                    break;
                }
                bail!("the {name} exited with {status} (is {host} in use?): {log}");
            }
            if Instant::now() > deadline {
                bail!("the {name} did not answer on {host} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether `GET /v2/` answers 200.
async fn answers(host: &str) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(host).await else {
        return false;
    };
    let request = format!("GET /v2/ HTTP/1.0\r\nHost: {host}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    reply.starts_with(b"HTTP/1.0 200") || reply.starts_with(b"HTTP/1.1 200")
}

/// Publishes the example's image in the vendor registry unless it is there already;
/// returns its reference and whether it was pushed now.
pub async fn publish_example_image(vendor: &LocalRegistry) -> anyhow::Result<(String, bool)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let reference = Reference::with_tag(
        vendor.host.clone(),
        EXAMPLE_REPOSITORY.to_owned(),
        EXAMPLE_TAG.to_owned(),
    );
    let name = format!("{}/{EXAMPLE_REPOSITORY}:{EXAMPLE_TAG}", vendor.host);
    if let Ok(digest) = client
        .fetch_manifest_digest(&reference, &oci_client::secrets::RegistryAuth::Anonymous)
        .await
    {
        return Ok((format!("{name}@{digest}"), false));
    }
    let image = outpost_runner::example_image::push(
        &client,
        &vendor.host,
        EXAMPLE_REPOSITORY,
        EXAMPLE_TAG,
        EXAMPLE_TAG,
    )
    .await
    .with_context(|| format!("cannot push the example image {name}"))?;
    Ok((format!("{name}@{}", image.digest), true))
}
