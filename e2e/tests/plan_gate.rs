//! The Plan gate in `outpost controllers`: every new Plan gets its role by the
//! precedence chain (name and level shown by `kubectl get plans`) and the vendor
//! policies' verdicts, then goes `Ready` to its runner — on `prompt` installs too (the
//! runner asks a person once it has the real diff); an undeclared role denies it with a
//! reason.

use outpost_testing::{Backend, ControlPlane, Kubectl, manifests, on_both_backends};
use serde_json::json;

on_both_backends!(gate_resolves_roles_and_applies_approval_modes);

fn plan(
    name: &str,
    install: &str,
    operation: &str,
    kind: &str,
    entity: &str,
    role_override: Option<&str>,
) -> String {
    let desired = json!({"note": name});
    let mut spec = json!({
        "install": install,
        "operation": operation,
        "entity": {"kind": kind, "name": entity},
        "desiredState": desired,
        "contentHash": outpost_api::content_hash(&desired),
    });
    if let Some(role) = role_override {
        spec["roleOverride"] = json!(role);
    }
    json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Plan", "metadata": {"name": name}, "spec": spec}).to_string()
}

fn wait_phase(kubectl: &Kubectl, name: &str) -> String {
    kubectl.eventually(30, &["get", "plan", name, "-o", "jsonpath={.status.phase}|{.status.role.name}|{.status.role.level}|{.status.role.rule}|{.status.message}"], |out| !out.starts_with('|'))
}

async fn gate_resolves_roles_and_applies_approval_modes(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.ok(&["apply", "-f", manifests().to_str().unwrap()]);
    // A plan-level policy: teardowns need a change ticket.
    let ticket = cp.scratch().join("ticket.yaml");
    std::fs::write(
        &ticket,
        "apiVersion: outpost.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: teardown-ticket\nspec:\n  app: shopfront\n  inputs: [plan]\n  module: |\n    package outpost.teardown_ticket\n\n    deny contains msg if {\n      input.operation == \"teardown\"\n      msg := sprintf(\"%s needs a change ticket\", [input.entity.name])\n    }\n",
    )
    .unwrap();
    kubectl.ok(&["apply", "-f", ticket.to_str().unwrap()]);
    // A module that does not compile is refused at apply time, naming line and column.
    let broken = cp.scratch().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: outpost.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: broken\nspec:\n  inputs: [plan]\n  module: |\n    package outpost.broken\n\n    deny contains msg if {\n      msg := \n    }\n",
    )
    .unwrap();
    let refused = kubectl.run(&["apply", "-f", broken.to_str().unwrap()]);
    assert!(
        !refused.ok && refused.stderr.contains("spec.module"),
        "{refused:?}"
    );
    assert!(
        refused.stderr.contains("4:"),
        "the error names the line: {refused:?}"
    );
    let _controllers = cp.start_controllers("gate");
    let acme = kubectl.ok(&["get", "install", "acme", "-o", "jsonpath={.metadata.uid}"]);
    let globex = kubectl.ok(&["get", "install", "globex", "-o", "jsonpath={.metadata.uid}"]);

    let plans = [
        // (plan, install, operation, entity kind, entity, override) → expected level and role
        (
            "web-deploy",
            "acme",
            "deploy",
            "component",
            "web",
            None,
            "entity",
            format!("{acme}-maintenance"),
            // A prompt install's Plan passes the gate as Ready too: its runner plans,
            // and a person approves the real diff.
            "Ready",
        ),
        (
            "db-deploy",
            "globex",
            "deploy",
            "component",
            "database",
            None,
            "matrix",
            format!("{globex}-provision"),
            "Ready",
        ),
        (
            "cache-teardown",
            "globex",
            "teardown",
            "component",
            "cache",
            None,
            "matrix",
            format!("{globex}-deprovision"),
            "Denied",
        ),
        (
            "sandbox-provision",
            "globex",
            "provision",
            "sandbox",
            "sandbox",
            None,
            "entity",
            format!("{globex}-provision"),
            "Ready",
        ),
        (
            "migrate-run",
            "globex",
            "trigger",
            "action",
            "migrate",
            None,
            "default",
            format!("{globex}-maintenance"),
            "Ready",
        ),
        (
            "upgrade",
            "acme",
            "trigger",
            "action",
            "eks-upgrade",
            Some("{{ install.id }}-eks-upgrade-role"),
            "override",
            format!("{acme}-eks-upgrade-role"),
            // A prompt install's Plan passes the gate as Ready too: its runner plans,
            // and a person approves the real diff.
            "Ready",
        ),
    ];
    for (name, install, operation, kind, entity, role_override, ..) in &plans {
        let file = cp.scratch().join(format!("{name}.json"));
        std::fs::write(
            &file,
            plan(name, install, operation, kind, entity, *role_override),
        )
        .unwrap();
        kubectl.ok(&["create", "-f", file.to_str().unwrap()]);
    }
    for (name, .., level, role, phase) in &plans {
        let gated = wait_phase(&kubectl, name);
        let fields: Vec<&str> = gated.split('|').collect();
        assert_eq!(
            (fields[0], fields[1], fields[2]),
            (*phase, role.as_str(), *level),
            "{name}: {gated}"
        );
        assert!(
            !fields[3].is_empty(),
            "{name}: the rule that chose the role is recorded"
        );
    }

    let denied = kubectl.ok(&[
        "get",
        "plan",
        "cache-teardown",
        "-o",
        "jsonpath={.status.message}",
    ]);
    assert!(
        denied.contains("teardown-ticket: cache needs a change ticket"),
        "{denied}"
    );

    // A runtime override to a role the App does not declare denies the Plan.
    let file = cp.scratch().join("bad.json");
    std::fs::write(
        &file,
        plan(
            "bad-override",
            "acme",
            "trigger",
            "action",
            "migrate",
            Some("admin"),
        ),
    )
    .unwrap();
    kubectl.ok(&["create", "-f", file.to_str().unwrap()]);
    let denied = wait_phase(&kubectl, "bad-override");
    assert!(denied.starts_with("Denied|"), "{denied}");
    assert!(
        denied.contains("admin"),
        "the reason names the role: {denied}"
    );

    // kubectl shows the role and the level that chose it.
    let table = kubectl.ok(&["get", "plans"]);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("ROLE") && header.contains("LEVEL"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("db-deploy") && l.contains("matrix")),
        "{table}"
    );
}
