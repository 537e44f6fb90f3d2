//! `outpost policy test`, run as a user would against the seed pack in
//! `manifests/policies/` and the fixtures of `policy/tests/fixtures/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn policy_test(dir: &Path, fixture: &str, kind: &str) -> (i32, String, String) {
    let output: Output = Command::new(env!("CARGO_BIN_EXE_outpost"))
        .current_dir(root())
        .args(["policy", "test"])
        .arg(dir)
        .arg(Path::new("policy/tests/fixtures").join(fixture))
        .args(["--input-kind", kind])
        .output()
        .expect("outpost runs");
    (
        output.status.code().expect("outpost exited"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn database_replacement_fails_with_exit_1() {
    let (code, stdout, stderr) = policy_test(
        Path::new("manifests/policies"),
        "tf-db-replace.json",
        "terraform",
    );
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l
            == "FAIL - policy/tests/fixtures/tf-db-replace.json - no-database-recreate - \
                aws_db_instance.main would be replaced (delete and create); database data would be lost"),
        "{stdout}"
    );
    // encryption-at-rest, no-database-recreate, required-tags ran; one failed.
    assert!(
        stdout.contains("3 tests, 2 passed, 0 warnings, 1 failures"),
        "{stdout}"
    );
}

#[test]
fn in_place_update_passes_with_exit_0() {
    let (code, stdout, stderr) = policy_test(
        Path::new("manifests/policies"),
        "tf-db-update.json",
        "terraform",
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(
        stdout.contains("3 tests, 3 passed, 0 warnings, 0 failures"),
        "{stdout}"
    );
}

#[test]
fn warnings_alone_exit_0() {
    let (code, stdout, stderr) = policy_test(
        Path::new("manifests/policies"),
        "tf-unencrypted-untagged.json",
        "terraform",
    );
    // The unencrypted volume denies; the missing tags (warn enforcement) only warn.
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("WARN - policy/tests/fixtures/tf-unencrypted-untagged.json - required-tags - aws_s3_bucket.logs is missing tags"), "{stdout}");
    assert!(
        stdout.contains("3 tests, 1 passed, 1 warnings, 1 failures"),
        "{stdout}"
    );
    let tags_only = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("manifests/policies/required-tags.yaml"),
        tags_only.path().join("required-tags.yaml"),
    )
    .unwrap();
    let (code, stdout, _) = policy_test(
        tags_only.path(),
        "tf-unencrypted-untagged.json",
        "terraform",
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("WARN - "), "{stdout}");
}

#[test]
fn kubernetes_inputs_from_yaml() {
    let (code, stdout, _) = policy_test(
        Path::new("manifests/policies"),
        "k8s-ingress-public.yaml",
        "kubernetes",
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("- public-ingress-approval - Ingress shop is public"),
        "{stdout}"
    );
    let (code, stdout, _) = policy_test(
        Path::new("manifests/policies"),
        "k8s-ingress-public-approved.yaml",
        "kubernetes",
    );
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn broken_modules_exit_2_naming_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken.rego"),
        "package outpost.broken\n\ndeny contains msg if {\n  input.a == = 1\n}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = policy_test(dir.path(), "tf-db-update.json", "terraform");
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    let file = dir.path().join("broken.rego");
    assert!(
        stderr.contains(&format!("{}:4:14: expecting expression", file.display())),
        "{stderr}"
    );

    // A broken module inside a Policy object is reported at its line in the YAML file.
    let dir = tempfile::tempdir().unwrap();
    let yaml = "apiVersion: outpost.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: broken\nspec:\n  inputs: [terraform]\n  module: |\n    package outpost.broken\n\n    deny contains msg if {\n      input.a == = 1\n    }\n";
    std::fs::write(dir.path().join("broken.yaml"), yaml).unwrap();
    let (code, _, stderr) = policy_test(dir.path(), "tf-db-update.json", "terraform");
    assert_eq!(code, 2, "{stderr}");
    let file = dir.path().join("broken.yaml");
    assert!(
        stderr.contains(&format!("{}:11:18: expecting expression", file.display())),
        "{stderr}"
    );
}
