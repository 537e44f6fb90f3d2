use super::*;
use outpost_api::{
    AppSpec, AppStatus, CloudAccount, CloudProvider, InputSpec, InputType, InstallSpec, SecretSpec,
};

pub(crate) fn app() -> App {
    let mut app = App::new(
        "shopfront",
        AppSpec {
            display_name: None,
            description: None,
            inputs: vec![
                input("domain", None),
                input("node_count", Some(json!(3))),
                input("allowed_cidrs", Some(json!(["0.0.0.0/0"]))),
                input("unset", None),
            ],
            input_groups: vec![],
            secrets: vec![SecretSpec {
                name: "db_password".into(),
                description: None,
                generate: true,
                length: None,
                kubernetes_secret: None,
            }],
            permissions: None,
            sandbox: None,
            runner: None,
            drift: None,
        },
    );
    app.status = Some(AppStatus {
        release: Some("sha256:abc".into()),
        ..AppStatus::default()
    });
    app
}

fn input(name: &str, default: Option<Value>) -> InputSpec {
    InputSpec {
        name: name.into(),
        display_name: None,
        description: None,
        type_: InputType::Json,
        group: None,
        source: None,
        required: false,
        default,
        enum_: Vec::new(),
        pattern: None,
        sensitive: false,
    }
}

pub(crate) fn install() -> Install {
    let mut install = Install::new(
        "acme",
        InstallSpec {
            app: "shopfront".into(),
            inputs: [
                ("domain".to_owned(), json!("shop.acme.example")),
                ("node_count".to_owned(), json!(5)),
                ("undeclared".to_owned(), json!("x")),
            ]
            .into(),
            cloud: CloudAccount {
                provider: CloudProvider::Aws,
                account_id: "111122223333".into(),
                region: "eu-west-1".into(),
            },
            maintenance_windows: vec![],
            approval_mode: None,
            requests: vec![],
            release: None,
            component_releases: Default::default(),
        },
    );
    install.metadata.uid = Some("0f0e".into());
    install.metadata.namespace = Some("vendor".into());
    install
}

pub(crate) fn outputs() -> InstallOutputs {
    InstallOutputs {
        sandbox: [("cluster_name".to_owned(), json!("eks-1"))].into(),
        components: [
            (
                "database".to_owned(),
                [("endpoint".to_owned(), json!("db.internal:5432"))].into(),
            ),
            (
                "web-image".to_owned(),
                [("image".to_owned(), json!("ecr/shop:1"))].into(),
            ),
        ]
        .into(),
    }
}

fn context() -> TemplateContext {
    TemplateContext::new(&app(), &install(), &outputs()).expect("test context is valid")
}

