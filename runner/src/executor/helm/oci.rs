//! A chart from an OCI registry, the way seed 002 wants every artefact: copied from the
//! vendor's registry into the install's (the `container_image` copy, by digest, with
//! the same credentials settings: `helm.sourceAuth`, `helm.destinationAuth`), then
//! pulled FROM THE INSTALL'S REGISTRY by that digest, its chart layer checked against
//! its digest and size-bounded, and handed to Helm as the archive it is: nothing is
//! unpacked onto the runner's disk (Helm's loader reads the archive in memory, refusing
//! entries outside the chart and oversized files).
//!
//! The chart is recognised by Helm's media types: config
//! `application/vnd.cncf.helm.config.v1+json`, one layer
//! `application/vnd.cncf.helm.chart.content.v1.tar+gzip` (a provenance layer, if
//! any, is copied and not used). Anything else is refused before it is copied.
//!
//! The copy runs at plan time (the diff is the rendering's dry-run, so the chart must be
//! read to plan) and pushes by digest only: no tag of the install's registry is moved,
//! so a Plan nobody approved changes no name the customer's tools use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use oci_client::manifest::OciDescriptor;
use serde_json::Value;

use crate::executor::image::ImageSync;
use crate::executor::image::registry::{self, Image, Repository};

/// Helm's chart config media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.cncf.helm.config.v1+json";
/// Helm's chart archive layer media type.
pub const CHART_MEDIA_TYPE: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// The largest chart archive the runner reads (Helm itself refuses charts that
/// decompress to more than 100 MiB).
pub const MAX_CHART_BYTES: u64 = 16 * 1024 * 1024;
/// Where pulled archives are kept, under the entity's work directory.
const PULLED_DIR: &str = "helm-charts";

/// A chart pulled from the install's registry.
#[derive(Clone, Debug, PartialEq)]
pub struct Pulled {
    /// The archive, as the install's registry served it, checked against its digest.
    pub archive: PathBuf,
    /// `install-registry/name@sha256:…`: where it was pulled from, by digest.
    pub reference: String,
    /// Where it was copied from: `vendor-registry/name@sha256:…`, or a repository
    /// archive's `URL@sha256:…`.
    pub source: String,
}

/// The copy `helm` (the rendered `helm` block, `chart: oci://…`) describes.
pub(crate) fn sync_of(helm: &Value) -> anyhow::Result<ImageSync> {
    let chart = helm
        .get("chart")
        .and_then(Value::as_str)
        .context("the helm source has no `chart`")?;
    let repository = chart
        .strip_prefix(outpost_api::chart_source::OCI_SCHEME)
        .with_context(|| format!("chart {chart} is not an oci:// reference"))?;
    let source = Repository::parse(repository).context("helm.chart")?;
    let version = helm
        .get("version")
        .and_then(Value::as_str)
        .with_context(|| format!("chart {chart} names no version (helm.version)"))?;
    // Helm stores a version's `+` (SemVer build metadata) as `_` in the tag.
    let tag = match version.split_once('@') {
        Some((tag, digest)) => format!("{}@{digest}", tag.replace('+', "_")),
        None => version.replace('+', "_"),
    };
    ImageSync::parse(helm, "helm", source, &tag)
}

/// Copies the chart `helm` names into the install's registry and pulls it from there
/// by digest into `work_dir`.
pub async fn pull(
    helm: &Value,
    env: &BTreeMap<String, String>,
    work_dir: &Path,
) -> anyhow::Result<Pulled> {
    let sync = sync_of(helm)?;
    let client = sync.client(env).await?;
    let vendor = sync.resolve_source(&client).await?;
    let source_text = sync.source_text();
    chart_layer(&vendor, &source_text)?;
    registry::copy(&client, sync.source(), sync.destination(), &vendor, None)
        .await
        .with_context(|| {
            format!(
                "cannot copy chart {source_text} into {} from {}",
                sync.install_registry(),
                sync.vendor_registry()
            )
        })?;
    let archive = pull_installed(
        &client,
        sync.destination(),
        &vendor.digest,
        &sync.install_registry(),
        work_dir,
    )
    .await?;
    Ok(Pulled {
        archive,
        reference: sync.destination().pinned(&vendor.digest),
        source: sync.source().pinned(&vendor.digest),
    })
}

