use serde_json::json;

use super::ImageSync;
use super::registry::Repository;

const DIGEST: &str = "sha256:ccc9a04ed305f2078a9029382275cfdaaeb5bb448c01ef7b75d1ce33ca819efc";

fn sync(tag: &str) -> anyhow::Result<ImageSync> {
    ImageSync::from_desired(&json!({"type": "container_image", "image": {
        "repository": "ghcr.io/acme/shop", "tag": tag,
        "destination": "111122223333.dkr.ecr.eu-west-1.amazonaws.com/shop"}}))
}

#[test]
fn a_tag_a_pinned_tag_or_a_digest() {
    let tagged = sync("1.8.2").unwrap();
    assert_eq!(
        (tagged.tag.as_deref(), tagged.pinned.as_deref()),
        (Some("1.8.2"), None)
    );
    assert_eq!(tagged.source_text(), "ghcr.io/acme/shop:1.8.2");
    assert_eq!(
        tagged.source_reference().to_string(),
        "ghcr.io/acme/shop:1.8.2"
    );

    let pinned = sync(&format!("1.8.2@{DIGEST}")).unwrap();
    assert_eq!(
        (pinned.tag.as_deref(), pinned.pinned.as_deref()),
        (Some("1.8.2"), Some(DIGEST))
    );
    assert_eq!(
        pinned.source_reference().to_string(),
        "ghcr.io/acme/shop:1.8.2",
        "read by the tag, then compared with the pin"
    );

    let digest = sync(DIGEST).unwrap();
    assert_eq!(
        (digest.tag.as_deref(), digest.pinned.as_deref()),
        (None, Some(DIGEST))
    );
    assert_eq!(
        digest.source_reference().to_string(),
        format!("ghcr.io/acme/shop@{DIGEST}")
    );
    assert_eq!(
        digest.destination.pinned(DIGEST),
        format!("111122223333.dkr.ecr.eu-west-1.amazonaws.com/shop@{DIGEST}")
    );
}

#[test]
fn bad_pins_and_repositories_are_refused() {
    let err = sync("1.8.2@sha256:abc").unwrap_err().to_string();
    assert!(err.contains("not a sha256:<64 hex> digest"), "{err}");
    let err = ImageSync::from_desired(&json!({"image": {"repository": "ghcr.io/acme/shop",
        "tag": "1"}}))
    .unwrap_err()
    .to_string();
    assert!(err.contains("no destination"), "{err}");
    let err = Repository::parse("acme/shop").unwrap_err().to_string();
    assert!(err.contains("is not REGISTRY/NAME"), "{err}");
    assert_eq!(
        Repository::parse("localhost/shop").unwrap().registry,
        "localhost"
    );
}

#[test]
fn plain_http_only_to_loopback_registries() {
    for (registry, loopback) in [
        ("127.0.0.1:5000/a", true),
        ("localhost:5000/a", true),
        ("[::1]:5000/a", true),
        ("10.0.0.1:5000/a", false),
        ("ghcr.io/a", false),
        ("127.0.0.1.nip.io/a", false),
    ] {
        assert_eq!(
            Repository::parse(registry).unwrap().is_loopback(),
            loopback,
            "{registry}"
        );
    }
}

#[test]
fn credentials_by_secret_reference_and_ecr_by_default_for_an_ecr_destination() {
    use super::auth::{Access, EcrRegistry};
    let with = |auth: serde_json::Value| {
        ImageSync::from_desired(&json!({"image": {
            "repository": "ghcr.io/acme/shop", "tag": "1",
            "destination": "111122223333.dkr.ecr.eu-west-1.amazonaws.com/shop",
            "sourceAuth": auth}}))
    };
    let basic = with(json!({"username": "robot", "password": "${outpost-secret:pull}"})).unwrap();
    assert_eq!(
        basic.source_access,
        Access::Basic {
            username: "robot".into(),
            password: "${outpost-secret:pull}".into()
        }
    );
    assert_eq!(basic.destination_access, Access::Ecr);
    assert_eq!(
        with(serde_json::Value::Null).unwrap().source_access,
        Access::Anonymous
    );
    let err = with(json!({"username": "robot", "password": "hunter2"}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a secret reference"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    let err = with(json!({"token": "${outpost-secret:t}", "ecr": true}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("must set one of"), "{err}");
    assert_eq!(
        EcrRegistry::parse("111122223333.dkr.ecr.eu-west-1.amazonaws.com"),
        Some(EcrRegistry {
            account: "111122223333".into(),
            region: "eu-west-1".into()
        })
    );
    for other in [
        "ghcr.io",
        "127.0.0.1:5000",
        "1.dkr.ecr.eu-west-1.amazonaws.com",
    ] {
        assert_eq!(EcrRegistry::parse(other), None, "{other}");
    }
}

#[tokio::test]
async fn secrets_resolve_from_the_steps_environment() {
    use super::auth::Access;
    let env =
        std::collections::BTreeMap::from([(crate::secrets::env_name("pull"), "s3cret".to_owned())]);
    let basic = Access::Basic {
        username: "robot".into(),
        password: "${outpost-secret:pull}".into(),
    };
    assert_eq!(
        basic.resolve("ghcr.io", &env).await.unwrap(),
        oci_client::secrets::RegistryAuth::Basic("robot".into(), "s3cret".into())
    );
    let missing = Access::Bearer {
        token: "${outpost-secret:other}".into(),
    };
    let err = missing
        .resolve("ghcr.io", &env)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"other\""), "{err}");
}
