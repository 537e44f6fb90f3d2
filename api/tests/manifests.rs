//! Every example under `manifests/` parses into its Rust kind, survives a
//! YAML round trip without losing a field, and validates.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use outpost_api::{
    Action, App, AuditEvent, Component, DriftReport, Install, InstallStack, OperationRole, Plan,
    Policy, Runner, Validate,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry is readable").path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

/// The documents of a multi-document YAML file, as text. Documents are
/// separated by a line that is exactly `---`.
fn documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else {
            let doc = docs.last_mut().expect("docs starts non-empty");
            doc.push_str(line);
            doc.push('\n');
        }
    }
    docs.retain(|d| {
        d.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    docs
}

/// Parses one document into `K`, round-trips it through YAML and checks it.
fn check<K>(origin: &str, doc: &str, original: &Value)
where
    K: Serialize + DeserializeOwned + Validate + PartialEq + Debug,
{
    let parsed: K = serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{origin}: {e}"));
    let yaml = serde_saphyr::to_string(&parsed).unwrap_or_else(|e| panic!("{origin}: {e}"));
    let reparsed: K = serde_saphyr::from_str(&yaml)
        .unwrap_or_else(|e| panic!("{origin}: re-parsing serialised YAML: {e}\n{yaml}"));
    assert_eq!(parsed, reparsed, "{origin}: round trip changed the object");

    let round_tripped: Value = serde_saphyr::from_str(&yaml).expect("serialised YAML is a value");
    assert_eq!(
        &round_tripped, original,
        "{origin}: a field was dropped or changed\n--- serialised:\n{yaml}"
    );
    assert_eq!(
        &serde_json::to_value(&parsed).expect("kinds serialise to JSON"),
        original,
        "{origin}: JSON of the parsed object differs from the document"
    );

    let errors = parsed.validate();
    assert!(
        errors.is_empty(),
        "{origin}: validation errors: {errors:#?}"
    );

    let top = round_tripped.as_object().expect("a document is a mapping");
    for key in ["apiVersion", "kind", "metadata", "spec"] {
        assert!(top.contains_key(key), "{origin}: no top-level {key}");
    }
}

#[test]
fn every_manifest_round_trips_and_validates() {
    let mut files = Vec::new();
    yaml_files(&manifests_dir(), &mut files);
    files.sort();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("manifest is readable");
        let values: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let docs = documents(&text);
        assert_eq!(
            docs.len(),
            values.len(),
            "{}: document split",
            file.display()
        );
        for (i, (doc, original)) in docs.iter().zip(&values).enumerate() {
            let origin = format!("{} document {i}", file.display());
            assert_eq!(original["apiVersion"], "outpost.dev/v1alpha1", "{origin}");
            assert!(
                original["metadata"].get("namespace").is_none(),
                "{origin}: examples take the client's namespace"
            );
            let kind = original["kind"].as_str().unwrap_or_default();
            match kind {
                "App" => check::<App>(&origin, doc, original),
                "Component" => check::<Component>(&origin, doc, original),
                "Action" => check::<Action>(&origin, doc, original),
                "OperationRole" => check::<OperationRole>(&origin, doc, original),
                "Policy" => check::<Policy>(&origin, doc, original),
                "Install" => check::<Install>(&origin, doc, original),
                "InstallStack" => check::<InstallStack>(&origin, doc, original),
                "Runner" => check::<Runner>(&origin, doc, original),
                "Plan" => check::<Plan>(&origin, doc, original),
                "DriftReport" => check::<DriftReport>(&origin, doc, original),
                "AuditEvent" => check::<AuditEvent>(&origin, doc, original),
                other => panic!("{origin}: unknown kind {other:?}"),
            }
            *kinds.entry(kind.to_owned()).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, usize> = [
        ("Action", 4),
        ("App", 1),
        ("Component", 5),
        ("Install", 2),
        ("OperationRole", 3),
        ("Policy", 6),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_owned(), n))
    .collect();
    assert_eq!(kinds, expected, "objects found under manifests/");
}

#[test]
fn a_dropped_field_is_detected() {
    // The round-trip check must notice a field the Rust type does not know.
    let doc = "apiVersion: outpost.dev/v1alpha1\nkind: OperationRole\nmetadata:\n  name: x\n\
               spec:\n  app: shopfront\n  principal: sandbox\n  operation: provision\n  \
               role: r\n  unknownField: 1\n";
    let original: Value = serde_saphyr::from_str(doc).expect("valid YAML");
    let result = std::panic::catch_unwind(|| check::<OperationRole>("inline", doc, &original));
    assert!(result.is_err(), "an unknown field went unnoticed");
}

fn crd(kind: &str) -> CustomResourceDefinition {
    outpost_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

#[test]
fn every_kind_has_the_expected_crd() {
    let expected = [
        ("App", "apps", true, "app"),
        ("Component", "components", true, "comp"),
        ("Action", "actions", false, "act"),
        ("OperationRole", "operationroles", false, "oprole"),
        ("Policy", "policies", true, "pol"),
        ("Install", "installs", true, "inst"),
        ("InstallStack", "installstacks", true, "istack"),
        ("Runner", "runners", true, "rn"),
        ("Plan", "plans", true, "pl"),
        ("DriftReport", "driftreports", false, "drift"),
        ("AuditEvent", "auditevents", false, "audit"),
        ("Rollout", "rollouts", true, "ro"),
    ];
    assert_eq!(outpost_api::crds().len(), expected.len());
    for (kind, plural, has_status, short) in expected {
        let crd = crd(kind);
        assert_eq!(crd.spec.group, outpost_api::GROUP, "{kind}");
        assert_eq!(crd.spec.names.plural, plural, "{kind}");
        assert_eq!(crd.spec.scope, "Namespaced", "{kind}");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(&*format!("{plural}.outpost.dev"))
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_deref()
                .unwrap_or_default()
                .contains(&short.to_owned()),
            "{kind}"
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["outpost".to_owned()][..]),
            "{kind}"
        );
        assert_eq!(crd.spec.versions.len(), 1, "{kind}");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, outpost_api::VERSION, "{kind}");
        let status = version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref());
        assert_eq!(status.is_some(), has_status, "{kind} status subresource");
        assert!(version.schema.is_some(), "{kind} schema");
    }
}

#[test]
fn plan_columns_follow_the_role_chain() {
    let crd = crd("Plan");
    let columns: Vec<&str> = crd.spec.versions[0]
        .additional_printer_columns
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Install",
            "Operation",
            "Entity",
            "Role",
            "Level",
            "Phase",
            "Changes",
            "Age"
        ]
    );
}

#[test]
fn any_json_fields_accept_any_value() {
    let install = crd("Install");
    let schema = serde_json::to_value(&install.spec.versions[0].schema).expect("schema serialises");
    let inputs = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["inputs"];
    assert_eq!(
        inputs["additionalProperties"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    let stack = crd("InstallStack");
    let schema = serde_json::to_value(&stack.spec.versions[0].schema).expect("schema serialises");
    let template = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"];
    assert_eq!(template["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(template["type"], "object");
}
