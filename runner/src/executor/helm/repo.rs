//! A chart from an HTTP chart repository (`helm.repository`, `helm.chart` a chart name,
//! `helm.version`), brought under seed 002 like an OCI chart: the runner reads the
//! repository's `index.yaml`, downloads the version's archive and checks it against the
//! digest the index gives (no digest, no chart), pushes it into the install's registry
//! (`helm.destination`) as a Helm OCI artefact, by digest only (Helm's media types; the
//! config is the index entry's chart metadata), and then pulls it from there by that
//! digest, as [`super::oci`] does. `helm.sourceAuth` (a user and password, or a token)
//! is sent to the repository's own origin only.
//!
//! The repository is reached over HTTPS, or plain HTTP on loopback; `index.yaml` and the
//! archive are each read up to [`MAX_INDEX_BYTES`] and [`oci::MAX_CHART_BYTES`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use oci_client::secrets::RegistryAuth;
use reqwest::Url;
use serde_json::Value;
use sha2::Digest as _;

use super::oci::{self, CHART_MEDIA_TYPE, CONFIG_MEDIA_TYPE, Pulled};
use crate::executor::image::auth::Access;
use crate::executor::image::registry::{self, Repository};

/// The largest `index.yaml` the runner reads.
pub const MAX_INDEX_BYTES: u64 = 16 * 1024 * 1024;
/// Index entry fields that are about the repository, not the chart: left out of the
/// chart's config.
const NOT_METADATA: [&str; 4] = ["urls", "created", "digest", "removed"];

/// Copies the chart `helm` names from its HTTP repository into the install's registry
/// and pulls it from there by digest into `work_dir`.
pub async fn pull(
    helm: &Value,
    env: &BTreeMap<String, String>,
    work_dir: &Path,
) -> anyhow::Result<Pulled> {
    let text = |name: &str| helm.get(name).and_then(Value::as_str);
    let repository = text("repository").context("the helm source has no `repository`")?;
    let name = text("chart").context("the helm source has no `chart`")?;
    let version =
        text("version").with_context(|| format!("chart {name} names no version (helm.version)"))?;
    let base = Url::parse(&format!("{}/", repository.trim_end_matches('/')))
        .with_context(|| format!("helm.repository {repository:?} is not a URL"))?;
    allowed(&base).context("helm.repository")?;
    let source_access =
        Access::from_desired(helm.get("sourceAuth"), "helm.sourceAuth", repository, false)?;
    let source_auth = match &source_access {
        Access::Ecr => bail!("helm.sourceAuth: ecr is for registries, not chart repositories"),
        access => access.resolve(repository, env).await?,
    };
    let destination = Repository::parse(
        text("destination")
            .context("the helm names no destination repository in the install's registry")?,
    )
    .context("helm.destination")?;
    let destination_access = Access::from_desired(
        helm.get("destinationAuth"),
        "helm.destinationAuth",
        &destination.registry,
        true,
    )?;
    let install_registry = format!(
        "the install's registry {} {}",
        destination.registry,
        destination_access.describe("helm.destinationAuth")
    );
    let repository_text = format!(
        "the chart repository {repository} {}",
        source_access.describe("helm.sourceAuth")
    );

    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .build()
        .context("cannot build the HTTP client")?;
    let index_url = base.join("index.yaml")?;
    let index = get(&http, &base, &index_url, &source_auth, MAX_INDEX_BYTES)
        .await
        .with_context(|| format!("cannot read {index_url} from {repository_text}"))?;
    let index: Value = serde_saphyr::from_slice(&index)
        .with_context(|| format!("{index_url} is not a chart repository index"))?;
    let entry = index
        .pointer(&format!("/entries/{name}"))
        .and_then(Value::as_array)
        .and_then(|versions| versions.iter().find(|e| e["version"] == version))
        .with_context(|| format!("{index_url} has no chart {name} at version {version}"))?;
    let expected = entry
        .get("digest")
        .and_then(Value::as_str)
        .map(|d| d.trim_start_matches("sha256:").to_ascii_lowercase())
        .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
        .with_context(|| {
            format!("{index_url} gives no sha256 digest for {name} {version}: it cannot be checked")
        })?;
    let url = entry
        .pointer("/urls/0")
        .and_then(Value::as_str)
        .with_context(|| format!("{index_url} gives no URL for {name} {version}"))?;
    let url = base
        .join(url)
        .with_context(|| format!("{index_url}: {url:?} is not a URL"))?;
    allowed(&url)?;
    let archive = get(&http, &base, &url, &source_auth, oci::MAX_CHART_BYTES)
        .await
        .with_context(|| format!("cannot read {url} from {repository_text}"))?;
    let actual = format!("{:x}", sha2::Sha256::digest(&archive));
    if actual != expected {
        bail!("digest mismatch: {url} has sha256:{actual}, the index says sha256:{expected}");
    }

    let mut metadata = entry.as_object().cloned().unwrap_or_default();
    metadata.retain(|key, _| !NOT_METADATA.contains(&key.as_str()));
    let config = serde_json::to_vec(&metadata)?;
    let auth = destination_access
        .resolve(&destination.registry, env)
        .await
        .with_context(|| format!("no credentials for {install_registry}"))?;
    let client = registry::client(&[(&destination, auth)]).await?;
    let digest = registry::push_artefact(
        &client,
        &destination,
        (CONFIG_MEDIA_TYPE, &config),
        (CHART_MEDIA_TYPE, &archive),
    )
    .await
    .with_context(|| format!("cannot copy chart {url} into {install_registry}"))?;
    let archive =
        oci::pull_installed(&client, &destination, &digest, &install_registry, work_dir).await?;
    Ok(Pulled {
        archive,
        reference: destination.pinned(&digest),
        source: format!("{url}@sha256:{actual}"),
    })
}

/// Refuses a URL other than HTTPS, or plain HTTP to a loopback host.
fn allowed(url: &Url) -> anyhow::Result<()> {
    let host = url.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => bail!("{url}: a chart repository is reached over https (plain http on loopback only)"),
    }
}

/// GETs `url`, at most `limit` bytes; credentials go only to `base`'s origin.
async fn get(
    http: &reqwest::Client,
    base: &Url,
    url: &Url,
    auth: &RegistryAuth,
    limit: u64,
) -> anyhow::Result<Vec<u8>> {
    let mut request = http.get(url.clone());
    if url.origin() == base.origin() {
        request = match auth {
            RegistryAuth::Basic(user, password) => request.basic_auth(user, Some(password)),
            RegistryAuth::Bearer(token) => request.bearer_auth(token),
            RegistryAuth::Anonymous => request,
        };
    }
    let mut response = request.send().await?;
    let status = response.status();
    if !status.is_success() {
        let refused = matches!(status.as_u16(), 401 | 403);
        bail!(
            "{}HTTP {status}",
            if refused { "unauthorized: " } else { "" }
        );
    }
    if response.content_length().is_some_and(|n| n > limit) {
        bail!("it is more than the {limit} bytes allowed");
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > limit {
            bail!("it is more than the {limit} bytes allowed");
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http() {
        for ok in [
            "https://charts.example/",
            "http://127.0.0.1:8080/",
            "http://localhost/x/",
        ] {
            assert!(allowed(&Url::parse(ok).unwrap()).is_ok(), "{ok}");
        }
        for refused in ["http://charts.example/", "file:///etc/", "ftp://127.0.0.1/"] {
            assert!(allowed(&Url::parse(refused).unwrap()).is_err(), "{refused}");
        }
    }
}
