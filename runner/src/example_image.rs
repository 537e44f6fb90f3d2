//! The example app's image: a small two-platform OCI image built in memory and pushed
//! to a registry. `outpost up` publishes it in its local vendor registry, and the
//! end-to-end tests push it to theirs; the runner itself never uses it.

use oci_client::manifest::{OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
use oci_client::{Client, Reference};
use serde_json::json;
use sha2::Digest as _;

/// What [`push`] pushed.
#[derive(Clone, Debug)]
pub struct PushedImage {
    /// The index's digest: what the tag resolves to.
    pub digest: String,
    /// The two platform manifests' digests.
    pub manifests: Vec<String>,
    /// Every blob (configs and layers), each once: the shared layer first.
    pub blobs: Vec<String>,
    /// The layer every version shares.
    pub shared_layer: String,
}

/// Builds and pushes a two-platform image (an OCI index of linux/amd64 and linux/arm64
/// manifests, each with its own config, a layer shared by both and a layer of its own)
/// as `host/repository:tag`. `version` goes into the per-platform layers and configs;
/// the shared layer is the same for every version.
///
/// ```no_run
/// # async fn f(client: oci_client::Client) -> Result<(), oci_client::errors::OciDistributionError> {
/// let image = outpost_runner::example_image::push(&client, "127.0.0.1:5000", "acme/shopfront", "1.8.2", "1.8.2").await?;
/// println!("{}", image.digest);
/// # Ok(()) }
/// ```
pub async fn push(
    client: &Client,
    host: &str,
    repository: &str,
    tag: &str,
    version: &str,
) -> Result<PushedImage, oci_client::errors::OciDistributionError> {
    let at = Reference::with_tag(host.to_owned(), repository.to_owned(), tag.to_owned());
    let shared = tar(&[("etc/os-release", b"ID=outpost-test\n".as_slice())]);
    let mut blobs = vec![push_blob(client, &at, shared.clone()).await?];
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
        .expect("a JSON value serialises");
        let config_digest = push_blob(client, &at, config.clone()).await?;
        let layer_digest = push_blob(client, &at, layer.clone()).await?;
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
        .expect("a JSON value serialises");
        let digest = sha256(&manifest);
        let by_digest =
            Reference::with_digest(host.to_owned(), repository.to_owned(), digest.clone());
        push_manifest(client, &by_digest, &manifest, OCI_IMAGE_MEDIA_TYPE).await?;
        children.push(json!({"mediaType": OCI_IMAGE_MEDIA_TYPE, "digest": digest,
            "size": manifest.len(), "platform": {"architecture": arch, "os": "linux"}}));
    }
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": children,
    }))
    .expect("a JSON value serialises");
    let digest = sha256(&index);
    push_manifest(client, &at, &index, OCI_IMAGE_INDEX_MEDIA_TYPE).await?;
    Ok(PushedImage {
        digest,
        manifests: children
            .iter()
            .map(|c| {
                c["digest"]
                    .as_str()
                    .expect("each child was given a digest")
                    .to_owned()
            })
            .collect(),
        shared_layer: blobs[0].clone(),
        blobs,
    })
}

async fn push_blob(
    client: &Client,
    at: &Reference,
    bytes: Vec<u8>,
) -> Result<String, oci_client::errors::OciDistributionError> {
    let digest = sha256(&bytes);
    client.push_blob(at, bytes, &digest).await?;
    Ok(digest)
}

async fn push_manifest(
    client: &Client,
    at: &Reference,
    bytes: &[u8],
    media_type: &'static str,
) -> Result<(), oci_client::errors::OciDistributionError> {
    client
        .push_manifest_raw(
            at,
            bytes.to_vec(),
            http::HeaderValue::from_static(media_type),
        )
        .await?;
    Ok(())
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
