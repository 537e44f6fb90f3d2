//! CustomResourceDefinitions in the stand-in cluster (`outpost server --standin-cluster`),
//! driven by the machine's real kubectl: a CRD applied makes its kind served
//! (discovery, OpenAPI, schema validation, tables), it survives a restart, deleting it
//! stops serving the kind and deletes its objects; names that clash and updates that
//! change what may not change are refused with 422; only who may write CRDs can.

use outpost_testing::{Backend, ControlPlane, Kubectl, Run, manifests, on_both_backends};

on_both_backends!(a_crd_is_served_until_it_is_deleted);

/// A namespaced `Widget` with a structural schema, a short name and a column.
pub const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
  versions:
    - name: v1
      served: true
      storage: true
      additionalPrinterColumns:
        - name: Size
          type: integer
          jsonPath: .spec.size
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size:
                  type: integer
                  description: How big the widget is.
                colour:
                  type: string
"#;

const WIDGET: &str = r#"apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: shop
spec:
  size: 3
  colour: blue
"#;

fn apply(cp: &ControlPlane, kubectl: &Kubectl, name: &str, text: &str) -> Run {
    let file = cp.scratch().join(name);
    std::fs::write(&file, text).unwrap();
    kubectl.run(&["apply", "-f", file.to_str().unwrap()])
}

fn applied(cp: &ControlPlane, kubectl: &Kubectl, name: &str, text: &str) -> String {
    let run = apply(cp, kubectl, name, text);
    assert!(
        run.ok,
        "kubectl apply {name}:\n{}\n{}",
        run.stdout, run.stderr
    );
    run.stdout
}

