//! The `container_image` executor: copies the vendor's image by digest into the
//! install's registry, so that what the install runs is pinned and served from the
//! customer's own account.
//!
//! * **plan**: resolves the source (`repository` at `tag`) in the vendor registry and
//!   reads every manifest (an index and each child), checking each against the digest
//!   that named it; a tag pinned to a digest (`1.8.2@sha256:…`, or just `sha256:…`)
//!   must resolve to exactly that digest. Then asks the destination which manifests
//!   and blobs it already has. The vendor registry being unreachable fails here, before
//!   anything is applied.
//! * **apply**: copies by the digest the plan resolved: blobs the destination lacks
//!   (each checked against its digest before it is pushed), manifests children first,
//!   then the tag. Outputs: `sourceDigest`, `destinationDigest`, `reference`
//!   (`install-registry/name@sha256:…`, what dependents' templates use), `source`, and
//!   what was copied and skipped (`blobsCopied`, `blobsSkipped`, `bytesCopied`,
//!   `manifestsCopied`, `manifestsSkipped`); the runner signs them into the audit log.
//! * **observe**: what the destination's tag (or the digest) resolves to now.
//! * **teardown**: nothing; images stay in the install's registry (other deploys may
//!   still run them).
//!
//! Registries are reached over HTTPS, or plain HTTP on loopback, with the credentials
//! the component names (`image.sourceAuth`, `image.destinationAuth`; [`auth`]):
//! secrets from the customer's store, or an ECR token for the Plan's role; anonymously
//! without. A registry that refuses them fails the Plan ("unauthorized"), at plan time
//! when it is read then.

pub mod auth;
pub(crate) mod registry;

use anyhow::{Context as _, bail};
use futures::future::BoxFuture;
use outpost_api::{Operation, PolicyInput};
use serde_json::{Value, json};
use std::collections::BTreeMap;

use self::auth::Access;
use self::registry::{Image, Repository};
use super::{Applied, Diff, Executor, ExecutorError, StepContext, typed};

/// Copies `container_image` components into the install's registry.
#[derive(Clone, Debug, Default)]
pub struct ImageExecutor;

impl ImageExecutor {
    /// The executor; registries are named by each component.
    pub fn new() -> Self {
        ImageExecutor
    }
}

/// What one copy into the install's registry copies: a `container_image` component's
/// rendered source, or a `helm_chart` component's chart from an OCI registry.
#[derive(Clone, Debug)]
pub(crate) struct ImageSync {
    source: Repository,
    /// The tag, when the component names one.
    tag: Option<String>,
    /// The digest the component pins, when it names one.
    pinned: Option<String>,
    destination: Repository,
    /// How the vendor registry is reached.
    source_access: Access,
    /// How the install's registry is reached.
    destination_access: Access,
    /// The settings that say how each registry is reached (`image.sourceAuth`,
    /// `image.destinationAuth`), as error messages name them.
    auth_fields: (String, String),
}

impl ImageSync {
    fn from_desired(desired: &Value) -> anyhow::Result<Self> {
        let image = desired
            .get("image")
            .or_else(|| desired.pointer("/component/image"))
            .context("the desired state has no `image` (a container_image component)")?;
        let field = |name: &str| image.get(name).and_then(Value::as_str);
        let source = Repository::parse(field("repository").context("the image has no repository")?)
            .context("image.repository")?;
        let tag = field("tag").context("the image has no tag")?;
        Self::parse(image, "image", source, tag)
    }

    /// The copy `block` (the rendered `image` or `helm`, `prefix` naming it) describes,
    /// from `source` at `tag` (`TAG`, `TAG@sha256:…` or `sha256:…`) to its
    /// `destination`, reaching the registries as its `sourceAuth` and
    /// `destinationAuth` say.
    pub(crate) fn parse(
        block: &Value,
        prefix: &str,
        source: Repository,
        tag: &str,
    ) -> anyhow::Result<Self> {
        let destination = Repository::parse(
            block
                .get("destination")
                .and_then(Value::as_str)
                .with_context(|| {
                    format!(
                        "the {prefix} names no destination repository in the install's registry"
                    )
                })?,
        )
        .with_context(|| format!("{prefix}.destination"))?;
        let tag_field = if prefix == "helm" {
            "helm.version".to_owned()
        } else {
            format!("{prefix}.tag")
        };
        let (tag, pinned) = match tag.split_once('@') {
            Some((tag, digest)) => (Some(tag.to_owned()), Some(digest.to_owned())),
            None if tag.starts_with("sha256:") => (None, Some(tag.to_owned())),
            None => (Some(tag.to_owned()), None),
        };
        if let Some(digest) = &pinned
            && !is_digest(digest)
        {
            bail!("{tag_field} pins {digest:?}, which is not a sha256:<64 hex> digest");
        }
        let auth_fields = (
            format!("{prefix}.sourceAuth"),
            format!("{prefix}.destinationAuth"),
        );
        let source_access = Access::from_desired(
            block.get("sourceAuth"),
            &auth_fields.0,
            &source.registry,
            false,
        )?;
        let destination_access = Access::from_desired(
            block.get("destinationAuth"),
            &auth_fields.1,
            &destination.registry,
            true,
        )?;
        Ok(ImageSync {
            source,
            tag,
            pinned,
            destination,
            source_access,
            destination_access,
            auth_fields,
        })
    }

