//! Copying one image by digest between two registries with `oci-client`: resolve the
//! source, walk its manifests (an index and its children), and copy every manifest,
//! config and layer the destination lacks. Everything fetched is checked against the
//! digest that promised it before it is pushed.

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE, OciDescriptor,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;

/// Manifest media types the copy understands: OCI and Docker, images and indexes.
const MANIFEST_TYPES: [&str; 4] = [
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
];

/// A repository in a registry: `registry/name` (`127.0.0.1:5000/acme/shop`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repository {
    /// Host and port of the registry.
    pub registry: String,
    /// The repository's name in it.
    pub name: String,
}

impl Repository {
    /// Parses `registry/name`; the registry part must name a host (a dot, a port or
    /// `localhost`), as in Docker references.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let (registry, name) = text
            .split_once('/')
            .with_context(|| format!("{text:?} is not REGISTRY/NAME"))?;
        let host_like = registry.contains('.') || registry.contains(':') || registry == "localhost";
        if !host_like || name.is_empty() {
            bail!(
                "{text:?} is not REGISTRY/NAME (the registry is a host name, with a dot or a port)"
            );
        }
        Ok(Repository {
            registry: registry.to_owned(),
            name: name.to_owned(),
        })
    }

    /// This repository at `tag`.
    pub fn at_tag(&self, tag: &str) -> Reference {
        Reference::with_tag(self.registry.clone(), self.name.clone(), tag.to_owned())
    }

    /// This repository at `digest`.
    pub fn at_digest(&self, digest: &str) -> Reference {
        Reference::with_digest(self.registry.clone(), self.name.clone(), digest.to_owned())
    }

    /// `registry/name@digest`.
    pub fn pinned(&self, digest: &str) -> String {
        format!("{}/{}@{digest}", self.registry, self.name)
    }

    /// Whether the registry is on a loopback address, where plain HTTP is allowed.
    pub(crate) fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
            _ => self.registry.as_str(),
        };
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// A client for `repositories`' registries, each with its credentials: HTTPS, except
/// plain HTTP to loopback ones.
///
/// The client keeps one set of credentials per registry host, the first stored: they
/// are stored here, so the `RegistryAuth::Anonymous` the calls below pass to
/// `oci-client` never replaces them. Two repositories on one registry must therefore
/// use the same credentials.
pub async fn client(repositories: &[(&Repository, RegistryAuth)]) -> anyhow::Result<Client> {
    // reqwest is built without a crypto provider of its own: the runner's is ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let plain: Vec<String> = repositories
        .iter()
        .filter(|(r, _)| r.is_loopback())
        .map(|(r, _)| r.registry.clone())
        .collect();
    for (i, (repository, auth)) in repositories.iter().enumerate() {
        if let Some((other, _)) = repositories[..i]
            .iter()
            .find(|(other, other_auth)| other.registry == repository.registry && other_auth != auth)
        {
            bail!(
                "{}/{} and {}/{} are in one registry but have different credentials",
                other.registry,
                other.name,
                repository.registry,
                repository.name
            );
        }
    }
    let client = Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain),
        connect_timeout: Some(std::time::Duration::from_secs(10)),
        read_timeout: Some(std::time::Duration::from_secs(60)),
        ..ClientConfig::default()
    });
    for (repository, auth) in repositories {
        client
            .store_auth_if_needed(&repository.registry, auth)
            .await;
    }
    Ok(client)
}

/// One manifest of an image: its digest, media type and raw bytes.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// `sha256:…` of `bytes`.
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// The bytes as served (and as pushed: digests are over exactly these).
    pub bytes: Vec<u8>,
}

/// Everything an image is made of, children before their index.
#[derive(Clone, Debug)]
pub struct Image {
    /// The digest the source reference resolved to (the top manifest's).
    pub digest: String,
    /// Manifests, children first, the top one last.
    pub manifests: Vec<Manifest>,
    /// Configs and layers, each once.
    pub blobs: Vec<OciDescriptor>,
}

