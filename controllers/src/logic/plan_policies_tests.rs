//! The gate's policy inputs, from real component plans, against the seed policy pack.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use outpost_api::Install;
use serde_json::json;

fn seed_policies() -> Vec<Policy> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/policies");
    let mut policies = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the seed policy pack") {
        let text = std::fs::read_to_string(entry.expect("readable").path()).expect("readable");
        policies.push(serde_saphyr::from_str(&text).expect("a Policy"));
    }
    policies
}

fn deploy_plan(desired: Value) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": "acme-deploy-ingress"},
        "spec": {"install": "acme", "operation": "deploy",
                 "entity": {"kind": "component", "name": "ingress"},
                 "desiredState": desired},
    }))
    .expect("a Plan")
}

fn ingress_component(annotations: &str) -> Value {
    json!({
        "app": "shopfront",
        "type": "kubernetes_manifest",
        "manifest": {"namespace": "shopfront", "content": format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\n  \
             annotations:\n{annotations}    alb.ingress.kubernetes.io/scheme: internet-facing\n\
             spec:\n  ingressClassName: alb\n"
        )},
    })
}

fn denials(verdicts: &[Verdict]) -> Vec<String> {
    verdicts
        .iter()
        .filter(|v| v.denied)
        .flat_map(|v| v.messages.iter().map(|m| format!("{}: {m}", v.policy)))
        .collect()
}

#[test]
fn public_ingress_in_a_rendered_manifest_is_denied_without_approval() {
    let policies = seed_policies();
    let denied = check_plan(&deploy_plan(ingress_component("")), &policies);
    assert_eq!(
        denials(&denied),
        [
            "public-ingress-approval: Ingress web is public but lacks the \
          outpost.dev/approved-public annotation"
        ]
    );
    let approved = ingress_component("    outpost.dev/approved-public: \"true\"\n");
    assert_eq!(
        denials(&check_plan(&deploy_plan(approved), &policies)),
        Vec::<String>::new()
    );
}

#[test]
fn container_images_of_rendered_manifests_meet_the_registry_policy() {
    let policies = seed_policies();
    let deployment = |image: &str| {
        json!({
            "app": "shopfront", "type": "kubernetes_manifest",
            "manifest": {"content": format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  \
                 template:\n    spec:\n      containers:\n        - name: web\n          \
                 image: {image}\n          resources:\n            limits: {{cpu: '1', \
                 memory: 1Gi}}\n"
            )},
        })
    };
    let from_elsewhere = denials(&check_plan(
        &deploy_plan(deployment("docker.io/evil/web:1")),
        &policies,
    ));
    assert!(
        from_elsewhere
            .iter()
            .any(|d| d.starts_with("approved-registries:") && d.contains("docker.io/evil/web:1")),
        "{from_elsewhere:?}"
    );
}

#[test]
fn install_selectors_scope_policies() {
    let install: Install = serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": "acme", "labels": {"outpost.dev/tier": "enterprise"}},
        "spec": {"app": "shopfront",
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
    }))
    .expect("an Install");
    let selector = |v: Value| -> LabelSelector { serde_json::from_value(v).expect("a selector") };
    assert!(selects(None, &install));
    assert!(selects(
        Some(&selector(
            json!({"matchLabels": {"outpost.dev/tier": "enterprise"}})
        )),
        &install
    ));
    assert!(!selects(
        Some(&selector(
            json!({"matchLabels": {"outpost.dev/tier": "standard"}})
        )),
        &install
    ));
    let expression = |op: &str, values: Value| {
        selector(json!({"matchExpressions": [
            {"key": "outpost.dev/tier", "operator": op, "values": values}]}))
    };
    assert!(selects(
        Some(&expression("In", json!(["enterprise", "x"]))),
        &install
    ));
    assert!(!selects(
        Some(&expression("NotIn", json!(["enterprise"]))),
        &install
    ));
    assert!(selects(Some(&expression("Exists", json!(null))), &install));
    assert!(!selects(
        Some(&expression("DoesNotExist", json!(null))),
        &install
    ));
}
