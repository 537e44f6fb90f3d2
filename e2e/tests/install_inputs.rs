//! An Install's inputs are checked against its App's declarations when it is written:
//! the real kubectl gets a 422 naming the input, and nothing is stored. On both stores.

use outpost_testing::{Backend, ControlPlane, manifests, on_both_backends};
use serde_json::{Value, json};

on_both_backends!(
    wrong_inputs_are_refused_naming_the_input,
    updates_are_checked_and_ratchet_over_app_changes,
    customer_inputs_are_never_in_the_install,
);

const INSTALLS: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/installs";

/// Install `name` of the example App with valid inputs, as JSON (kubectl reads it too).
fn install(name: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": name},
        "spec": {
            "app": "shopfront",
            "inputs": {
                "domain": "shop.example.com",
                "license_key": {"secretRef": "api_key"},
            },
            "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"},
        },
    })
}

/// `kubectl apply -f` of `object` (written to a file in the scratch directory).
fn apply(cp: &ControlPlane, object: &Value) -> outpost_testing::Run {
    let file = cp.scratch().join("install.json");
    std::fs::write(&file, object.to_string()).unwrap();
    cp.kubectl().run(&["apply", "-f", file.to_str().unwrap()])
}

/// `kubectl patch install acme --type merge -p BODY`.
fn patch(kubectl: &outpost_testing::Kubectl, body: &str) -> outpost_testing::Run {
    kubectl.run(&["patch", "install", "acme", "--type", "merge", "-p", body])
}