/// Resolves `reference` in its registry and reads every manifest of the image, each
/// checked against the digest that named it (the registry's `Docker-Content-Digest`
/// for a tag, the index's descriptor for a child, the reference's for a digest).
pub async fn resolve(
    client: &Client,
    source: &Repository,
    reference: &Reference,
) -> anyhow::Result<Image> {
    let (bytes, digest) = pull_manifest(client, reference).await?;
    let mut manifests = Vec::new();
    let mut blobs: Vec<OciDescriptor> = Vec::new();
    let top = parse(&bytes, &digest)?;
    if let Some(children) = top.get("manifests").and_then(Value::as_array) {
        for child in children {
            let child: OciDescriptor = serde_json::from_value(child.clone())
                .with_context(|| format!("a bad descriptor in index {digest}"))?;
            let (child_bytes, child_digest) =
                pull_manifest(client, &source.at_digest(&child.digest)).await?;
            let parsed = parse(&child_bytes, &child_digest)?;
            if parsed.get("manifests").is_some() {
                bail!("index {digest} nests another index ({child_digest}); not supported");
            }
            collect_blobs(&parsed, &child_digest, &mut blobs)?;
            manifests.push(Manifest {
                digest: child_digest,
                media_type: media_type(&parsed, Some(&child.media_type)),
                bytes: child_bytes,
            });
        }
    } else {
        collect_blobs(&top, &digest, &mut blobs)?;
    }
    manifests.push(Manifest {
        media_type: media_type(&top, None),
        digest: digest.clone(),
        bytes,
    });
    Ok(Image {
        digest,
        manifests,
        blobs,
    })
}

async fn pull_manifest(
    client: &Client,
    reference: &Reference,
) -> anyhow::Result<(Vec<u8>, String)> {
    client
        .pull_manifest_raw(reference, &RegistryAuth::Anonymous, &MANIFEST_TYPES)
        .await
        .map(|(bytes, digest)| (bytes.to_vec(), digest))
        .map_err(|e| describe(e, &format!("cannot read manifest {reference}")))
}

fn parse(bytes: &[u8], digest: &str) -> anyhow::Result<Value> {
    serde_json::from_slice(bytes).with_context(|| format!("manifest {digest} is not JSON"))
}

/// The manifest's own `mediaType`, else its descriptor's, else by shape (OCI).
fn media_type(manifest: &Value, descriptor: Option<&str>) -> String {
    manifest
        .get("mediaType")
        .and_then(Value::as_str)
        .or(descriptor.filter(|d| !d.is_empty()))
        .unwrap_or(if manifest.get("manifests").is_some() {
            OCI_IMAGE_INDEX_MEDIA_TYPE
        } else {
            OCI_IMAGE_MEDIA_TYPE
        })
        .to_owned()
}

fn collect_blobs(
    manifest: &Value,
    digest: &str,
    blobs: &mut Vec<OciDescriptor>,
) -> anyhow::Result<()> {
    let config = manifest
        .get("config")
        .with_context(|| format!("manifest {digest} has no config"))?;
    let layers = manifest
        .get("layers")
        .and_then(Value::as_array)
        .with_context(|| format!("manifest {digest} has no layers"))?;
    for descriptor in std::iter::once(config).chain(layers) {
        let descriptor: OciDescriptor = serde_json::from_value(descriptor.clone())
            .with_context(|| format!("a bad descriptor in manifest {digest}"))?;
        if !blobs.iter().any(|b| b.digest == descriptor.digest) {
            blobs.push(descriptor);
        }
    }
    Ok(())
}

/// What the destination already holds of an image.
#[derive(Clone, Debug, Default)]
pub struct Present {
    /// Digests of blobs already there.
    pub blobs: BTreeSet<String>,
    /// Digests of manifests already there.
    pub manifests: BTreeSet<String>,
    /// What the destination tag points at, if it exists.
    pub tagged: Option<String>,
}

/// Asks the destination which of `image`'s blobs and manifests it has (HEAD requests),
/// and what `tag` points at.
pub async fn present(
    client: &Client,
    destination: &Repository,
    image: &Image,
    tag: Option<&str>,
) -> anyhow::Result<Present> {
    let mut present = Present::default();
    let sample = destination.at_digest(&image.digest);
    for blob in &image.blobs {
        let exists = client
            .blob_exists(&sample, &blob.digest)
            .await
            .map_err(|e| {
                describe(
                    e,
                    &format!(
                        "cannot check blob {} in {}",
                        blob.digest, destination.registry
                    ),
                )
            })?;
        if exists {
            present.blobs.insert(blob.digest.clone());
        }
    }
    for manifest in &image.manifests {
        if manifest_digest(client, &destination.at_digest(&manifest.digest))
            .await?
            .is_some()
        {
            present.manifests.insert(manifest.digest.clone());
        }
    }
    if let Some(tag) = tag {
        present.tagged = manifest_digest(client, &destination.at_tag(tag)).await?;
    }
    Ok(present)
}

