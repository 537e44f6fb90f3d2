//! The seed policies in `manifests/policies/`, evaluated against the fixtures in
//! `tests/fixtures/`: each policy denies (or warns) on one fixture and allows another.

use std::path::{Path, PathBuf};

use outpost_api::{Policy, PolicyInput};
use outpost_policy::{CompiledPolicy, PolicyMeta, PolicyVerdict, compile, evaluate};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every Policy of the seed pack, compiled.
fn seed_pack() -> Vec<(PolicyMeta, CompiledPolicy)> {
    let dir = root().join("manifests/policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 6, "{files:?}");
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let policy: Policy = serde_saphyr::from_str(&text).unwrap();
            let name = policy.metadata.name.clone().unwrap();
            let compiled = compile(&format!("{name}.rego"), &policy.spec.module)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            (PolicyMeta::from_policy(&policy), compiled)
        })
        .collect()
}

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("policy/tests/fixtures").join(name)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// The verdict of `policy` on `fixture`, evaluated together with the whole pack.
fn verdict(policy: &str, kind: PolicyInput, fixture_name: &str) -> PolicyVerdict {
    let pack = seed_pack();
    let pairs: Vec<_> = pack.iter().map(|(m, c)| (m, c)).collect();
    evaluate(&pairs, kind, &fixture(fixture_name))
        .into_iter()
        .find(|v| v.policy == policy)
        .unwrap_or_else(|| panic!("{policy} was not evaluated on {fixture_name}"))
}

fn assert_clean(v: &PolicyVerdict) {
    assert!(v.denials.is_empty() && v.warnings.is_empty(), "{v:#?}");
}

#[test]
fn every_seed_policy_compiles_with_its_declared_package() {
    for (meta, compiled) in seed_pack() {
        assert_eq!(
            compiled.package(),
            format!("outpost.{}", meta.name.replace('-', "_")),
            "{}",
            meta.name
        );
    }
}

#[test]
fn database_replacement_is_denied() {
    let v = verdict(
        "no-database-recreate",
        PolicyInput::Terraform,
        "tf-db-replace.json",
    );
    assert_eq!(
        v.denials,
        vec![
            "aws_db_instance.main would be replaced (delete and create); database data would be lost"
        ]
    );
}

#[test]
fn terraform_data_standing_in_for_a_database_is_recognised_by_name_or_tag() {
    let v = verdict(
        "no-database-recreate",
        PolicyInput::Terraform,
        "tf-terraform-data-db-replace.json",
    );
    let mut denied: Vec<&str> = v
        .denials
        .iter()
        .map(|m| m.split(' ').next().unwrap())
        .collect();
    denied.sort();
    // `orders_db` by name, `cache` by its `outpost.dev/database` tag; `migrations`
    // is neither and may be replaced.
    assert_eq!(
        denied,
        vec!["terraform_data.cache", "terraform_data.orders_db"]
    );
}

#[test]
fn in_place_database_update_is_allowed() {
    let pack = seed_pack();
    let pairs: Vec<_> = pack.iter().map(|(m, c)| (m, c)).collect();
    let verdicts = evaluate(
        &pairs,
        PolicyInput::Terraform,
        &fixture("tf-db-update.json"),
    );
    let names: Vec<&str> = verdicts.iter().map(|v| v.policy.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "encryption-at-rest",
            "no-database-recreate",
            "required-tags"
        ]
    );
    for v in &verdicts {
        assert_clean(v);
    }
}

#[test]
fn public_ingress_needs_the_approval_annotation() {
    let v = verdict(
        "public-ingress-approval",
        PolicyInput::Kubernetes,
        "k8s-ingress-public.yaml",
    );
    assert_eq!(
        v.denials,
        vec!["Ingress shop is public but lacks the outpost.dev/approved-public annotation"]
    );
    assert_clean(&verdict(
        "public-ingress-approval",
        PolicyInput::Kubernetes,
        "k8s-ingress-public-approved.yaml",
    ));
}

#[test]
fn containers_need_cpu_and_memory_limits() {
    let v = verdict(
        "container-resource-limits",
        PolicyInput::Kubernetes,
        "k8s-deployment-no-limits.yaml",
    );
    let mut denials = v.denials.clone();
    denials.sort();
    assert_eq!(
        denials,
        vec![
            "Deployment web: container migrate has no cpu limit",
            "Deployment web: container web has no memory limit",
        ]
    );
    assert_clean(&verdict(
        "container-resource-limits",
        PolicyInput::Kubernetes,
        "k8s-deployment-limits.yaml",
    ));
}

#[test]
fn storage_must_be_encrypted() {
    let v = verdict(
        "encryption-at-rest",
        PolicyInput::Terraform,
        "tf-unencrypted-untagged.json",
    );
    assert_eq!(
        v.denials,
        vec!["aws_ebs_volume.data must set encrypted = true"]
    );
    assert_clean(&verdict(
        "encryption-at-rest",
        PolicyInput::Terraform,
        "tf-db-replace.json",
    ));
}

#[test]
fn images_must_come_from_approved_registries() {
    let v = verdict(
        "approved-registries",
        PolicyInput::Images,
        "images-unapproved.json",
    );
    assert_eq!(
        v.denials,
        vec!["image evil.example.com/ghcr.io/acme/web:1.4.2 is not from an approved registry"]
    );
    assert_clean(&verdict(
        "approved-registries",
        PolicyInput::Images,
        "images-approved.json",
    ));
    // The same policy reads the containers (init containers included) of workloads.
    let v = verdict(
        "approved-registries",
        PolicyInput::Kubernetes,
        "k8s-deployment-no-limits.yaml",
    );
    assert_eq!(
        v.denials,
        vec!["image docker.io/library/nginx:1.27 is not from an approved registry"]
    );
    assert_clean(&verdict(
        "approved-registries",
        PolicyInput::Kubernetes,
        "k8s-deployment-limits.yaml",
    ));
}

#[test]
fn missing_cost_tags_warn_but_never_deny() {
    let v = verdict(
        "required-tags",
        PolicyInput::Terraform,
        "tf-unencrypted-untagged.json",
    );
    assert!(v.denials.is_empty(), "{v:#?}");
    let mut warnings = v.warnings.clone();
    warnings.sort();
    assert_eq!(
        warnings,
        vec![
            r#"aws_s3_bucket.logs is missing tags ["cost-center", "owner"]"#,
            r#"aws_sqs_queue.jobs is missing tags ["cost-center"]"#,
        ]
    );
}
