use super::*;
use outpost_api::{Action, App, Component, OperationRole};

fn load<K: serde::de::DeserializeOwned>(file: &str) -> Vec<K> {
    let path = format!("{}/../manifests/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("parse {path}: {e}"))
}

pub(crate) struct Example {
    pub app: App,
    pub components: Vec<Component>,
    pub actions: Vec<Action>,
    pub rules: Vec<OperationRole>,
}

pub(crate) fn example() -> Example {
    Example {
        app: load::<App>("app.yaml").remove(0),
        components: load("components.yaml"),
        actions: load("actions.yaml"),
        rules: load("operation-roles.yaml"),
    }
}

impl Example {
    fn objects(&self) -> AppObjects<'_> {
        AppObjects {
            app: &self.app,
            components: &self.components,
            actions: &self.actions,
            operation_roles: &self.rules,
        }
    }

    fn release_hash(&self) -> String {
        release_hash(&self.app, &self.components, &self.actions, &self.rules)
    }

    fn problems(&self) -> Vec<String> {
        check_app(&self.objects())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn component(&mut self, name: &str) -> &mut Component {
        self.components
            .iter_mut()
            .find(|c| name_of(*c) == name)
            .expect("example has the component")
    }
}

#[test]
fn example_app_is_valid_and_ordered() {
    let e = example();
    assert_eq!(e.components.len(), 5);
    assert_eq!(e.problems(), Vec::<String>::new());
    let graph = ComponentGraph::new(&e.components).unwrap();
    let order = graph.deploy_order();
    let at = |n: &str| order.iter().position(|o| o == n).unwrap();
    assert!(
        at("database") < at("web") && at("web-image") < at("web") && at("web") < at("ingress"),
        "{order:?}"
    );
    assert_eq!(order, ["cache", "database", "web-image", "web", "ingress"]);
    assert_eq!(graph.dependents_of(["database"]), ["web", "ingress"]);
    assert_eq!(graph.dependents_of(["web-image"]), ["web", "ingress"]);
}

#[test]
fn unknown_dependencies_and_cycles() {
    let mut e = example();
    e.component("web").spec.dependencies.push("queue".into());
    e.component("web").spec.dependencies.push("ingress".into());
    assert_eq!(
        e.problems(),
        [
            r#"Component/web spec.dependencies[3]: unknown component "queue""#,
            "App/shopfront components: dependency cycle ingress -> web -> ingress",
        ]
    );
}

#[test]
fn template_references_must_be_declared() {
    let mut e = example();
    let web = e.component("web");
    let content = &mut web.spec.manifest.as_mut().unwrap().content;
    content.push_str(
        "# {{ inputs.nope }} {{ secrets.nope }} {{ components.queue.outputs.url }} \
         {{ components.database.outputs.anything }} {{ installs.id }} {{ components[x] }}\n",
    );
    e.actions[0].spec.steps[0]
        .env
        .insert("BAD".into(), "{{ inputs.domain ".into());
    assert_eq!(
        e.problems(),
        [
            "Component/web spec.manifest.content: refers to inputs.nope, which the app does not declare",
            "Component/web spec.manifest.content: refers to secrets.nope, which the app does not declare",
            r#"Component/web spec.manifest.content: refers to components.queue.outputs.url, but the app has no component "queue""#,
            "Component/web spec.manifest.content: refers to components as a whole; name one: components.<name>",
            "Component/web spec.manifest.content: refers to unknown variable installs.id",
            "Component/web spec.manifest.content: refers to unknown variable x",
            r#"Action/migrate spec.steps[0].env.BAD: invalid template "{{ inputs.domain ": syntax error: unexpected end of input, expected end of variable block (in <string>:1)"#,
        ]
    );
}

#[test]
fn role_references_must_be_declared_with_a_fitting_type() {
    let mut e = example();
    e.component("web")
        .spec
        .operation_roles
        .insert("teardown".into(), "{{install.id}}-break-glass".into());
    e.component("cache")
        .spec
        .operation_roles
        .insert("deploy".into(), "{{install.id}}-maintenance".into());
    e.actions[0].spec.break_glass_role = Some("{{ install.id }}-eks-upgrade-role".into());
    e.actions[1].spec.role = Some("{{ install.id }}-eks-upgrade".into());
    e.actions[2].spec.role = Some("{{ install.id }}-break-glass".into());
    e.rules[0].spec.role = "admin".into();
    e.rules[1].spec.principal = "component:queue".into();
    e.rules[2].spec.app = "other".into();
    assert_eq!(
        e.problems(),
        [
            r#"Component/web spec.operationRoles.teardown: role "{{install.id}}-break-glass" is used as a custom role but declared break_glass; declare it custom"#,
            r#"Action/migrate spec.breakGlassRole: role "{{ install.id }}-eks-upgrade-role" is declared custom, but breakGlassRole must name a break_glass role"#,
            r#"Action/eks-upgrade spec.role: role "{{ install.id }}-eks-upgrade" is not declared by the app"#,
            r#"OperationRole/components-teardown spec.role: role "admin" is not declared by the app"#,
            r#"OperationRole/database-deploy spec.principal: unknown component "queue""#,
            r#"OperationRole/backup-check-trigger spec.app: belongs to app "other", not "shopfront""#,
        ]
    );
}

#[test]
fn release_hash_covers_specs_not_order_or_metadata() {
    let e = example();
    let base = e.release_hash();
    assert!(outpost_api::is_content_hash(&base));
    let mut reordered = example();
    reordered.components.reverse();
    reordered.actions.reverse();
    reordered.app.metadata.resource_version = Some("42".into());
    assert_eq!(reordered.release_hash(), base);
    let mut changed = example();
    changed.component("web").spec.dependencies.pop();
    assert_ne!(changed.release_hash(), base);
    let mut changed = example();
    changed.rules[0].spec.role = "{{ install.id }}-maintenance".into();
    assert_ne!(changed.release_hash(), base);
}
