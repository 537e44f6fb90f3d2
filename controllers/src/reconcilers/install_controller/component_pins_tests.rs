use super::*;
use outpost_api::EntityRef;
use serde_json::{Value, json};

const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const NEW: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// Install `i`, pinned to OLD, with `web` pinned to NEW, and `status`.
fn install(release: Option<&str>, web: &str, status: Value) -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": "i", "generation": 3},
        "spec": {"app": "shop", "release": release, "componentReleases": {"web": web},
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
        "status": status,
    }))
    .expect("a valid Install")
}

fn component(name: &str) -> Component {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
        "metadata": {"name": name},
        "spec": {"app": "shop", "type": "kubernetes_manifest",
                 "manifest": {"namespace": "shop", "content": ""}},
    }))
    .expect("a valid Component")
}

fn plan(name: &str, operation: &str, entity: (&str, &str), phase: &str, created: &str) -> Plan {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Plan",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"install": "i", "operation": operation,
                 "entity": {"kind": entity.0, "name": entity.1}},
        "status": {"phase": phase},
    }))
    .expect("a valid Plan")
}

fn plans(list: Vec<Plan>) -> BTreeMap<String, Arc<Plan>> {
    list.into_iter()
        .map(|p| (p.name_any(), Arc::new(p)))
        .collect()
}

/// The sandbox provisioned twice, cache deployed once then failed once.
fn history() -> BTreeMap<String, Arc<Plan>> {
    plans(vec![
        plan(
            "i-provision-a",
            "provision",
            ("sandbox", "sandbox"),
            "Succeeded",
            "2026-01-01T00:00:00Z",
        ),
        plan(
            "i-provision-b",
            "reprovision",
            ("sandbox", "sandbox"),
            "Succeeded",
            "2026-01-02T00:00:00Z",
        ),
        plan(
            "i-deploy-cache-a",
            "deploy",
            ("component", "cache"),
            "Succeeded",
            "2026-01-01T00:00:00Z",
        ),
        plan(
            "i-deploy-cache-b",
            "deploy",
            ("component", "cache"),
            "Failed",
            "2026-01-03T00:00:00Z",
        ),
    ])
}

fn step(name: &str, operation: Operation, entity: (EntityKind, &str), waits: &[&str]) -> Step {
    Step {
        name: name.into(),
        operation,
        entity: EntityRef {
            kind: entity.0,
            name: entity.1.into(),
        },
        desired: json!({}),
        waits_for: waits.iter().map(|w| w.to_string()).collect(),
    }
}

fn pins_of(install: &Install) -> Option<ComponentPins> {
    let components = [component("cache"), component("web")];
    ComponentPins::of(install, NEW, &components, &history(), false)
}

#[test]
fn pins_apply_only_to_an_install_pinned_elsewhere_with_a_current_pin() {
    let pinned = install(Some(OLD), NEW, json!({}));
    let pins = pins_of(&pinned).expect("web is moved ahead of the pinned release");
    assert_eq!(pins.moved, BTreeSet::from(["web".to_owned()]));
    assert_eq!(pins.held, ["cache"]);
    assert_eq!(pins.sandbox, "i-provision-b", "the sandbox's latest Plan");

    assert!(
        pins_of(&install(None, NEW, json!({}))).is_none(),
        "not pinned"
    );
    assert!(
        pins_of(&install(Some(NEW), NEW, json!({}))).is_none(),
        "pinned to the current release: everything follows it"
    );
    assert!(
        pins_of(&install(Some(OLD), OLD, json!({}))).is_none(),
        "no pin to the current release"
    );
    let components = [component("cache"), component("web")];
    assert!(
        ComponentPins::of(&pinned, NEW, &components, &history(), true).is_none(),
        "deleting"
    );
    assert!(
        ComponentPins::of(&pinned, NEW, &components, &BTreeMap::new(), false).is_none(),
        "never provisioned: held whole"
    );
    assert!(
        ComponentPins::of(&pinned, NEW, &[component("cache")], &history(), false).is_none(),
        "a pin of a component the App no longer has"
    );
}