async fn wrong_inputs_are_refused_naming_the_input(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.apply(&manifests().join("app.yaml"));

    // (input changed, its value or None to leave it out, the cause kubectl prints)
    let cases: [(&str, Option<Value>, &str); 7] = [
        (
            "enable_cache",
            Some(json!("yes")),
            r#"spec.inputs.enable_cache: Invalid value: "yes": must be of type boolean"#,
        ),
        (
            "node_count",
            Some(json!(5)),
            "spec.inputs.node_count: Forbidden: a source: customer input is set by the \
             customer, in the install stack's parameter InputNodeCount, not in the Install",
        ),
        (
            "domain",
            None,
            "spec.inputs.domain: Required value: a required input of the App",
        ),
        (
            "eks_version",
            Some(json!("1.12")),
            r#"spec.inputs.eks_version: Unsupported value: "1.12": supported values: "1.29", "1.30", "1.31""#,
        ),
        (
            "domain",
            Some(json!("Shop Example")),
            r#"spec.inputs.domain: Invalid value: "Shop Example": must match the pattern"#,
        ),
        (
            "license_key",
            Some(json!("ACME-0001-XYZ")),
            r#"spec.inputs.license_key: Invalid value: "(sensitive)": a sensitive input is given as {secretRef: SECRET}"#,
        ),
        (
            "domian",
            Some(json!("typo.example.com")),
            r#"spec.inputs.domian: Unsupported value: "domian": supported values: "domain""#,
        ),
    ];
    for (input, value, cause) in cases {
        let mut bad = install("bad");
        match value {
            Some(value) => bad["spec"]["inputs"][input] = value,
            None => {
                bad["spec"]["inputs"].as_object_mut().unwrap().remove(input);
            }
        }
        let run = apply(&cp, &bad);
        assert!(!run.ok, "{input}: kubectl apply must fail: {run:?}");
        assert!(
            run.stderr.contains(r#""bad" is invalid"#) && run.stderr.contains(cause),
            "{input}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("ACME"),
            "a sensitive value is never echoed"
        );
        // The status code and cause, as any client sees them.
        let reply = cp
            .raw(
                Some(&cp.admin_token),
                "POST",
                INSTALLS,
                &[("content-type", "application/json")],
                bad.to_string(),
            )
            .await;
        assert_eq!(reply.status, 422, "{input}: {}", reply.text);
        assert_eq!(reply.json["reason"], "Invalid");
        let field = cause.split(':').next().unwrap();
        assert_eq!(
            reply.json["details"]["causes"][0]["field"], field,
            "{}",
            reply.text
        );
        let get = kubectl.run(&["get", "install", "bad"]);
        assert!(
            !get.ok && get.stderr.contains("NotFound"),
            "{input}: nothing is stored: {get:?}"
        );
    }

    let run = apply(&cp, &install("good"));
    assert!(
        run.ok && run.stdout.contains("install.outpost.dev/good created"),
        "{run:?}"
    );
}

async fn updates_are_checked_and_ratchet_over_app_changes(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.apply(&manifests().join("app.yaml"));
    let run = apply(&cp, &install("acme"));
    assert!(run.ok, "{run:?}");
    let stored = || kubectl.ok(&["get", "install", "acme", "-o", "jsonpath={.spec.inputs}"]);
    let before = stored();

    // An update to a wrong value is refused, and the stored Install is unchanged.
    let refused = patch(&kubectl, r#"{"spec":{"inputs":{"db_instance_class":5}}}"#);
    assert!(
        !refused.ok
            && refused
                .stderr
                .contains("spec.inputs.db_instance_class: Invalid value: \"5\""),
        "{refused:?}"
    );
    assert_eq!(stored(), before);

    // The App then makes `db_name` required and `db_instance_class` a choice of two:
    // the stored Install no longer holds, but an update that does not touch those
    // inputs is accepted (ratcheting), and one that does is checked.
    let app = std::fs::read_to_string(manifests().join("app.yaml"))
        .unwrap()
        .replace(
            "      source: vendor\n      default: shop\n",
            "      source: vendor\n      required: true\n",
        )
        .replace(
            "      default: db.t4g.medium\n",
            "      default: db.t4g.medium\n      enum: [db.t4g.medium, db.r6g.large]\n",
        );
    assert!(app.contains("enum: [db.t4g.medium") && app.matches("required: true").count() == 4);
    let file = cp.scratch().join("app.yaml");
    std::fs::write(&file, app).unwrap();
    kubectl.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(
        patch(
            &kubectl,
            r#"{"spec":{"inputs":{"domain":"www.example.com"}}}"#
        )
        .ok
    );
    let refused = patch(
        &kubectl,
        r#"{"spec":{"inputs":{"db_instance_class":"db.m5.large"}}}"#,
    );
    assert!(
        !refused.ok
            && refused
                .stderr
                .contains("spec.inputs.db_instance_class: Unsupported value: \"db.m5.large\""),
        "{refused:?}"
    );
    assert!(stored().contains("www.example.com") && !stored().contains("\"db_instance_class\""));
    // A new Install is checked against the App as it is now.
    let run = apply(&cp, &install("globex"));
    assert!(
        !run.ok && run.stderr.contains("spec.inputs.db_name: Required value"),
        "{run:?}"
    );
    assert!(!kubectl.run(&["get", "install", "globex"]).ok);
}

/// A `source: customer` input (the example's `image_registry`) set in an Install: the
/// admin gets 422 naming it (and the stack parameter the customer sets it in) on create
/// and on update, the viewer, the approver and the install's runner 403, and nothing is
/// stored.
async fn customer_inputs_are_never_in_the_install(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    kubectl.apply(&manifests().join("app.yaml"));
    let value = "registry.customer.example";
    let mut bad = install("bad");
    bad["spec"]["inputs"]["image_registry"] = json!(value);
    let body = bad.to_string();
    cp.post_refused_as_invalid(INSTALLS, &body, "spec.inputs.image_registry", value)
        .await;
    let run = apply(&cp, &bad);
    assert!(
        !run.ok
            && run.stderr.contains(
                "spec.inputs.image_registry: Forbidden: a source: customer input is set by \
                 the customer, in the install stack's parameter InputImageRegistry"
            ),
        "{run:?}"
    );
    assert!(apply(&cp, &install("good")).ok);
    let runner = cp.mint_runner_token("default/good");
    let reply = cp
        .raw(
            Some(&runner),
            "POST",
            INSTALLS,
            &[("content-type", "application/json")],
            body.clone(),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    let get = kubectl.run(&["get", "install", "bad"]);
    assert!(!get.ok && get.stderr.contains("NotFound"), "{get:?}");

    // An update is refused too, and the stored Install keeps no value.
    let refused = kubectl.run(&[
        "patch",
        "install",
        "good",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"spec":{{"inputs":{{"image_registry":"{value}"}}}}}}"#),
    ]);
    assert!(
        !refused.ok
            && refused
                .stderr
                .contains("spec.inputs.image_registry: Forbidden"),
        "{refused:?}"
    );
    let stored = kubectl.ok(&["get", "install", "good", "-o", "json"]);
    assert!(!stored.contains(value), "{stored}");
}