/// The digest `reference` resolves to, `None` if the registry does not have it.
pub async fn manifest_digest(
    client: &Client,
    reference: &Reference,
) -> anyhow::Result<Option<String>> {
    match client
        .fetch_manifest_digest(reference, &RegistryAuth::Anonymous)
        .await
    {
        Ok(digest) => Ok(Some(digest)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(describe(e, &format!("cannot read manifest {reference}"))),
    }
}

fn not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ServerError { code: 404, .. } => true,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
            )
        }),
        _ => false,
    }
}

/// What a copy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Blobs pushed.
    pub blobs_copied: usize,
    /// Blobs the destination already had.
    pub blobs_skipped: usize,
    /// Bytes of the blobs pushed.
    pub bytes_copied: u64,
    /// Manifests pushed.
    pub manifests_copied: usize,
    /// Manifests the destination already had.
    pub manifests_skipped: usize,
}

/// Copies `image` from `source` to `destination`: the blobs it lacks (each streamed
/// through, checked against its digest), the manifests it lacks (children before
/// the index, by digest) and, when `tag` is given, the tag onto the top manifest.
pub async fn copy(
    client: &Client,
    source: &Repository,
    destination: &Repository,
    image: &Image,
    tag: Option<&str>,
) -> anyhow::Result<Copied> {
    let present = present(client, destination, image, tag).await?;
    let mut copied = Copied::default();
    let from = source.at_digest(&image.digest);
    let to = destination.at_digest(&image.digest);
    for blob in &image.blobs {
        if present.blobs.contains(&blob.digest) {
            copied.blobs_skipped += 1;
            continue;
        }
        // Streamed through: the pull checks the bytes against the digest as they pass
        // and fails the stream on a mismatch, before the upload is committed (the
        // destination also checks the digest when it commits).
        let pulled = client.pull_blob_stream(&from, blob).await.map_err(|e| {
            describe(
                e,
                &format!("cannot copy blob {} from {}", blob.digest, source.registry),
            )
        })?;
        let stream = futures::TryStreamExt::map_err(pulled.stream, OciDistributionError::IoError);
        client
            .push_blob_stream(&to, stream, &blob.digest, u64::try_from(blob.size).ok())
            .await
            .map_err(|e| {
                describe(
                    e,
                    &format!(
                        "cannot copy blob {} from {} to {}",
                        blob.digest, source.registry, destination.registry
                    ),
                )
            })?;
        copied.bytes_copied += u64::try_from(blob.size).unwrap_or(0);
        copied.blobs_copied += 1;
    }
    for manifest in &image.manifests {
        if present.manifests.contains(&manifest.digest) {
            copied.manifests_skipped += 1;
            continue;
        }
        push_manifest(client, &destination.at_digest(&manifest.digest), manifest).await?;
        copied.manifests_copied += 1;
    }
    if let Some(tag) = tag
        && present.tagged.as_deref() != Some(image.digest.as_str())
    {
        let top = image
            .manifests
            .last()
            .expect("an image has its top manifest");
        push_manifest(client, &destination.at_tag(tag), top).await?;
    }
    // The destination must serve the image under the source's digest.
    match manifest_digest(client, &to).await? {
        Some(digest) if digest == image.digest => Ok(copied),
        other => bail!(
            "after the copy {} serves {other:?}, not {}",
            destination.pinned(&image.digest),
            image.digest
        ),
    }
}

async fn push_manifest(
    client: &Client,
    reference: &Reference,
    manifest: &Manifest,
) -> anyhow::Result<()> {
    let content_type = http::HeaderValue::from_str(&manifest.media_type)
        .with_context(|| format!("bad media type {:?}", manifest.media_type))?;
    client
        .push_manifest_raw(reference, manifest.bytes.clone(), content_type)
        .await
        .map_err(|e| describe(e, &format!("cannot push manifest {reference}")))?;
    Ok(())
}

/// An `oci-client` error with what was being done, and digest mismatches said plainly
/// (also one that failed a streamed blob, carried inside an I/O error).
fn describe(e: OciDistributionError, doing: &str) -> anyhow::Error {
    if let Some(mismatch) = digest_mismatch(&e) {
        return anyhow::anyhow!("digest mismatch: {doing}: {mismatch}");
    }
    let doing = if unauthorized(&e) {
        format!("unauthorized: {doing}")
    } else {
        doing.to_owned()
    };
    anyhow::Error::new(e).context(doing)
}