#[test]
fn only_the_moved_components_and_their_hooks_are_planned() {
    use EntityKind::{Action, Component as C, Sandbox};
    use Operation::{Deploy, Provision, Trigger};
    let pins = pins_of(&install(Some(OLD), NEW, json!({}))).unwrap();
    let steps = vec![
        step("i-provision-c-pre-setup", Trigger, (Action, "setup"), &[]),
        step(
            "i-provision-c",
            Provision,
            (Sandbox, "sandbox"),
            &["i-provision-c-pre-setup"],
        ),
        step("i-deploy-cache-c", Deploy, (C, "cache"), &["i-provision-c"]),
        step(
            "i-deploy-web-c-pre-warm",
            Trigger,
            (Action, "warm"),
            &["i-provision-c", "i-deploy-cache-c"],
        ),
        step(
            "i-deploy-web-c",
            Deploy,
            (C, "web"),
            &[
                "i-provision-c",
                "i-deploy-cache-c",
                "i-deploy-web-c-pre-warm",
            ],
        ),
        step(
            "i-deploy-web-c-post-notify",
            Trigger,
            (Action, "notify"),
            &["i-deploy-web-c"],
        ),
        step(
            "i-deploy-cache-c-post-notify",
            Trigger,
            (Action, "notify"),
            &["i-deploy-cache-c"],
        ),
    ];
    let selected = pins.select(steps, &history());
    let shown: Vec<(&str, Vec<&str>)> = selected
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.waits_for.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("i-provision-b", vec![]),
            (
                "i-deploy-web-c-pre-warm",
                vec!["i-provision-b", "i-deploy-cache-a"]
            ),
            (
                "i-deploy-web-c",
                vec![
                    "i-provision-b",
                    "i-deploy-cache-a",
                    "i-deploy-web-c-pre-warm"
                ]
            ),
            ("i-deploy-web-c-post-notify", vec!["i-deploy-web-c"]),
        ],
        "the sandbox as its latest Plan, cache as its latest deploy that succeeded"
    );
    assert!(select(None, Vec::new(), &history()).is_empty());
}

#[test]
fn held_components_keep_their_state() {
    let status = json!({"components": [
        {"name": "cache", "release": OLD, "phase": "Deployed", "lastPlan": "i-deploy-cache-a"},
        {"name": "web", "release": OLD, "phase": "Deployed", "lastPlan": "i-deploy-web-a"},
    ]});
    let pinned = install(Some(OLD), NEW, status);
    let pins = pins_of(&pinned).unwrap();
    let computed = |web: Option<(&str, ComponentPhase)>| {
        vec![
            ComponentState {
                name: "cache".into(),
                release: None,
                phase: Some(ComponentPhase::Pending),
                last_plan: None,
                drift: None,
                drifted_fields: None,
            },
            ComponentState {
                name: "web".into(),
                release: web
                    .filter(|(_, p)| *p == ComponentPhase::Deployed)
                    .map(|_| NEW.into()),
                phase: Some(web.map_or(ComponentPhase::Pending, |(_, p)| p)),
                last_plan: web.map(|(plan, _)| plan.into()),
                drift: None,
                drifted_fields: None,
            },
        ]
    };
    // web's Plan of the new release not made yet (e.g. outside the window): as it was.
    let (phase, states) = pins.hold_states(InstallPhase::Deploying, computed(None), &pinned);
    assert_eq!(phase, InstallPhase::Deploying);
    assert_eq!(states, pinned.status.as_ref().unwrap().components);
    // web deployed at the new release, cache held at the old one.
    let (phase, states) = pins.hold_states(
        InstallPhase::Active,
        computed(Some(("i-deploy-web-c", ComponentPhase::Deployed))),
        &pinned,
    );
    assert_eq!(phase, InstallPhase::Active);
    let releases: Vec<(&str, Option<&str>)> = states
        .iter()
        .map(|s| (s.name.as_str(), s.release.as_deref()))
        .collect();
    assert_eq!(releases, [("cache", Some(OLD)), ("web", Some(NEW))]);

    // A held component that failed degrades the install.
    let failed = json!({"components": [
        {"name": "cache", "phase": "Failed", "lastPlan": "i-deploy-cache-b"},
    ]});
    let degraded = install(Some(OLD), NEW, failed);
    let (phase, _) = pins.hold_states(
        InstallPhase::Active,
        computed(Some(("i-deploy-web-c", ComponentPhase::Deployed))),
        &degraded,
    );
    assert_eq!(phase, InstallPhase::Degraded);

    let condition = pins.condition(&pinned);
    assert_eq!(condition.type_, COMPONENTS_HELD);
    assert!(
        condition.message.contains(
            "web planned at the App's release (spec.componentReleases), sandbox, cache held"
        ),
        "{}",
        condition.message
    );
}
