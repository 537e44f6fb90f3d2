//! `outpost server` on an etcd that speaks only TLS and accepts only clients with a
//! certificate from its CA (`--client-cert-auth`), as the chart's bundled etcd does:
//! the server connects with `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile` and
//! serves objects from it, while a client without a certificate — anything else that
//! reaches the etcd pods — is refused by etcd itself, and so is plain HTTP.

use std::process::Command;

use outpost_testing::{ControlPlane, TlsEtcd, tls_etcd::try_get};

#[tokio::test]
async fn the_server_runs_on_an_etcd_that_only_takes_client_certificates() {
    let etcd = TlsEtcd::start().await;

    // Anything that reaches etcd without a certificate from its CA is refused.
    let no_certificate = try_get("https", etcd.port, Some(etcd.tls(false))).await;
    assert!(
        no_certificate.is_err(),
        "etcd served a client without a certificate"
    );
    let plain = try_get("http", etcd.port, None).await;
    assert!(plain.is_err(), "etcd served plain HTTP");

    // The API server with the client certificate stores and serves objects there.
    let control_plane = ControlPlane::start_on_etcd_with(etcd.store(), etcd.server_flags()).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: outpost.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: tls-check\n  namespace: default\nspec:\n  inputs: [kubernetes]\n  module: |\n    package outpost.tls_check\n\n    deny contains \"never\" if false\n",
    )
    .expect("manifest written");
    let kubectl = control_plane.kubectl();
    kubectl.ok(&["apply", "-f", policy.to_str().expect("a UTF-8 path")]);
    let name = kubectl.ok(&[
        "get",
        "policy",
        "tls-check",
        "-o",
        "jsonpath={.metadata.name}",
    ]);
    assert_eq!(name, "tls-check");

    // What the server wrote is in etcd, read back with the client certificate.
    let stored = etcd
        .client()
        .await
        .get("/registry/outpost.dev/policies/default/tls-check", None)
        .await
        .expect("a get");
    assert_eq!(
        stored.kvs().len(),
        1,
        "the Policy is stored in the TLS etcd"
    );
}

#[test]
fn the_server_names_an_unreadable_etcd_ca_file() {
    let output = Command::new(outpost_testing::outpost_binary())
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "etcd://127.0.0.1:1",
            "--tokens",
            "/dev/null",
            "--etcd-cafile",
            "/nonexistent/ca.crt",
        ])
        .output()
        .expect("outpost runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/ca.crt"), "{stderr}");
}
