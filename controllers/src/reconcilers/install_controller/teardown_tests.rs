use super::*;
use crate::reconcilers::install_controller::fixtures::{app, component, release};

#[test]
fn teardown_removes_components_in_reverse_dependency_order_then_the_sandbox() {
    let release = release(vec![
        component("web", &["db"], "kind: ConfigMap"),
        component("db", &[], "kind: Secret"),
        component("ingress", &["web"], "kind: Ingress"),
    ]);
    let graph = release.graph.as_ref().expect("no cycle");
    let steps = teardown_steps("acme", "0f0e-uid", graph, &release.components, &app());
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "acme-teardown-ingress-0f0e-uid",
            "acme-teardown-web-0f0e-uid",
            "acme-teardown-db-0f0e-uid",
            "acme-deprovision-0f0e-uid",
        ]
    );
    // Each waits for the one before; the first for nothing.
    assert!(steps[0].waits_for.is_empty());
    for pair in steps.windows(2) {
        assert_eq!(pair[1].waits_for, [pair[0].name.as_str()]);
    }
    assert!(
        steps[..3]
            .iter()
            .all(|s| s.operation == Operation::Teardown && s.entity.kind == EntityKind::Component)
    );
    let last = &steps[3];
    assert_eq!(last.operation, Operation::Deprovision);
    assert_eq!(last.entity.kind, EntityKind::Sandbox);
}

#[test]
fn teardown_desired_state_names_the_component_and_its_type() {
    let release = release(vec![component("db", &[], "kind: Secret")]);
    let graph = release.graph.as_ref().expect("no cycle");
    let app = app();
    let steps = teardown_steps("acme", "uid", graph, &release.components, &app);
    assert_eq!(steps[0].desired["component"], "db");
    assert_eq!(steps[0].desired["type"], "kubernetes_manifest");
    // The sandbox's definition goes with its deprovision (the runner needs its type).
    assert_eq!(
        steps[1].desired["sandbox"],
        serde_json::to_value(&app.spec.sandbox).expect("JSON")
    );
    assert_eq!(steps[1].desired["sandbox"]["type"], "terraform_module");
}

#[test]
fn teardown_step_names_carry_the_installs_uid_so_a_new_install_gets_new_plans() {
    let release = release(vec![component("db", &[], "kind: Secret")]);
    let graph = release.graph.as_ref().expect("no cycle");
    let old = teardown_steps("acme", "1111111111aa", graph, &release.components, &app());
    let new = teardown_steps("acme", "2222222222aa", graph, &release.components, &app());
    assert_ne!(old[0].name, new[0].name);
    assert_ne!(old[1].name, new[1].name);
    // Ten characters of it, as every Plan name carries a hash.
    assert_eq!(old[0].name, "acme-teardown-db-1111111111");
}
