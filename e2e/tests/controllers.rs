//! `outpost controllers` against `outpost server`: replicas elect one leader; the App
//! controller validates apps as a whole and records the release.

use outpost_testing::{Backend, ControlPlane, manifests, on_both_backends};

on_both_backends!(app_controller_marks_apps_ready_or_invalid_and_fails_over);

const READY: &[&str] = &[
    "get",
    "app",
    "shopfront",
    "-o",
    r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.release}"#,
];
const HOLDER: &[&str] = &[
    "get",
    "leases.coordination.k8s.io",
    "outpost-controllers",
    "-o",
    "jsonpath={.spec.holderIdentity}",
];

async fn app_controller_marks_apps_ready_or_invalid_and_fails_over(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let kubectl = cp.kubectl();
    let mut first = cp.start_controllers("replica-a");
    let leader = kubectl.eventually(30, HOLDER, |h| h == "replica-a");
    let _second = cp.start_controllers("replica-b");
    assert_eq!(leader, "replica-a");

    // The App last: `kubectl apply -f DIR` goes file by file, and an App applied before its
    // Components would first be Ready with the release of a partial set.
    for file in [
        "actions.yaml",
        "components.yaml",
        "operation-roles.yaml",
        "installs.yaml",
    ] {
        kubectl.ok(&["apply", "-f", manifests().join(file).to_str().unwrap()]);
    }
    kubectl.apply(&manifests().join("app.yaml"));
    let ready = kubectl.eventually(30, READY, |s| s.starts_with("True sha256:"));
    let release = ready.split_whitespace().nth(1).unwrap().to_owned();

    // Each install gets its CloudFormation stack; `outpost stack` prints it.
    kubectl.eventually(30, &["get", "installstacks", "-o", "name"], |s| {
        s.lines().count() == 2
    });
    // Rendered by one apply, recorded as one: no replace after it (that is only for a
    // stack another writer added to, below), and an `Apply` entry whose next apply prunes.
    let managers = kubectl.ok(&[
        "get",
        "installstack",
        "acme",
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation} {end}",
    ]);
    assert_eq!(managers.trim(), "outpost-install-stack/Apply");
    let printed = std::process::Command::new(outpost_testing::outpost_binary())
        .args(["stack", "default/acme", "--kubeconfig"])
        .arg(cp.kubeconfig(&cp.admin_token))
        .output()
        .unwrap();
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let template: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(
        template["Parameters"]["EnableEksUpgradeRole"]["Default"], "false",
        "custom role off by default"
    );
    assert_eq!(template["Parameters"]["RunnerToken"]["NoEcho"], true);
    let missing = std::process::Command::new(outpost_testing::outpost_binary())
        .args(["stack", "default/nope", "--kubeconfig"])
        .arg(cp.kubeconfig(&cp.admin_token))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("kubectl get install nope"),
        "the error says what to check"
    );

    // A stack deleted or edited by hand is rendered again at once: the controller
    // watches its stacks, deletions included (its periodic re-render is an hour away).
    const UID: &[&str] = &[
        "get",
        "installstack",
        "acme",
        "--ignore-not-found",
        "-o",
        "jsonpath={.metadata.uid}",
    ];
    let deleted = kubectl.ok(UID);
    assert!(!deleted.is_empty());
    kubectl.ok(&["delete", "installstack", "acme"]);
    kubectl.eventually(30, UID, |uid| !uid.is_empty() && uid != deleted);
    kubectl.ok(&[
        "patch",
        "installstack",
        "acme",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"version":"edited","template":{"Resources":{"Intruder":{"Type":"AWS::IAM::User"}}}}}"#,
    ]);
    // The edited value is rendered back, and the added resource is gone: the stack the
    // customer runs is the render and nothing else.
    kubectl.eventually(
        30,
        &[
            "get",
            "installstack",
            "acme",
            "-o",
            "jsonpath={.spec.version} {.spec.template.Parameters.RunnerToken.NoEcho} [{.spec.template.Resources.Intruder}]",
        ],
        |s| !s.starts_with("edited") && s.ends_with("true []"),
    );

    // A component depending on a component that does not exist makes the app Invalid.
    let broken = cp.scratch().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: outpost.dev/v1alpha1\nkind: Component\nmetadata:\n  name: worker\nspec:\n  app: shopfront\n  type: job\n  job:\n    image: busybox\n  dependencies: [queue]\n",
    )
    .unwrap();
    kubectl.ok(&["apply", "-f", broken.to_str().unwrap()]);
    let invalid = kubectl.eventually(
        30,
        &[
            "get",
            "app",
            "shopfront",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Invalid")].message}"#,
        ],
        |m| m.contains("queue"),
    );
    assert!(invalid.contains("Component/worker"), "{invalid}");

    // The leader dies; the other replica takes over (the lease lasts 15 s) and keeps working.
    first.kill();
    kubectl.eventually(40, HOLDER, |h| h == "replica-b");
    kubectl.ok(&["delete", "component", "worker"]);
    let ready = kubectl.eventually(30, READY, |s| s.starts_with("True "));
    assert!(
        ready.ends_with(&release),
        "the release is back to what it was: {ready} vs {release}"
    );

    // A role the vendor takes out of the App leaves every install's stack: the stack
    // controller's apply drops what it no longer renders. (Its applies were recorded as
    // updates, which no apply prunes, so a removed role stayed in the customers' stacks.)
    const TEMPLATE: &[&str] = &[
        "get",
        "installstack",
        "acme",
        "-o",
        "jsonpath={.spec.template}",
    ];
    assert!(kubectl.ok(TEMPLATE).contains("break-glass"));
    kubectl.ok(&[
        "patch",
        "app",
        "shopfront",
        "--type",
        "json",
        "-p",
        r#"[{"op": "test", "path": "/spec/permissions/roles/3/type", "value": "break_glass"},
            {"op": "remove", "path": "/spec/permissions/roles/3"}]"#,
    ]);
    kubectl.eventually(30, TEMPLATE, |t| {
        t.contains("maintenance") && !t.contains("break-glass") && !t.contains("BreakGlass")
    });
}