/// Whether the registry refused the request's credentials (or their absence): 401 or
/// 403, or a token realm that refused them.
fn unauthorized(e: &OciDistributionError) -> bool {
    let refused = |status: u16| status == 401 || status == 403;
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::ServerError { code, .. } => refused(*code),
        OciDistributionError::RequestError(e) => e.status().is_some_and(|s| refused(s.as_u16())),
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        _ => false,
    }
}

fn digest_mismatch(e: &OciDistributionError) -> Option<String> {
    match e {
        OciDistributionError::DigestError(digest) => Some(digest.to_string()),
        OciDistributionError::IoError(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<DigestError>())
            .map(ToString::to_string),
        _ => None,
    }
}

/// Reads blob `blob` of `repository` into memory, at most `limit` bytes (its
/// descriptor's size is checked first, and the bytes as they arrive), and checks the
/// bytes against its digest.
pub async fn pull_blob(
    client: &Client,
    repository: &Repository,
    blob: &OciDescriptor,
    limit: u64,
) -> anyhow::Result<Vec<u8>> {
    use futures::TryStreamExt as _;
    use sha2::Digest as _;
    let too_big = |size: u64| {
        anyhow::anyhow!(
            "blob {} of {} is {size} bytes, more than the {limit} allowed",
            blob.digest,
            repository.pinned(&blob.digest)
        )
    };
    let declared = u64::try_from(blob.size).unwrap_or(u64::MAX);
    if declared > limit {
        return Err(too_big(declared));
    }
    let pulled = client
        .pull_blob_stream(&repository.at_digest(&blob.digest), blob)
        .await
        .map_err(|e| {
            describe(
                e,
                &format!(
                    "cannot read blob {} from {}",
                    blob.digest, repository.registry
                ),
            )
        })?;
    let mut stream = pulled.stream;
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.try_next().await.map_err(|e| {
        describe(
            OciDistributionError::IoError(e),
            &format!(
                "cannot read blob {} from {}",
                blob.digest, repository.registry
            ),
        )
    })? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > limit {
            return Err(too_big(bytes.len() as u64));
        }
    }
    let actual = format!("sha256:{:x}", sha2::Sha256::digest(&bytes));
    if actual != blob.digest {
        bail!(
            "digest mismatch: blob {} of {} has digest {actual}",
            blob.digest,
            repository.registry
        );
    }
    Ok(bytes)
}

/// Pushes a one-layer OCI artefact into `destination` by digest (no tag): its `config`
/// and `layer` blobs (media type and bytes) and the manifest naming them. Returns the
/// manifest's digest, which the registry is checked to serve.
pub async fn push_artefact(
    client: &Client,
    destination: &Repository,
    config: (&str, &[u8]),
    layer: (&str, &[u8]),
) -> anyhow::Result<String> {
    use sha2::Digest as _;
    let digest_of = |bytes: &[u8]| format!("sha256:{:x}", sha2::Sha256::digest(bytes));
    let mut descriptors = Vec::new();
    for (media_type, bytes) in [config, layer] {
        let digest = digest_of(bytes);
        let reference = destination.at_digest(&digest);
        if !client.blob_exists(&reference, &digest).await.map_err(|e| {
            describe(
                e,
                &format!("cannot check blob {digest} in {}", destination.registry),
            )
        })? {
            client
                .push_blob(&reference, bytes.to_vec(), &digest)
                .await
                .map_err(|e| {
                    describe(
                        e,
                        &format!("cannot push blob {digest} to {}", destination.registry),
                    )
                })?;
        }
        descriptors.push(serde_json::json!({
            "mediaType": media_type, "digest": digest, "size": bytes.len(),
        }));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MEDIA_TYPE,
        "config": descriptors[0],
        "layers": [descriptors[1]],
    });
    let bytes = serde_json::to_vec(&manifest)?;
    let manifest = Manifest {
        digest: digest_of(&bytes),
        media_type: OCI_IMAGE_MEDIA_TYPE.to_owned(),
        bytes,
    };
    let reference = destination.at_digest(&manifest.digest);
    push_manifest(client, &reference, &manifest).await?;
    match manifest_digest(client, &reference).await? {
        Some(digest) if digest == manifest.digest => Ok(digest),
        other => bail!(
            "after the push {} serves {other:?}, not {}",
            destination.pinned(&manifest.digest),
            manifest.digest
        ),
    }
}