/// Pulls chart `digest` from `destination` (the install's registry, `described` for
/// errors) by that digest into `work_dir`: its manifest checked against the digest, its
/// chart layer size-bounded and checked against its own. Returns the archive's path.
pub(crate) async fn pull_installed(
    client: &oci_client::Client,
    destination: &Repository,
    digest: &str,
    described: &str,
    work_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let reference = destination.pinned(digest);
    let installed = registry::resolve(client, destination, &destination.at_digest(digest))
        .await
        .with_context(|| format!("cannot read {reference} from {described}"))?;
    let layer = chart_layer(&installed, &reference)?;
    let bytes = registry::pull_blob(client, destination, &layer, MAX_CHART_BYTES)
        .await
        .with_context(|| format!("cannot pull chart {reference}"))?;
    let dir = work_dir.join(PULLED_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let hex = layer.digest.trim_start_matches("sha256:");
    let archive = dir.join(format!("{hex}.tgz"));
    std::fs::write(&archive, &bytes)
        .with_context(|| format!("cannot write {}", archive.display()))?;
    Ok(archive)
}

/// The chart archive layer of `artefact` (`what` names it), refusing what is not a
/// Helm chart.
fn chart_layer(artefact: &Image, what: &str) -> anyhow::Result<OciDescriptor> {
    let [top] = artefact.manifests.as_slice() else {
        bail!("{what} is an index of several manifests, not a Helm chart");
    };
    let manifest: Value = serde_json::from_slice(&top.bytes)
        .with_context(|| format!("the manifest of {what} is not JSON"))?;
    let config = manifest
        .pointer("/config/mediaType")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if config != CONFIG_MEDIA_TYPE {
        bail!("{what} is not a Helm chart: its config is {config:?}, not {CONFIG_MEDIA_TYPE}");
    }
    let layers: Vec<OciDescriptor> = manifest
        .get("layers")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .with_context(|| format!("a bad layer descriptor in {what}"))?
        .unwrap_or_default();
    let mut charts = layers
        .into_iter()
        .filter(|l| l.media_type == CHART_MEDIA_TYPE);
    match (charts.next(), charts.next()) {
        (Some(layer), None) => Ok(layer),
        _ => bail!("{what} is not a Helm chart: it must have exactly one {CHART_MEDIA_TYPE} layer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image(manifest: Value) -> Image {
        Image {
            digest: "sha256:top".into(),
            manifests: vec![registry::Manifest {
                digest: "sha256:top".into(),
                media_type: "application/vnd.oci.image.manifest.v1+json".into(),
                bytes: serde_json::to_vec(&manifest).unwrap(),
            }],
            blobs: Vec::new(),
        }
    }

    #[test]
    fn only_helm_charts_are_taken() {
        let layer = json!({"mediaType": CHART_MEDIA_TYPE, "digest": "sha256:c", "size": 3});
        let chart = json!({"config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": "sha256:a", "size": 2},
                           "layers": [layer]});
        assert_eq!(chart_layer(&image(chart), "x").unwrap().digest, "sha256:c");
        let container = json!({"config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": "sha256:a", "size": 2}, "layers": [layer]});
        assert!(
            chart_layer(&image(container), "r/web@sha256:top")
                .unwrap_err()
                .to_string()
                .starts_with("r/web@sha256:top is not a Helm chart: its config is"),
        );
        let twice = json!({"config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": "sha256:a", "size": 2},
                           "layers": [layer, layer]});
        assert!(chart_layer(&image(twice), "x").is_err());
    }

    #[test]
    fn the_version_is_the_tag_as_helm_stores_it() {
        let helm = json!({"chart": "oci://vendor.example/charts/shop", "version": "1.2.0+b1",
                          "destination": "127.0.0.1:5000/acme/shop"});
        let sync = sync_of(&helm).unwrap();
        assert_eq!(sync.source_text(), "vendor.example/charts/shop:1.2.0_b1");
        assert_eq!(
            sync.destination().pinned("sha256:x"),
            "127.0.0.1:5000/acme/shop@sha256:x"
        );
        let err = sync_of(&json!({"chart": "oci://vendor.example/charts/shop", "version": "1"}))
            .unwrap_err();
        assert!(err.to_string().contains("no destination"), "{err}");
        let err = sync_of(
            &json!({"chart": "oci://vendor.example/charts/shop", "version": "1",
            "destination": "127.0.0.1:5000/acme/shop",
            "sourceAuth": {"username": "v", "password": "plain"}}),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("helm.sourceAuth.password is not a secret reference"),
            "{err}"
        );
    }
}
