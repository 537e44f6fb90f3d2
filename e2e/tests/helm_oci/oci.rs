//! OCI charts: pulled by the digest planned; a malformed one refused.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_chart_is_pulled_from_the_install_registry_by_the_digest_planned() {
    let stand = start().await;
    let first = stand.push_chart("v1", &[]).await;
    let vendor_repository = format!("{VENDOR_NAMESPACE}/shop");

    // Without the vendor's credentials: fails closed, nothing copied, nothing applied.
    let anonymous = stand.component(json!({"destinationAuth": credentials()["destinationAuth"]}));
    ready_plan(&stand.plans, INSTALL, "oci-0", "shop", anonymous, json!([])).await;
    let message = stand.fails("oci-0").await;
    assert!(
        message.contains(&format!(
            "the vendor registry {} anonymously (helm.sourceAuth is not set)",
            stand.vendor.host
        )) && message.contains("unauthorized"),
        "{message}"
    );
    assert!(!stand.install.has_manifest(INSTALL_REPOSITORY, &first).await);
    assert_eq!(stand.config_maps(), Vec::<String>::new());

    // Planned: copied under the vendor's digest (no tag moved), rendered from the
    // install's registry, waiting for a person.
    ready_plan(
        &stand.plans,
        INSTALL,
        "oci-1",
        "shop",
        stand.component(credentials()),
        json!([]),
    )
    .await;
    let waiting = stand.reaches("oci-1", PlanPhase::AwaitingApproval).await;
    assert!(
        diff_changes(&waiting)
            .contains(&("ConfigMap/shop/shop-web".to_owned(), ChangeAction::Create)),
        "{:?}",
        diff_changes(&waiting)
    );
    let planned_from = format!("{}/{INSTALL_REPOSITORY}@{first}", stand.install.host);
    assert_eq!(source(&waiting), Some(planned_from.clone()));
    assert!(stand.install.has_manifest(INSTALL_REPOSITORY, &first).await);
    assert_eq!(
        stand.install.digest_of(INSTALL_REPOSITORY, VERSION).await,
        None
    );
    assert_eq!(
        stand.config_maps(),
        Vec::<String>::new(),
        "nothing applied yet"
    );

    // The vendor moves the version to other content before the approval.
    let second = stand
        .push_chart(
            "v2",
            &[(
                "v2.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-v2\ndata: {}\n",
            )],
        )
        .await;
    assert_ne!(first, second);
    assert_eq!(
        stand
            .vendor
            .digest_of(&vendor_repository, VERSION)
            .await
            .as_deref(),
        Some(second.as_str())
    );

    // Approved: the planned rendering (the first digest) is applied, and named.
    approve(&stand.plans, &waiting).await.unwrap();
    let applied = stand.reaches("oci-1", PlanPhase::Succeeded).await;
    let outputs = json!(applied.status.clone().unwrap_or_default().outputs);
    assert_eq!(outputs["chart"], json!(planned_from), "{outputs}");
    assert_eq!(
        outputs["chartSource"],
        json!(format!("{}/{vendor_repository}@{first}", stand.vendor.host))
    );
    assert_eq!(source(&applied), Some(planned_from.clone()));
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-web"]);
    let greeting = stand.greeting();
    assert_eq!(greeting, "from-the-registry");

    // The next Plan takes the version's new digest, through the install's registry.
    ready_plan(
        &stand.plans,
        INSTALL,
        "oci-2",
        "shop",
        stand.component(credentials()),
        json!([]),
    )
    .await;
    let waiting = stand.reaches("oci-2", PlanPhase::AwaitingApproval).await;
    assert_eq!(
        diff_changes(&waiting),
        [("ConfigMap/shop/shop-v2".to_owned(), ChangeAction::Create)]
    );
    assert!(
        stand
            .install
            .has_manifest(INSTALL_REPOSITORY, &second)
            .await
    );
    assert_eq!(
        source(&waiting),
        Some(format!(
            "{}/{INSTALL_REPOSITORY}@{second}",
            stand.install.host
        ))
    );
    approve(&stand.plans, &waiting).await.unwrap();
    let applied = stand.reaches("oci-2", PlanPhase::Succeeded).await;
    let outputs = json!(applied.status.clone().unwrap_or_default().outputs);
    assert_eq!(
        outputs["chart"],
        json!(format!(
            "{}/{INSTALL_REPOSITORY}@{second}",
            stand.install.host
        ))
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-v2", "shop-web"]);

    // The install's registry serves corrupted bytes for the chart (the vendor's copy is
    // intact): what is rendered comes from the install's registry, checked, so the Plan
    // fails and nothing changes.
    let reference = oci_client::Reference::with_digest(
        stand.install.host.clone(),
        INSTALL_REPOSITORY.to_owned(),
        second.clone(),
    );
    let (manifest, _) = stand
        .install
        .client()
        .await
        .pull_image_manifest(&reference, &stand.install.auth())
        .await
        .unwrap();
    let layer = &manifest.layers[0];
    assert_eq!(
        layer.media_type,
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    );
    let file = stand.install.blob_file(&layer.digest);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    ready_plan(
        &stand.plans,
        INSTALL,
        "oci-3",
        "shop",
        stand.component(credentials()),
        json!([]),
    )
    .await;
    let message = stand.fails("oci-3").await;
    assert!(
        message.contains(&format!(
            "cannot pull chart {}/{INSTALL_REPOSITORY}@{second}",
            stand.install.host
        )) && message.contains("digest mismatch"),
        "{message}"
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-v2", "shop-web"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_oci_chart_is_refused_naming_the_field_and_nothing_is_stored() {
    const COMPONENTS: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/components";
    const JSON: (&str, &str) = ("content-type", "application/json");
    let cp = ControlPlane::start(Backend::Embedded).await;
    let component = |helm: Value| {
        let mut block = json!({"chart": "oci://registry.vendor.example/charts/shop",
            "version": "1.2.0", "destination": "registry.acme.example/acme/shop"});
        for (key, value) in helm.as_object().unwrap() {
            block[key] = value.clone();
        }
        json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
            "metadata": {"name": "shop"},
            "spec": {"app": "shop", "type": "helm_chart", "helm": block}})
    };
    for (helm, field) in [
        (
            json!({"chart": "oci://registry.vendor.example/charts/shop:1.2.0"}),
            "spec.helm.chart",
        ),
        (
            json!({"chart": "oci://registry.vendor.example"}),
            "spec.helm.chart",
        ),
        (json!({"version": "1.2.0@sha256:abc"}), "spec.helm.version"),
        (json!({"version": null}), "spec.helm.version"),
        (json!({"destination": "acme-shop"}), "spec.helm.destination"),
        (json!({"destination": null}), "spec.helm.destination"),
        (
            json!({"chart": "shop", "repository": "ftp://charts.vendor.example"}),
            "spec.helm.repository",
        ),
        (
            json!({"chart": "stable/shop", "repository": "https://charts.vendor.example"}),
            "spec.helm.chart",
        ),
        (
            json!({"sourceAuth": {"username": VENDOR_USER, "password": VENDOR_PASSWORD}}),
            "spec.helm.sourceAuth.password",
        ),
    ] {
        let body = component(helm).to_string();
        cp.post_refused_as_invalid(COMPONENTS, &body, field, VENDOR_PASSWORD)
            .await;
    }
    let runner = create_install(&cp, INSTALL, "prompt").await;
    let reply = cp
        .raw(
            Some(&runner),
            "POST",
            COMPONENTS,
            &[JSON],
            component(json!({})).to_string(),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    let listed = cp
        .raw(Some(&cp.admin_token), "GET", COMPONENTS, &[], "")
        .await;
    assert_eq!(listed.json["items"], json!([]), "{}", listed.text);
    // The well-formed one is stored.
    let created = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            COMPONENTS,
            &[JSON],
            component(json!({})).to_string(),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
}