#[test]
fn renders_install_state() {
    let c = context();
    let cases = [
        ("{{ install.id }}-eks-upgrade-role", "0f0e-eks-upgrade-role"),
        ("{{ install.name }}/{{ install.namespace }}", "acme/vendor"),
        (
            "{{ install.cloud.accountId }}.{{ install.cloud.region }}",
            "111122223333.eu-west-1",
        ),
        (
            "{{ inputs.domain }} {{ install.inputs.domain }}",
            "shop.acme.example shop.acme.example",
        ),
        ("{{ inputs.node_count }}", "5"),
        ("{{ inputs.allowed_cidrs | join(',') }}", "0.0.0.0/0"),
        ("{{ inputs.allowed_cidrs | tojson }}", r#"["0.0.0.0/0"]"#),
        (
            "{{ components.database.outputs.endpoint }}",
            "db.internal:5432",
        ),
        ("{{ components.web-image.outputs.image }}", "ecr/shop:1"),
        ("{{ components.web_image.outputs.image }}", "ecr/shop:1"),
        ("{{ sandbox.outputs.cluster_name }}", "eks-1"),
        ("{{ app.name }}@{{ app.release }}", "shopfront@sha256:abc"),
        (
            "pw={{ secrets.db_password }}",
            "pw=${outpost-secret:db_password}",
        ),
        (
            "'components.web-image' {{ 'components.web-image' }}",
            "'components.web-image' components.web-image",
        ),
        ("a\n", "a\n"),
    ];
    for (template, want) in cases {
        assert_eq!(c.render_str(template).unwrap(), want, "{template}");
    }
}

#[test]
fn undefined_values_are_errors_naming_the_reference() {
    let c = context();
    for (template, reference) in [
        ("{{ inputs.unset }}", "inputs.unset"),
        ("{{ inputs.undeclared }}", "inputs.undeclared"),
        ("{{ secrets.api_key }}", "secrets.api_key"),
        (
            "{{ components.cache.outputs.host }}",
            "components.cache.outputs.host",
        ),
        (
            "{{ components.database.outputs.port }}",
            "components.database.outputs.port",
        ),
        ("x{{ instal.id }}", "instal.id"),
    ] {
        match c.render_str(template) {
            Err(TemplateError::Undefined { reference: r, .. }) => {
                assert_eq!(r.to_string(), reference, "{template}")
            }
            other => panic!("{template}: {other:?}"),
        }
    }
    assert!(matches!(
        c.render_str("{{ install.id "),
        Err(TemplateError::Syntax { .. })
    ));
}

#[test]
fn secret_values_cannot_be_rendered_or_forged() {
    let c = context();
    // Whatever a template does with a secret, it only has the reference.
    let out = c
        .render_str("{{ secrets.db_password | upper }}{{ secrets | tojson }}")
        .unwrap();
    assert!(out.starts_with("${OUTPOST-SECRET:DB_PASSWORD}"), "{out}");
    assert_eq!(secret_references(&out), ["db_password"]);

    let mut forged = install();
    forged
        .spec
        .inputs
        .insert("domain".into(), json!("${outpost-secret:db_password}"));
    let err = TemplateContext::new(&app(), &forged, &outputs()).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"inputs.domain contains "${outpost-secret:", which only secrets.<name> may produce"#
    );
    let mut outs = outputs();
    outs.sandbox
        .insert("x".into(), json!(["ok", "${outpost-secret:api_key}"]));
    assert!(matches!(
        TemplateContext::new(&app(), &install(), &outs),
        Err(TemplateError::ForgedSecretReference { at }) if at == "sandbox.outputs.x[1]"
    ));
}

#[test]
fn install_id_needs_a_stored_install() {
    let mut i = install();
    i.metadata.uid = None;
    assert!(matches!(
        TemplateContext::new(&app(), &i, &outputs()),
        Err(TemplateError::MissingUid { .. })
    ));
}

#[test]
fn render_value_renders_every_string() {
    let value = json!({
        "name": "{{ install.name }}",
        "list": ["{{ inputs.node_count }}", 1, true, null, {"{{ k }}": "{{ app.name }}"}],
    });
    assert_eq!(
        context().render_value(&value).unwrap(),
        json!({"name": "acme", "list": ["5", 1, true, null, {"{{ k }}": "shopfront"}]})
    );
    assert!(context().render_value(&json!(["{{ nope }}"])).is_err());
}

#[test]
fn references_classify_paths() {
    let refs = references(
        "{{ install.id }}{{ install.cloud.region }}{{ install.inputs.a }}{{ inputs.b | default('x') }}\
         {% if components.db.outputs.host is defined %}{{ components.db-2.outputs }}{% endif %}\
         {{ sandbox.outputs.vpc }}{{ secrets.pw }}${outpost-secret:literal}{{ app.release }}\
         {% for i in range(3) %}{{ loop.index }}{{ i }}{% endfor %}{% set x = 1 %}{{ x }}\
         {{ install.bogus }}{{ components[name] }}{{ other }}",
    )
    .unwrap();
    let shown: Vec<String> = refs.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "install.cloud.region",
            "install.id",
            "inputs.a",
            "inputs.b",
            "secrets.literal",
            "secrets.pw",
            "components.db.outputs.host",
            "components.db-2.outputs",
            "sandbox.outputs.vpc",
            "app.release",
            "components",
            "install.bogus",
            "name",
            "other",
        ]
    );
    assert!(matches!(refs[12], Reference::Unknown { .. }));
    assert!(references("{% if %}").is_err());
}

#[test]
fn dash_names_only_touch_component_paths_in_expressions() {
    assert_eq!(
        dash_names(
            "components.a-b {{ components.a-b-1.outputs.x }} {{ x.components.a-b }} {{ 'components.a-b' }}"
        ),
        "components.a-b {{ components.a_b_1.outputs.x }} {{ x.components.a-b }} {{ 'components.a-b' }}"
    );
    assert_eq!(
        dash_names("{{ components.web - image }}"),
        "{{ components.web - image }}"
    );
}

#[test]
fn templates_in_lists_strings_with_paths() {
    let spec = json!({"helm": {"values": {"auth.enabled": "{{ x }}"}, "chart": "redis"}, "env": [{"v": "a"}]});
    let found = templates_in(&spec);
    assert_eq!(
        found,
        [
            ("env[0].v".to_owned(), "a"),
            ("helm.chart".to_owned(), "redis"),
            ("helm.values[\"auth.enabled\"]".to_owned(), "{{ x }}"),
        ]
    );
}

#[test]
fn a_sensitive_input_renders_as_its_secrets_reference() {
    let mut app = app();
    app.spec.inputs[0].sensitive = true;
    let mut install = install();
    install
        .spec
        .inputs
        .insert("domain".into(), json!({"secretRef": "db_password"}));
    let c = TemplateContext::new(&app, &install, &outputs()).unwrap();
    let out = c
        .render_str("{{ inputs.domain }} {{ install.inputs.domain }}")
        .unwrap();
    assert_eq!(secret_references(&out), ["db_password", "db_password"]);
    // Only a sensitive input's reference means a secret: elsewhere it is plain JSON.
    app.spec.inputs[0].sensitive = false;
    let c = TemplateContext::new(&app, &install, &outputs()).unwrap();
    let out = c.render_str("{{ inputs.domain.secretRef }}").unwrap();
    assert_eq!(out, "db_password");
}

#[test]
fn a_customer_input_renders_as_a_placeholder_never_its_value() {
    let mut app = app();
    app.spec.inputs[1].source = Some(outpost_api::Party::Customer);
    // An Install stored before admission refused customer inputs sets it: ignored.
    let mut install = install();
    install.spec.inputs.insert("node_count".into(), json!(7));
    let c = TemplateContext::new(&app, &install, &outputs()).unwrap();
    let out = c
        .render_str("n={{ inputs.node_count }} {{ install.inputs.node_count }}")
        .unwrap();
    assert_eq!(
        out,
        "n=${outpost-input:node_count} ${outpost-input:node_count}"
    );
}
