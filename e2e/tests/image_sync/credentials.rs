//! Private registries: the runner's secrets, wrong or missing credentials, ECR tokens, plain-text credentials refused.

use super::*;

/// Asserts that `registry` refuses anonymous pulls and pushes.
async fn refuses_anonymous(registry: &Registry) {
    use oci_client::client::{ClientConfig, ClientProtocol};
    use oci_client::secrets::RegistryAuth;
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let reference = registry.reference(VENDOR_REPOSITORY, "1.0");
    let pull = client
        .pull_manifest_raw(
            &reference,
            &RegistryAuth::Anonymous,
            &[oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE],
        )
        .await
        .expect_err("an anonymous pull is refused");
    assert!(
        matches!(
            pull,
            oci_client::errors::OciDistributionError::UnauthorizedError { .. }
        ),
        "{pull:?}"
    );
    let blob = b"anonymous".to_vec();
    let digest = outpost_e2e::sha256(&blob);
    client
        .push_blob(&reference, blob, &digest)
        .await
        .expect_err("an anonymous push is refused");
    assert!(!registry.has_blob(VENDOR_REPOSITORY, &digest).await);
}

/// A vendor registry with the test image at 1.0 and an install registry, each
/// requiring its user's password and refusing anonymous pulls and pushes.
async fn private_registries() -> (Registry, Registry, outpost_e2e::TestImage) {
    let vendor = Registry::start_with_htpasswd(VENDOR_USER, VENDOR_PASSWORD).await;
    let install = Registry::start_with_htpasswd(INSTALL_USER, INSTALL_PASSWORD).await;
    let image = vendor
        .push_test_image(VENDOR_REPOSITORY, "1.0", "1.0")
        .await;
    refuses_anonymous(&vendor).await;
    refuses_anonymous(&install).await;
    (vendor, install, image)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_registries_are_reached_with_the_runners_secrets_which_appear_nowhere() {
    let (vendor, install, v1) = private_registries().await;
    let image = format!(
        "    sourceAuth:\n      username: {VENDOR_USER}\n      password: \"{{{{ secrets.vendor_pull_token }}}}\"\n{DESTINATION_AUTH}"
    );
    let sync = start_with(
        "1.0",
        vendor,
        install,
        Credentials {
            image: &image,
            secrets: &[
                ("vendor_pull_token", VENDOR_PASSWORD),
                ("image_registry_password", INSTALL_PASSWORD),
            ],
        },
    )
    .await;
    sync.reaches(InstallPhase::Active).await;
    let plan = sync.next_finished("web-image", &[]).await;
    assert_eq!(phase(&plan), Some(PlanPhase::Succeeded), "{plan:?}");
    let out = outputs(&plan);
    assert_eq!(out["sourceDigest"], v1.digest.as_str(), "{out}");
    assert_eq!(out["blobsCopied"], 5, "{out}");
    assert_eq!(
        sync.installed("1.0").await.as_deref(),
        Some(v1.digest.as_str())
    );

    // The Plans hold the references; no Plan (desired state, status, log) or audit
    // event the API serves, nor the runner's audit log, holds either credential.
    let plans =
        serde_json::to_string(&sync.plans.list(&ListParams::default()).await.unwrap().items)
            .unwrap();
    assert!(
        plans.contains("${outpost-secret:vendor_pull_token}"),
        "{plans}"
    );
    let events: Api<outpost_api::AuditEvent> = Api::namespaced(sync.cp.client().await, "default");
    let events =
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap();
    let audit = std::fs::read_to_string(sync.state.join("audit.jsonl")).unwrap();
    for secret in [VENDOR_PASSWORD, INSTALL_PASSWORD] {
        assert!(!plans.contains(secret), "a Plan holds {secret}");
        assert!(!events.contains(secret), "an AuditEvent holds {secret}");
        assert!(!audit.contains(secret), "the audit log holds {secret}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_or_with_wrong_credentials_the_sync_fails_closed() {
    let (vendor, install, v1) = private_registries().await;
    // No sourceAuth, and a wrong password for the install's registry.
    let sync = start_with(
        "1.0",
        vendor,
        install,
        Credentials {
            image: DESTINATION_AUTH,
            secrets: &[("image_registry_password", "not-the-password")],
        },
    )
    .await;
    let first = sync.next_finished("web-image", &[]).await;
    let status = first.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    let vendor_host = &sync.vendor.host;
    assert!(
        message.starts_with(&format!(
            "plan failed: cannot read {vendor_host}/{VENDOR_REPOSITORY}:1.0 from the vendor \
             registry {vendor_host} anonymously (image.sourceAuth is not set): unauthorized: "
        )),
        "{message}"
    );

    // The image now comes from an open registry: the install's refuses the wrong password.
    let open = Registry::start().await;
    open.push_test_image(VENDOR_REPOSITORY, "1.0", "1.0").await;
    sync.set_input("vendor_registry", &open.host);
    let second = sync
        .next_finished("web-image", std::slice::from_ref(&first))
        .await;
    let status = second.status.clone().unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    let message = status.message.unwrap_or_default();
    let install_host = &sync.install.host;
    assert!(
        message.starts_with(&format!(
            "plan failed: cannot read the install's registry {install_host} as \
             \"{INSTALL_USER}\" (image.destinationAuth): unauthorized: "
        )),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");

    // Nothing was copied, tagged or deployed.
    for plan in [&first, &second] {
        assert!(
            !sync.audit_of(plan).iter().any(|e| e["type"] == "outputs"),
            "{:#?}",
            sync.audit_of(plan)
        );
    }
    assert_eq!(sync.installed("1.0").await, None);
    for blob in &v1.blobs {
        assert!(!sync.install.has_blob(INSTALL_REPOSITORY, blob).await);
    }
    assert!(sync.plans_of("web").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ecr_registry_is_reached_with_a_token_for_the_plans_role() {
    use outpost_runner::executor::image::auth::{Access, ecr_token};
    use std::collections::BTreeMap;
    let moto = outpost_testing::Moto::start();
    let registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
    // An ECR destination without destinationAuth is reached with ECR's token.
    assert_eq!(
        Access::from_desired(None, "image.destinationAuth", registry, true).unwrap(),
        Access::Ecr
    );
    let role = BTreeMap::from(
        [
            ("AWS_ACCESS_KEY_ID", "ASIAPLANROLE"),
            ("AWS_SECRET_ACCESS_KEY", "plan-role-secret"),
            ("AWS_SESSION_TOKEN", "plan-role-session"),
            ("AWS_ENDPOINT_URL", moto.endpoint().as_str()),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let auth = ecr_token(registry, &role)
        .await
        .unwrap_or_else(|e| panic!("{e:#}: {}", moto.log()));
    // moto's token for the account: base64 of `AWS:<account>-auth-token`.
    assert_eq!(
        auth,
        oci_client::secrets::RegistryAuth::Basic(
            "AWS".to_owned(),
            "123456789012-auth-token".to_owned()
        )
    );
    // Without the Plan's role credentials there is no token, and no fallback.
    let no_role = BTreeMap::from([("AWS_ENDPOINT_URL".to_owned(), moto.endpoint())]);
    let err = ecr_token(registry, &no_role).await.unwrap_err().to_string();
    assert!(
        err.contains("the Plan has no AWS role credentials"),
        "{err}"
    );
    // A token is asked for an ECR registry only.
    let err = ecr_token("ghcr.io", &role).await.unwrap_err().to_string();
    assert!(err.contains("ghcr.io is not an ECR registry"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_credential_in_plain_text_is_refused_and_nothing_is_stored() {
    const COMPONENTS_PATH: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/components";
    const JSON: (&str, &str) = ("content-type", "application/json");
    let cp = ControlPlane::start(Backend::Embedded).await;
    let component = |password: &str| {
        json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
            "metadata": {"name": "web-image"},
            "spec": {"app": "shop", "type": "container_image", "image": {
                "repository": "ghcr.io/vendor/web", "tag": "1.0",
                "destination": "registry.acme.example/acme/web",
                "sourceAuth": {"username": VENDOR_USER, "password": password}}}})
    };
    let plain = component(VENDOR_PASSWORD).to_string();
    let path = format!("{COMPONENTS_PATH}/web-image");
    // Each actor that may write Components (admins) gets 422 naming the field, without
    // the value; the others are refused before validation. Nothing is stored.
    cp.post_refused_as_invalid(
        COMPONENTS_PATH,
        &plain,
        "spec.image.sourceAuth.password",
        VENDOR_PASSWORD,
    )
    .await;
    let install = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": INSTALL},
        "spec": {"app": "shop", "approvalMode": "prompt",
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}}});
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            "/apis/outpost.dev/v1alpha1/namespaces/default/installs",
            &[JSON],
            install.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let runner = cp.mint_runner_token(&format!("default/{INSTALL}"));
    let reply = cp
        .raw(
            Some(&runner),
            "POST",
            COMPONENTS_PATH,
            &[JSON],
            plain.clone(),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    let got = cp.raw(Some(&cp.admin_token), "GET", &path, &[], "").await;
    assert_eq!(got.status, 404, "{}", got.text);

    // A Component with a reference is stored; changing it to plain text is refused and
    // leaves the reference.
    let reference = component("{{ secrets.vendor_pull_token }}").to_string();
    let created = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            COMPONENTS_PATH,
            &[JSON],
            reference,
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let patch = json!({"spec": {"image": {"sourceAuth": {"password": VENDOR_PASSWORD}}}});
    let patched = cp
        .raw(
            Some(&cp.admin_token),
            "PATCH",
            &path,
            &[("content-type", "application/merge-patch+json")],
            patch.to_string(),
        )
        .await;
    assert_eq!(patched.status, 422, "{}", patched.text);
    assert!(!patched.text.contains(VENDOR_PASSWORD), "{}", patched.text);
    let got = cp.raw(Some(&cp.admin_token), "GET", &path, &[], "").await;
    assert_eq!(
        got.json["spec"]["image"]["sourceAuth"]["password"], "{{ secrets.vendor_pull_token }}",
        "{}",
        got.text
    );
    assert_eq!(
        got.json["metadata"]["resourceVersion"],
        created.json["metadata"]["resourceVersion"]
    );
}