async fn a_crd_is_served_until_it_is_deleted(backend: Backend) {
    let mut cp = ControlPlane::start_standin_cluster_on(backend).await;
    let kubectl = cp.kubectl();
    assert!(
        !kubectl.run(&["get", "widgets", "-A"]).ok,
        "not served before its CRD"
    );

    let out = applied(&cp, &kubectl, "crd.yaml", WIDGET_CRD);
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"),
        "{out}"
    );
    // Established when the create answers (kube-apiserver's controllers do it moments
    // later); kubectl wait reads the condition.
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ]);
    let crd = kubectl.ok(&["get", "crd", "widgets.example.com", "-o", "yaml"]);
    assert!(
        crd.contains("type: NamesAccepted") && crd.contains("storedVersions"),
        "{crd}"
    );

    // Discovery and OpenAPI show the kind.
    let resources = kubectl.ok(&["api-resources", "--api-group=example.com", "--no-headers"]);
    let line = resources
        .lines()
        .find(|l| l.starts_with("widgets"))
        .unwrap_or_else(|| panic!("widgets in api-resources:\n{resources}"));
    for column in ["wd", "example.com/v1", "true", "Widget"] {
        assert!(
            line.split_whitespace().any(|c| c == column),
            "{column}: {line}"
        );
    }
    let explained = kubectl.ok(&["explain", "widgets.spec.size"]);
    assert!(
        explained.contains("integer") && explained.contains("How big the widget is."),
        "{explained}"
    );

    // Its objects: applied, listed by plural and short name with the CRD's column,
    // validated by its schema.
    applied(&cp, &kubectl, "widget.yaml", WIDGET);
    let table = kubectl.ok(&["get", "wd", "-n", "shop"]);
    assert!(
        table.contains("SIZE")
            && table
                .lines()
                .any(|l| l.starts_with("w1") && l.contains(" 3")),
        "{table}"
    );
    let wrong = apply(
        &cp,
        &kubectl,
        "wrong.yaml",
        &WIDGET
            .replace("name: w1", "name: w2")
            .replace("size: 3", "size: big"),
    );
    assert!(
        !wrong.ok && wrong.stderr.contains("spec.size"),
        "a wrong-typed field is refused naming it:\n{}",
        wrong.stderr
    );
    assert!(!kubectl.run(&["get", "widget", "w2", "-n", "shop"]).ok);

    // A restart reads the CRDs from the store and serves them before anything else.
    cp.restart().await;
    let kubectl = cp.kubectl();
    let names = kubectl.ok(&["get", "widgets", "-n", "shop", "-o", "name"]);
    assert_eq!(names.trim(), "widget.example.com/w1");

    // Deleting the CRD stops serving the kind and deletes its objects.
    kubectl.ok(&["delete", "crd", "widgets.example.com"]);
    let gone = kubectl.run(&["get", "widgets", "-A"]);
    assert!(
        !gone.ok
            && (gone
                .stderr
                .contains("the server doesn't have a resource type")
                || gone
                    .stderr
                    .contains("could not find the requested resource")),
        "{}",
        gone.stderr
    );
    applied(&cp, &kubectl, "crd.yaml", WIDGET_CRD);
    let left = kubectl.ok(&["get", "widgets", "-A", "-o", "name"]);
    assert!(
        left.trim().is_empty(),
        "the old objects went with their CRD: {left}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_that_clash_or_change_their_names_are_refused_naming_the_field() {
    let cp = ControlPlane::start_standin_cluster().await;
    let kubectl = cp.kubectl();
    applied(&cp, &kubectl, "crd.yaml", WIDGET_CRD);

    let cases = [
        (
            "the kind of another type in its group",
            WIDGET_CRD
                .replace("widgets.example.com", "gizmos.example.com")
                .replace("plural: widgets", "plural: gizmos")
                .replace("singular: widget", "singular: gizmo")
                .replace("shortNames: [wd]", "shortNames: [gz]"),
            "spec.names.kind",
        ),
        (
            "a short name kubectl already resolves (ConfigMaps')",
            WIDGET_CRD
                .replace("widgets.example.com", "gadgets.example.com")
                .replace("plural: widgets", "plural: gadgets")
                .replace("singular: widget", "singular: gadget")
                .replace("kind: Widget", "kind: Gadget")
                .replace("shortNames: [wd]", "shortNames: [cm]"),
            "spec.names.shortNames[0]",
        ),
        (
            "a built-in type",
            WIDGET_CRD
                .replace("widgets.example.com", "ingresses.networking.k8s.io")
                .replace("group: example.com", "group: networking.k8s.io")
                .replace("plural: widgets", "plural: ingresses")
                .replace("singular: widget", "singular: ingress")
                .replace("kind: Widget", "kind: Ingress")
                .replace("shortNames: [wd]", "shortNames: [ingr]"),
            "spec.names.plural",
        ),
        (
            "a scope change",
            WIDGET_CRD.replace("scope: Namespaced", "scope: Cluster"),
            "spec.scope",
        ),
        (
            "a kind change",
            WIDGET_CRD.replace("kind: Widget", "kind: Gadget"),
            "spec.names.kind",
        ),
        (
            "no schema",
            WIDGET_CRD
                .replace("widgets.example.com", "bare.example.com")
                .replace("plural: widgets", "plural: bare")
                .replace("singular: widget", "singular: bare")
                .replace("kind: Widget", "kind: Bare")
                .replace("shortNames: [wd]", "shortNames: []")
                .split("      schema:")
                .next()
                .unwrap()
                .to_owned(),
            "spec.versions[0].schema.openAPIV3Schema",
        ),
    ];
    for (what, text, field) in cases {
        let run = apply(&cp, &kubectl, "refused.yaml", &text);
        assert!(
            !run.ok && run.stderr.contains("is invalid") && run.stderr.contains(field),
            "{what}: 422 naming {field}:\n{}\n{}",
            run.stdout,
            run.stderr
        );
    }
    // Nothing of them was stored or served.
    let crds = kubectl.ok(&["get", "crds", "-o", "name"]);
    assert_eq!(
        crds.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com"
    );
    let crd = kubectl.ok(&["get", "crd", "widgets.example.com", "-o", "yaml"]);
    assert!(
        crd.contains("scope: Namespaced") && crd.contains("kind: Widget"),
        "{crd}"
    );
    let resources = kubectl.ok(&["api-resources", "--no-headers"]);
    assert!(
        !resources.contains("gizmos") && !resources.contains("gadgets"),
        "{resources}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_writes_crds_a_viewer_and_a_runner_get_403_and_nothing_is_stored() {
    let cp = ControlPlane::start_standin_cluster().await;
    let admin = cp.kubectl();
    admin.ok(&["apply", "-f", manifests().to_str().unwrap()]);
    let runner_token = cp.mint_runner_token("default/acme");
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let body = serde_json::to_vec(
        &serde_saphyr::from_str::<serde_json::Value>(WIDGET_CRD).expect("the CRD parses"),
    )
    .unwrap();
    let json = [("content-type", "application/json")];
    for (who, token) in [
        ("a viewer", cp.viewer_token.as_str()),
        ("a runner", runner_token.as_str()),
        ("a user in no group", cp.nobody_token.as_str()),
    ] {
        let reply = cp.raw(Some(token), "POST", path, &json, body.clone()).await;
        assert_eq!(reply.status, 403, "{who}: {}", reply.text);
        assert!(
            reply.text.contains("customresourcedefinitions"),
            "{who}: {}",
            reply.text
        );
        let stored = cp
            .raw(
                Some(&cp.admin_token),
                "GET",
                &format!("{path}/widgets.example.com"),
                &[],
                Vec::new(),
            )
            .await;
        assert_eq!(stored.status, 404, "{who}: nothing stored: {}", stored.text);
        assert!(
            !admin.run(&["get", "widgets", "-A"]).ok,
            "{who}: nothing served"
        );
    }
    let reply = cp
        .raw(Some(&cp.admin_token), "POST", path, &json, body)
        .await;
    assert_eq!(reply.status, 201, "the admin: {}", reply.text);
    admin.ok(&["get", "widgets", "-A"]);
}