    /// The vendor's artefact resolved at the tag (or pinned digest), every manifest
    /// read and checked; a pin must be what the tag resolves to.
    pub(crate) async fn resolve_source(
        &self,
        client: &oci_client::Client,
    ) -> anyhow::Result<Image> {
        let source = self.source_text();
        let image = registry::resolve(client, &self.source, &self.source_reference())
            .await
            .with_context(|| format!("cannot read {source} from {}", self.vendor_registry()))?;
        if let Some(pinned) = &self.pinned
            && *pinned != image.digest
        {
            bail!(
                "digest mismatch: {source} resolves to {}, not the pinned {pinned}",
                image.digest
            );
        }
        Ok(image)
    }

    /// The repository in the vendor's registry.
    pub(crate) fn source(&self) -> &Repository {
        &self.source
    }

    /// The repository in the install's registry.
    pub(crate) fn destination(&self) -> &Repository {
        &self.destination
    }

    /// `repository:tag`, `repository@digest` or `repository:tag@digest`.
    pub(crate) fn source_text(&self) -> String {
        let mut text = format!("{}/{}", self.source.registry, self.source.name);
        if let Some(tag) = &self.tag {
            text = format!("{text}:{tag}");
        }
        if let Some(digest) = &self.pinned {
            text = format!("{text}@{digest}");
        }
        text
    }

    /// What the image is read by at plan time: the tag (checked against the pin
    /// afterwards) or the pinned digest.
    fn source_reference(&self) -> oci_client::Reference {
        match (&self.tag, &self.pinned) {
            (Some(tag), _) => self.source.at_tag(tag),
            (None, Some(digest)) => self.source.at_digest(digest),
            (None, None) => unreachable!("from_desired always sets a tag or a digest"),
        }
    }

    /// A client of both registries with their credentials (secrets resolved from
    /// `env`, the step's environment).
    pub(crate) async fn client(
        &self,
        env: &BTreeMap<String, String>,
    ) -> anyhow::Result<oci_client::Client> {
        let source = self
            .source_access
            .resolve(&self.source.registry, env)
            .await
            .with_context(|| {
                format!(
                    "no credentials for the vendor registry {}",
                    self.source.registry
                )
            })?;
        let destination = self
            .destination_access
            .resolve(&self.destination.registry, env)
            .await
            .with_context(|| {
                format!(
                    "no credentials for the install's registry {}",
                    self.destination.registry
                )
            })?;
        registry::client(&[(&self.source, source), (&self.destination, destination)]).await
    }

    /// `the vendor registry HOST anonymously (image.sourceAuth is not set)`.
    pub(crate) fn vendor_registry(&self) -> String {
        format!(
            "the vendor registry {} {}",
            self.source.registry,
            self.source_access.describe(&self.auth_fields.0)
        )
    }

    /// `the install's registry HOST as "user" (image.destinationAuth)`.
    pub(crate) fn install_registry(&self) -> String {
        format!(
            "the install's registry {} {}",
            self.destination.registry,
            self.destination_access.describe(&self.auth_fields.1)
        )
    }
}

fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl ImageExecutor {
    async fn plan_sync(&self, ctx: &StepContext) -> anyhow::Result<Diff> {
        if ctx.operation == Operation::Teardown {
            return Ok(Diff {
                input: PolicyInput::Images,
                document: json!({"images": []}),
                summary: "images stay in the install's registry".into(),
                changes: false,
                resources: None,
                basis: Value::Null,
            });
        }
        let sync = ImageSync::from_desired(&ctx.desired)?;
        let client = sync.client(&ctx.env).await?;
        let source = sync.source_text();
        let image = sync.resolve_source(&client).await?;
        let present = registry::present(&client, &sync.destination, &image, sync.tag.as_deref())
            .await
            .with_context(|| format!("cannot read {}", sync.install_registry()))?;
        let blobs_missing = image
            .blobs
            .iter()
            .filter(|b| !present.blobs.contains(&b.digest))
            .count();
        let manifests_missing = image
            .manifests
            .iter()
            .filter(|m| !present.manifests.contains(&m.digest))
            .count();
        let retag = sync.tag.is_some() && present.tagged.as_deref() != Some(image.digest.as_str());
        let destination = sync.destination.pinned(&image.digest);
        Ok(Diff {
            input: PolicyInput::Images,
            document: json!({
                "images": [{
                    "reference": sync.source.pinned(&image.digest),
                    "digest": image.digest,
                    "source": source,
                    "destination": destination,
                }],
                "copy": {
                    "manifests": image.manifests.len(),
                    "manifestsMissing": manifests_missing,
                    "blobs": image.blobs.len(),
                    "blobsMissing": blobs_missing,
                    "retag": retag,
                },
            }),
            summary: format!(
                "{source} is {}: {manifests_missing} of {} manifests and {blobs_missing} of {} \
                 blobs to copy to {destination}",
                image.digest,
                image.manifests.len(),
                image.blobs.len()
            ),
            changes: blobs_missing > 0 || manifests_missing > 0 || retag,
            resources: None,
            basis: Value::Null,
        })
    }

    async fn apply_sync(&self, ctx: &StepContext, diff: &Diff) -> anyhow::Result<Applied> {
        if ctx.operation == Operation::Teardown {
            return Ok(Applied::default());
        }
        let sync = ImageSync::from_desired(&ctx.desired)?;
        let digest = diff
            .document
            .pointer("/images/0/digest")
            .and_then(Value::as_str)
            .context("the plan resolved no digest")?;
        let client = sync.client(&ctx.env).await?;
        // By the digest the plan resolved: a tag moved since is not copied unseen.
        let image = registry::resolve(&client, &sync.source, &sync.source.at_digest(digest))
            .await
            .with_context(|| {
                format!(
                    "cannot read {} from {}",
                    sync.source.pinned(digest),
                    sync.vendor_registry()
                )
            })?;
        let copied = registry::copy(
            &client,
            &sync.source,
            &sync.destination,
            &image,
            sync.tag.as_deref(),
        )
        .await
        .with_context(|| {
            format!(
                "cannot copy into {} from {}",
                sync.install_registry(),
                sync.vendor_registry()
            )
        })?;
        let reference = sync.destination.pinned(&image.digest);
        let outputs = [
            ("sourceDigest", json!(image.digest)),
            ("destinationDigest", json!(image.digest)),
            ("reference", json!(reference)),
            ("source", json!(sync.source.pinned(&image.digest))),
            ("manifestsCopied", json!(copied.manifests_copied)),
            ("manifestsSkipped", json!(copied.manifests_skipped)),
            ("blobsCopied", json!(copied.blobs_copied)),
            ("blobsSkipped", json!(copied.blobs_skipped)),
            ("bytesCopied", json!(copied.bytes_copied)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Ok(Applied {
            outputs,
            log: format!(
                "copied {} to {reference}: {} manifests and {} blobs ({} bytes) copied, {} \
                 manifests and {} blobs already there\n",
                sync.source_text(),
                copied.manifests_copied,
                copied.blobs_copied,
                copied.bytes_copied,
                copied.manifests_skipped,
                copied.blobs_skipped
            ),
            last_applied: self.state(&sync, Some(&image.digest)),
            audit: Default::default(),
        })
    }

    /// The normalised state drift compares: the destination, its tag, and the digest
    /// the tag (or, untagged, the pinned reference) resolves to.
    fn state(&self, sync: &ImageSync, digest: Option<&str>) -> Value {
        json!({
            "destination": format!("{}/{}", sync.destination.registry, sync.destination.name),
            "tag": sync.tag,
            "digest": digest,
        })
    }

    async fn observe_sync(&self, ctx: &StepContext, last_applied: &Value) -> anyhow::Result<Value> {
        let sync = ImageSync::from_desired(&ctx.desired)?;
        let client = sync.client(&ctx.env).await?;
        let digest = match &sync.tag {
            Some(tag) => registry::manifest_digest(&client, &sync.destination.at_tag(tag)).await?,
            None => {
                let applied = last_applied
                    .get("digest")
                    .and_then(Value::as_str)
                    .context("the baseline has no digest")?;
                registry::manifest_digest(&client, &sync.destination.at_digest(applied)).await?
            }
        };
        Ok(self.state(&sync, digest.as_deref()))
    }
}

impl Executor for ImageExecutor {
    /// A copy cut halfway is planned again against the destination registry: the image
    /// already there is not copied again.
    fn resumable(&self) -> bool {
        true
    }

    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(self.plan_sync(ctx))
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(self.apply_sync(ctx, diff))
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(self.observe_sync(ctx, last_applied))
    }
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
