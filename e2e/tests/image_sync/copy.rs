//! The image copied by digest; a registry down, a digest mismatch, a moved tag.

use outpost_e2e::TestImage;

use super::*;

/// An open vendor registry holding the test image at tags 1.0 and 1.1 (two images).
async fn vendor_with_two_versions() -> (Registry, TestImage, TestImage) {
    let vendor = Registry::start().await;
    let v1 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    let v2 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.1", "1.1")
        .await;
    (vendor, v1, v2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_copied_by_digest_and_the_dependent_runs_the_copy() {
    let (vendor, v1, v2) = vendor_with_two_versions().await;
    let sync = start("1.0", vendor).await;
    sync.reaches(InstallPhase::Active).await;

    // The index, both platform manifests, both configs and all three layers were copied,
    // and the install's registry serves the image under the source digest.
    let first = sync.next_finished("web-image", &[]).await;
    assert_eq!(phase(&first), Some(PlanPhase::Succeeded), "{first:?}");
    let out = outputs(&first);
    let reference = format!("{}/{INSTALL_REPOSITORY}@{}", sync.install.host, v1.digest);
    assert_eq!(out["sourceDigest"], v1.digest.as_str(), "{out}");
    assert_eq!(out["destinationDigest"], v1.digest.as_str(), "{out}");
    assert_eq!(out["reference"], reference.as_str());
    assert_eq!(out["manifestsCopied"], 3, "{out}");
    assert_eq!(out["blobsCopied"], 5, "{out}");
    assert_eq!(out["blobsSkipped"], 0, "{out}");
    assert_eq!(
        sync.installed("1.0").await.as_deref(),
        Some(v1.digest.as_str())
    );
    for blob in &v1.blobs {
        assert!(
            sync.install.has_blob(INSTALL_REPOSITORY, blob).await,
            "{blob}"
        );
    }
    // The runner signed the digests into its audit log.
    let audited = sync.audit_of(&first);
    let outputs_event = audited
        .iter()
        .find(|e| e["type"] == "outputs")
        .unwrap_or_else(|| panic!("no outputs event: {audited:#?}"));
    assert_eq!(
        outputs_event["details"]["outputs"]["sourceDigest"],
        v1.digest.as_str()
    );
    assert_eq!(
        outputs_event["details"]["outputs"]["destinationDigest"],
        v1.digest.as_str()
    );
    // The dependent runs the copy, by digest.
    let web = sync.web().expect("web is deployed");
    assert_eq!(image_of(&web), reference);

    // Version 1.1 shares its base layer with 1.0: that blob is skipped, the rest copied.
    sync.set_tag("1.1");
    let second = sync.next_finished("web-image", &[first]).await;
    assert_eq!(phase(&second), Some(PlanPhase::Succeeded), "{second:?}");
    let out = outputs(&second);
    assert_eq!(out["sourceDigest"], v2.digest.as_str(), "{out}");
    assert_eq!(out["blobsCopied"], 4, "{out}");
    assert_eq!(out["blobsSkipped"], 1, "the shared layer: {out}");
    assert_eq!(v1.shared_layer, v2.shared_layer);
    let reference = format!("{}/{INSTALL_REPOSITORY}@{}", sync.install.host, v2.digest);
    eventually(120, "web to run 1.1's copy", async || {
        sync.web().filter(|w| image_of(w) == reference).map(drop)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vendor_registry_that_is_down_fails_the_sync_and_leaves_the_install_running() {
    let (vendor, v1, _) = vendor_with_two_versions().await;
    let mut sync = start("1.0", vendor).await;
    sync.reaches(InstallPhase::Active).await;
    let first = sync.next_finished("web-image", &[]).await;
    let web_plans = sync.plans_of("web").await;
    let before = sync.web().expect("web is deployed");

    sync.vendor.stop();
    sync.set_tag("1.1");
    let failed = sync.next_finished("web-image", &[first]).await;
    let status = failed.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "cannot read {}/{VENDOR_REPOSITORY}:1.1 from the vendor registry",
            sync.vendor.host
        )),
        "{message}"
    );
    sync.reaches(InstallPhase::Degraded).await;
    // Nothing was applied: no outputs of the failed sync, no new deploy of web, and the
    // running Deployment still runs 1.0's copy, unchanged.
    assert!(
        !sync
            .audit_of(&failed)
            .iter()
            .any(|e| e["type"] == "outputs"),
        "{:#?}",
        sync.audit_of(&failed)
    );
    assert_eq!(sync.plans_of("web").await.len(), web_plans.len());
    let after = sync.web().expect("web is still deployed");
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        image_of(&after),
        format!("{}/{INSTALL_REPOSITORY}@{}", sync.install.host, v1.digest)
    );
    assert_eq!(sync.installed("1.1").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_mismatch_fails_the_sync() {
    let (vendor, v1, v2) = vendor_with_two_versions().await;
    // The component pins 1.0 to 1.1's digest: the tag resolves to something else.
    let pinned = format!("1.0@{}", v2.digest);
    let sync = start(&pinned, vendor).await;
    let first = sync.next_finished("web-image", &[]).await;
    let status = first.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            format!(
                "plan failed: digest mismatch: {}/{VENDOR_REPOSITORY}:{pinned} resolves to {}, \
                 not the pinned {}",
                sync.vendor.host, v1.digest, v2.digest
            )
            .as_str()
        )
    );

    // The registry serves corrupted bytes for the layer both versions share: the bytes
    // fetched do not hash to the digest the manifest promised.
    let file = sync.vendor.blob_file(&v1.shared_layer);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[600] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    sync.set_tag("1.0");
    let second = sync.next_finished("web-image", &[first]).await;
    let status = second.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "digest mismatch: cannot copy blob {}",
            v1.shared_layer
        )),
        "{message}"
    );
    // Neither attempt deployed web or tagged anything in the install's registry.
    assert!(sync.plans_of("web").await.is_empty());
    assert!(sync.web().is_none());
    assert_eq!(sync.installed("1.0").await, None);
    assert!(
        !sync
            .install
            .has_blob(INSTALL_REPOSITORY, &v1.shared_layer)
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_moved_in_the_install_registry_is_drift() {
    let vendor = Registry::start().await;
    let v1 = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    let sync = start("1.0", vendor).await;
    sync.reaches(InstallPhase::Active).await;
    let reports: Api<DriftReport> = Api::namespaced(sync.cp.client().await, "default");
    let report = format!("{INSTALL}-web-image");
    drift_report_in_sync(&sync.cp, &report, 60).await;

    // Someone points the install registry's 1.0 at another image.
    let other = sync
        .install
        .push_test_image(INSTALL_REPOSITORY, "1.0", "other")
        .await;
    assert_ne!(other.digest, v1.digest);
    // Observed on the component's schedule (30 s).
    let drifted = eventually(90, "a DriftReport naming the digest", async || {
        let found = reports.get_opt(&report).await.ok()??;
        found
            .spec
            .diff
            .iter()
            .any(|d| d.path.ends_with("digest") && d.live == Some(json!(other.digest)))
            .then_some(found)
    })
    .await;
    assert!(!drifted.spec.in_sync);
    let entry = drifted
        .spec
        .diff
        .iter()
        .find(|d| d.path.ends_with("digest"))
        .unwrap();
    assert_eq!(entry.desired, Some(json!(v1.digest)), "{entry:?}");
}
