use super::*;
use crate::FieldErrorKind;
use serde_json::json;

fn web() -> Component {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Component",
        "metadata": {"name": "web"},
        "spec": {
            "app": "shopfront",
            "type": "kubernetes_manifest",
            "manifest": {"content": "apiVersion: v1\nkind: Service\n"},
            "dependencies": ["database"],
            "operationRoles": {"deploy": "{{ install.id }}-maintenance"}
        }
    }))
    .expect("test Component is well-formed")
}

fn errors(c: &Component) -> Vec<(String, FieldErrorKind)> {
    c.validate()
        .into_iter()
        .map(|e| (e.field, e.kind))
        .collect()
}

#[test]
fn valid_component() {
    assert_eq!(web().validate(), vec![]);
}

#[test]
fn type_and_source_block_must_match() {
    let mut c = web();
    c.spec.type_ = ComponentType::HelmChart;
    assert_eq!(
        errors(&c),
        [
            ("spec.helm".into(), FieldErrorKind::Required),
            ("spec.manifest".into(), FieldErrorKind::Forbidden),
        ]
    );
    c.spec.helm = Some(HelmSource {
        chart: "redis".into(),
        repository: None,
        version: None,
        namespace: None,
        values: BTreeMap::new(),
        destination: None,
        source_auth: None,
        destination_auth: None,
    });
    assert_eq!(
        errors(&c),
        [("spec.manifest".into(), FieldErrorKind::Forbidden)]
    );
    c.spec.manifest = None;
    assert_eq!(errors(&c), []);
}

#[test]
fn manifest_outputs_are_identifiers_other_than_objects() {
    let mut c = web();
    let outputs = &mut c.spec.manifest.as_mut().unwrap().outputs;
    outputs.insert("host".into(), "web.shop.svc:80".into());
    assert_eq!(errors(&c), []);
    let outputs = &mut c.spec.manifest.as_mut().unwrap().outputs;
    outputs.insert("objects".into(), "x".into());
    outputs.insert("Bad-Name".into(), "x".into());
    assert_eq!(
        errors(&c),
        [
            (
                "spec.manifest.outputs.Bad-Name".into(),
                FieldErrorKind::Invalid
            ),
            (
                "spec.manifest.outputs.objects".into(),
                FieldErrorKind::Forbidden
            ),
        ]
    );
}

#[test]
fn dependencies_are_checked() {
    let mut c = web();
    c.spec.dependencies = vec!["database".into(), "web".into(), "database".into()];
    assert_eq!(
        errors(&c),
        [
            ("spec.dependencies[1]".into(), FieldErrorKind::Invalid),
            ("spec.dependencies[2]".into(), FieldErrorKind::Duplicate),
        ]
    );
}

#[test]
fn operation_roles_only_for_component_operations() {
    let mut c = web();
    c.spec
        .operation_roles
        .insert("provision".into(), "r".into());
    c.spec
        .operation_roles
        .insert("teardown".into(), "bad role".into());
    assert_eq!(
        errors(&c),
        [
            (
                "spec.operationRoles.provision".into(),
                FieldErrorKind::NotSupported
            ),
            (
                "spec.operationRoles.teardown".into(),
                FieldErrorKind::Invalid
            ),
        ]
    );
}

#[test]
fn a_cluster_is_named_only_by_a_manifest_or_chart_and_by_its_name() {
    let mut c = web();
    c.spec.cluster = Some(ClusterAccess {
        name: "{{ sandbox.outputs.cluster_name }}".into(),
        endpoint: "{{ sandbox.outputs.cluster_endpoint }}".into(),
        certificate_authority_data: String::new(),
        kubeconfig: String::new(),
    });
    assert_eq!(errors(&c), []);
    // The endpoint is optional: the runner reads it from EKS.
    c.spec.cluster.as_mut().unwrap().endpoint = String::new();
    assert_eq!(errors(&c), []);
    c.spec.cluster.as_mut().unwrap().name = " ".into();
    assert_eq!(
        errors(&c),
        [("spec.cluster.name".into(), FieldErrorKind::Required)]
    );
    // Or the customer's own cluster, by a kubeconfig in the secret store.
    c.spec.cluster = Some(ClusterAccess {
        name: String::new(),
        endpoint: String::new(),
        certificate_authority_data: String::new(),
        kubeconfig: "{{ secrets.cluster_kubeconfig }}".into(),
    });
    assert_eq!(errors(&c), []);
    c.spec.cluster.as_mut().unwrap().kubeconfig = "apiVersion: v1\nkind: Config".into();
    assert_eq!(
        errors(&c),
        [("spec.cluster.kubeconfig".into(), FieldErrorKind::Invalid)]
    );
    c.spec.cluster.as_mut().unwrap().kubeconfig = "{{ secrets.k }}".into();
    c.spec.cluster.as_mut().unwrap().name = "eks".into();
    assert_eq!(
        errors(&c),
        [("spec.cluster.name".into(), FieldErrorKind::Forbidden)]
    );
    c.spec.cluster.as_mut().unwrap().kubeconfig = String::new();
    c.spec.type_ = ComponentType::HelmChart;
    c.spec.helm = serde_json::from_value(json!({"chart": "/charts/shop"})).unwrap();
    c.spec.manifest = None;
    assert_eq!(errors(&c), []);
    c.spec.type_ = ComponentType::Job;
    c.spec.job = serde_json::from_value(json!({"image": "i"})).unwrap();
    c.spec.helm = None;
    assert_eq!(
        errors(&c),
        [("spec.cluster".into(), FieldErrorKind::Forbidden)]
    );
}

