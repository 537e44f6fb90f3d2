use super::*;
use crate::logic::template::InstallOutputs;
use crate::logic::template::tests::install;
use crate::reconcilers::install_controller::fixtures::{app, component, release};
use crate::reconcilers::install_controller::rendering::Renders;
use serde_json::json;

/// `deploy_steps` of install `acme` for `release` with `outputs` and `plans`.
fn steps_of(
    release: &crate::caches::app_cache::Release,
    outputs: &InstallOutputs,
    plans: &BTreeMap<String, Arc<Plan>>,
) -> (Vec<Step>, bool) {
    let renders = Renders::default();
    let app = app();
    let install = install();
    let renderer = Renderer::new(&renders, &app, &install, outputs, release);
    let graph = release.graph.as_ref().expect("no cycle");
    deploy_steps("acme", graph, &release.components, &renderer, plans)
}

fn names(steps: &[Step]) -> Vec<&str> {
    steps.iter().map(|s| s.name.as_str()).collect()
}

fn succeeded_provision(name: &str) -> (String, Arc<Plan>) {
    let plan: Plan = serde_json::from_value(json!({
        "apiVersion": outpost_api::API_VERSION, "kind": "Plan",
        "metadata": {"name": name},
        "spec": {"install": "acme", "operation": "provision",
                 "entity": {"kind": "sandbox", "name": "sandbox"}},
        "status": {"phase": "Succeeded"},
    }))
    .expect("a valid Plan");
    (name.to_owned(), Arc::new(plan))
}

#[test]
fn deploy_provisions_first_then_deploys_components_in_dependency_order() {
    let release = release(vec![
        component("web", &["db"], "kind: ConfigMap"),
        component("db", &[], "kind: Secret"),
    ]);
    let (steps, all_rendered) = steps_of(&release, &InstallOutputs::default(), &BTreeMap::new());
    assert!(all_rendered);
    assert_eq!(steps.len(), 3, "{:?}", names(&steps));
    let (sandbox, db, web) = (&steps[0], &steps[1], &steps[2]);
    assert!(
        sandbox.name.starts_with("acme-provision-"),
        "{}",
        sandbox.name
    );
    assert_eq!(sandbox.operation, Operation::Provision);
    assert_eq!(sandbox.entity.kind, EntityKind::Sandbox);
    assert!(sandbox.waits_for.is_empty());
    assert!(db.name.starts_with("acme-deploy-db-"), "{}", db.name);
    assert_eq!(db.operation, Operation::Deploy);
    assert_eq!(db.waits_for, [sandbox.name.as_str()]);
    assert!(web.name.starts_with("acme-deploy-web-"), "{}", web.name);
    assert_eq!(web.waits_for, [sandbox.name.as_str(), db.name.as_str()]);
    assert_eq!(web.desired["manifest"]["content"], "kind: ConfigMap");
}

#[test]
fn deploy_stops_at_a_component_whose_dependencys_outputs_are_missing() {
    let release = release(vec![
        component("db", &[], "kind: Secret"),
        component("web", &[], "url: {{ components.db.outputs.endpoint }}"),
    ]);
    let (steps, all_rendered) = steps_of(&release, &InstallOutputs::default(), &BTreeMap::new());
    assert!(!all_rendered);
    assert_eq!(steps.len(), 2, "{:?}", names(&steps));
    assert!(steps[1].name.starts_with("acme-deploy-db-"));

    // Once the dependency's deploy produced its outputs, the dependent is rendered with them.
    let outputs = InstallOutputs {
        sandbox: Default::default(),
        components: [(
            "db".to_owned(),
            [("endpoint".to_owned(), json!("db.internal:5432"))].into(),
        )]
        .into(),
    };
    let (steps, all_rendered) = steps_of(&release, &outputs, &BTreeMap::new());
    assert!(all_rendered);
    assert_eq!(steps.len(), 3, "{:?}", names(&steps));
    assert_eq!(
        steps[2].desired["manifest"]["content"],
        "url: db.internal:5432"
    );
    assert_eq!(steps[2].waits_for[1], steps[1].name);
}

#[test]
fn deploy_reprovisions_once_another_sandbox_plan_succeeded() {
    let release = release(vec![component("db", &[], "kind: Secret")]);
    let (first, _) = steps_of(&release, &InstallOutputs::default(), &BTreeMap::new());
    assert_eq!(first[0].operation, Operation::Provision);

    // The step's own Plan having succeeded does not make it a reprovision.
    let own = BTreeMap::from([succeeded_provision(&first[0].name)]);
    let (steps, _) = steps_of(&release, &InstallOutputs::default(), &own);
    assert_eq!(steps[0].operation, Operation::Provision);

    let other = BTreeMap::from([succeeded_provision("acme-provision-0000000000")]);
    let (steps, _) = steps_of(&release, &InstallOutputs::default(), &other);
    assert_eq!(steps[0].operation, Operation::Reprovision);
    assert_eq!(
        steps[0].name, first[0].name,
        "the name is the sandbox's hash"
    );
}

#[test]
fn deploy_renames_only_the_components_whose_rendered_state_changed() {
    let before = release(vec![
        component("db", &[], "kind: Secret"),
        component("web", &["db"], "kind: ConfigMap"),
        component("cache", &[], "kind: Service"),
    ]);
    let after = release(vec![
        component("db", &[], "kind: Secret\nchanged: true"),
        component("web", &["db"], "kind: ConfigMap"),
        component("cache", &[], "kind: Service"),
    ]);
    let none = InstallOutputs::default();
    let (old, _) = steps_of(&before, &none, &BTreeMap::new());
    let (new, _) = steps_of(&after, &none, &BTreeMap::new());
    let name_of = |steps: &[Step], component: &str| {
        steps
            .iter()
            .find(|s| s.entity.name == component)
            .map(|s| s.name.clone())
            .expect("a step for the component")
    };
    assert_ne!(name_of(&old, "db"), name_of(&new, "db"));
    // web depends on db: its key carries db's, so it is planned again too.
    assert_ne!(name_of(&old, "web"), name_of(&new, "web"));
    assert_eq!(name_of(&old, "cache"), name_of(&new, "cache"));
    assert_eq!(old[0].name, new[0].name, "the sandbox did not change");
}
