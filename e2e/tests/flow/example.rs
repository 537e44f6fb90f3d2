//! The example app drives an install to Active.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_app_drives_an_install_to_active() {
    let started = Instant::now();
    let flow = start(&[]).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    let elapsed = started.elapsed();

    // Terraform applied the sandbox and the database; their state holds the stand-ins.
    let sandbox = flow.succeeded(Operation::Provision, "sandbox").await;
    let database = flow.succeeded(Operation::Deploy, "database").await;
    let uid = flow
        .installs
        .get(INSTALL)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let network = terraform_data(&tfstate(&flow.state, "sandbox-sandbox"), "network");
    assert_eq!(network["input"]["value"]["name"], uid.as_str());
    let db = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    assert_eq!(db["input"]["value"]["identifier"], format!("{uid}-db"));
    assert_eq!(db["input"]["value"]["db_name"], "shop");
    assert_eq!(
        db["input"]["value"]["db_subnet_ids"],
        json!([format!("{uid}-private-a"), format!("{uid}-private-b")]),
        "the database got the sandbox's outputs"
    );
    let outputs = |plan: &Plan| plan.status.clone().unwrap().outputs;
    assert_eq!(
        outputs(&sandbox)["cluster_name"],
        format!("{uid}-eks"),
        "{sandbox:?}"
    );
    let endpoint = outputs(&database)["endpoint"].clone();
    assert_eq!(endpoint, format!("{uid}-db.db.internal:5432"));

    // The Kubernetes components are in the stand-in cluster, rendered with the outputs.
    let cluster = flow.cluster_kubectl();
    let get = |kind: &str, name: &str| -> Value {
        serde_json::from_str(&cluster.ok(&["get", kind, name, "-n", NAMESPACE, "-o", "json"]))
            .unwrap()
    };
    let web = get("deployment", "web");
    assert_eq!(container_env(&web, "DATABASE_HOST"), endpoint);
    // The web image was copied into the install's registry, and web runs the copy.
    let web_image = outputs(&flow.succeeded(Operation::Deploy, "web-image").await);
    let copy = format!("{}/shopfront@{}", flow.registry.host, flow.image.digest);
    assert_eq!(web_image["sourceDigest"], flow.image.digest.as_str());
    assert_eq!(web_image["destinationDigest"], flow.image.digest.as_str());
    assert_eq!(web_image["reference"], copy.as_str(), "{web_image:?}");
    assert_eq!(
        flow.registry
            .digest_of("shopfront", "1.8.2")
            .await
            .as_deref(),
        Some(flow.image.digest.as_str())
    );
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        copy.as_str()
    );
    assert_eq!(
        container_env(&web, "REDIS_HOST"),
        outputs(&flow.succeeded(Operation::Deploy, "cache").await)["host"]
    );
    assert_eq!(
        container_env(&web, "PUBLIC_HOST"),
        "store.globex.example",
        "rendered with the install's inputs"
    );
    assert_eq!(get("service", "web")["spec"]["ports"][0]["port"], 80);

    // The App's db_password is also the Secret its kubernetesSecret names
    // (shopfront/database, key password): written by the runner from the customer's
    // secret store before web's Deployment, which reads it by secretKeyRef.
    let password = "correct-horse-battery";
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(password)
    };
    // web's Plan carries the target and a reference, never the value; the signed apply
    // event records the value's digest.
    let web_deploy = flow.succeeded(Operation::Deploy, "web").await;
    assert_eq!(
        web_deploy.spec.desired_state.clone().unwrap()["kubernetesSecrets"],
        json!([{"namespace": "shopfront", "name": "database", "key": "password",
                "secret": "db_password", "value": "${outpost-secret:db_password}"}])
    );
    let web_plan = web_deploy.metadata.name.clone().unwrap();
    let applied = flow
        .local_audit()
        .into_iter()
        .find(|e| e["plan"] == web_plan.as_str() && e["type"] == "apply")
        .expect("web's apply is audited");
    assert_eq!(
        applied["details"]["kubernetesSecrets"],
        json!([{"namespace": "shopfront", "name": "database", "key": "password",
                "secret": "db_password",
                "sha256": outpost_runner::example_image::sha256(password.as_bytes())}]),
        "{applied}"
    );
    let secret = get("secret", "database");
    assert_eq!(secret["type"], "Opaque", "{secret}");
    assert_eq!(secret["data"]["password"], encoded.as_str(), "{secret}");
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "outpost"
    );
    let password_env = web["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "DATABASE_PASSWORD")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        password_env["valueFrom"]["secretKeyRef"],
        json!({"name": "database", "key": "password"}),
        "{web}"
    );
    let plans = serde_json::to_string(&flow.all_plans().await).unwrap();
    let audit = serde_json::to_string(&flow.local_audit()).unwrap();
    for text in [plans, audit] {
        assert!(!text.contains(password) && !text.contains(&encoded));
    }
    let cache = get("statefulset", "cache");
    assert_eq!(cache["spec"]["serviceName"], "cache");
    assert_eq!(get("service", "cache")["spec"]["ports"][0]["port"], 6379);
    assert_eq!(
        get("ingress", "web")["spec"]["rules"][0]["host"],
        "store.globex.example"
    );

    // The migrate action ran in the sandbox, before web's deploy started: by the Plans'
    // times and by the order of the runner's signed audit log.
    let migrate = flow.succeeded(Operation::Trigger, "migrate").await;
    let web_deploy = flow.succeeded(Operation::Deploy, "web").await;
    let migrate_status = migrate.status.clone().unwrap();
    assert_eq!(migrate.spec.entity.kind, EntityKind::Action);
    // The step checks it got the database password, resolved by the runner from the
    // customer's secret store.
    assert_eq!(
        migrate_status.outputs["steps"][0]["exitCode"], 0,
        "{migrate_status:?}"
    );
    let finished = migrate_status.finished_at.unwrap().0;
    let web_started = web_deploy.status.clone().unwrap().started_at.unwrap().0;
    assert!(
        finished <= web_started,
        "migrate finished at {finished}, web's deploy started at {web_started}"
    );
    let audit = flow.local_audit();
    let position = |plan: &Plan, type_: &str| {
        let name = plan.metadata.name.clone().unwrap();
        audit
            .iter()
            .position(|e| e["plan"] == name.as_str() && e["type"] == type_)
            .unwrap_or_else(|| panic!("no {type_} event of {name} in {audit:#?}"))
    };
    assert!(
        position(&migrate, "apply") < position(&web_deploy, "claim"),
        "the runner applied migrate before it claimed web's deploy"
    );
    let record = outpost_e2e::work_dirs(&flow.state).join("action-migrate/job/migrations.log");
    let record = std::fs::read_to_string(&record)
        .unwrap_or_else(|e| panic!("{} was written in the sandbox: {e}", record.display()));
    assert!(
        record.contains(&format!("{} up", endpoint.as_str().unwrap())),
        "the step saw the database's endpoint: {record}"
    );
    // What the step printed is attached to its Plan.
    let log = migrate_status.log.unwrap_or_default();
    assert!(
        log.contains(&format!(
            "migrating the shop schema on {}",
            endpoint.as_str().unwrap()
        )) && log.contains("== step migrate exited with code 0 =="),
        "the migrate Plan carries its step's output: {log}"
    );

    let events = flow.audit_verifies().await;
    let plans = flow.all_plans().await.len();
    println!(
        "flow: install {INSTALL} Active {:.1} s after start ({plans} plans, {events} audit events verified)",
        elapsed.as_secs_f64()
    );
}