#[test]
fn empty_source_fields_are_required() {
    let mut c = web();
    c.spec.manifest.as_mut().unwrap().content = " ".into();
    c.spec.app = String::new();
    assert_eq!(
        errors(&c),
        [
            ("spec.app".into(), FieldErrorKind::Invalid),
            ("spec.manifest.content".into(), FieldErrorKind::Required),
        ]
    );
}

fn terraform(source: &str, files: &[(&str, &str)]) -> Component {
    let mut c = web();
    c.spec.type_ = ComponentType::TerraformModule;
    c.spec.manifest = None;
    c.spec.terraform = Some(TerraformSource {
        source: source.into(),
        files: files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        version: None,
        variables: BTreeMap::new(),
    });
    c
}

#[test]
fn terraform_needs_exactly_one_of_source_and_files() {
    assert_eq!(errors(&terraform("/modules/db", &[])), []);
    assert_eq!(errors(&terraform("", &[("main.tf", "")])), []);
    assert_eq!(
        errors(&terraform(" ", &[])),
        [("spec.terraform.source".into(), FieldErrorKind::Required)]
    );
    assert_eq!(
        errors(&terraform("/modules/db", &[("main.tf", "")])),
        [("spec.terraform.files".into(), FieldErrorKind::Forbidden)]
    );
}

#[test]
fn cloudformation_needs_exactly_one_of_template_url_and_template() {
    let stack = |url: &str, body: &str| -> Component {
        let mut c = web();
        c.spec.type_ = ComponentType::Cloudformation;
        c.spec.manifest = None;
        c.spec.cloudformation = Some(CloudFormationSource {
            template_url: url.into(),
            template: body.into(),
            stack_name: None,
            parameters: BTreeMap::new(),
        });
        c
    };
    assert_eq!(errors(&stack("https://s3.amazonaws.com/b/t.yaml", "")), []);
    assert_eq!(errors(&stack("", "Resources: {}")), []);
    assert_eq!(
        errors(&stack("", " ")),
        [(
            "spec.cloudformation.templateUrl".into(),
            FieldErrorKind::Required
        )]
    );
    assert_eq!(
        errors(&stack("https://s3.amazonaws.com/b/t.yaml", "Resources: {}")),
        [(
            "spec.cloudformation.template".into(),
            FieldErrorKind::Forbidden
        )]
    );
    let inline: CloudFormationSource =
        serde_json::from_value(json!({"template": "Resources: {}"})).unwrap();
    assert_eq!(
        serde_json::to_value(&inline).unwrap(),
        json!({"template": "Resources: {}"})
    );
}

#[test]
fn terraform_inline_files_are_plain_names() {
    let c = terraform("", &[("../main.tf", ""), (".terraform", ""), ("ok.tf", "")]);
    assert_eq!(
        errors(&c),
        [
            ("spec.terraform.files".into(), FieldErrorKind::Invalid),
            ("spec.terraform.files".into(), FieldErrorKind::Invalid),
        ]
    );
}

#[test]
fn terraform_files_round_trip_and_source_may_be_omitted() {
    let t: TerraformSource = serde_json::from_value(json!({"files": {"main.tf": "x"}})).unwrap();
    assert_eq!(t.source, "");
    assert_eq!(
        serde_json::to_value(&t).unwrap(),
        json!({"files": {"main.tf": "x"}})
    );
}
