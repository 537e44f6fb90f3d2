//! The example app from `manifests/` end to end, every part real: the control plane
//! and controllers, `kubectl apply` of the manifests, a runner (`outpost runner`, under
//! the install's minted token) driving real terraform, bubblewrap for the migrate
//! action, and a second `outpost server --standin-cluster` as the install's cluster.
//!
//! * The install reaches Active: the sandbox and the database (inline modules of
//!   `terraform_data` resources) applied by terraform, the cache and web objects in the
//!   stand-in cluster, the migrate action run in the sandbox before web is deployed.
//! * The web image is copied from a vendor registry into the install's (two real
//!   `docker-registry` processes; the install's `vendor_registry` input and the
//!   customer's `image_registry`, given to the runner with `--customer-inputs`, point at
//!   them) and web runs the copy, by digest.
//! * A customer-local policy (the runner's `--policies DIR`) denies the plan that would
//!   replace the database, though the control plane approved it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_client::api::{Api, ListParams};
use outpost_api::{
    AuditEvent, AuditEventType, EntityKind, Install, InstallPhase, Operation, Plan, PlanPhase,
};
use outpost_e2e::{
    Backend, ControlPlane, Kubectl, Process, Registry, TestImage, eventually,
    example_with_registries, manifests, on_path, outpost_binary,
};
use serde_json::{Value, json};

/// The install the flow drives: `globex`, whose approval mode is `approve-all`.
const INSTALL: &str = "globex";
/// Where the example's Kubernetes components go in the cluster.
const NAMESPACE: &str = "shopfront";

/// Everything one flow runs, stopped when dropped.
struct Flow {
    cp: ControlPlane,
    cluster: ControlPlane,
    _controllers: Process,
    _runner: Process,
    /// The vendor's registry, holding the shop's image.
    _vendor: Registry,
    /// The install's registry, which the image is copied into.
    registry: Registry,
    /// The image the vendor published (`acme/shopfront:1.8.2`).
    image: TestImage,
    plans: Api<Plan>,
    installs: Api<Install>,
    /// The runner's state dir (journal, audit log, terraform work dirs).
    state: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts the control plane, controllers and stand-in cluster, applies the example with
/// kubectl, and starts the install's runner under its minted token, with the customer's
/// `local_policies` (file name to Rego module) in its `--policies` directory.
async fn start(local_policies: &[(&str, String)]) -> Flow {
    let vendor = Registry::start().await;
    let registry = Registry::start().await;
    let image = vendor
        .push_test_image("acme/shopfront", "1.8.2", "1.8.2")
        .await;
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let controllers = cp.start_controllers("flow");
    let kubectl = cp.kubectl();
    let dir = tempfile::tempdir().unwrap();
    let (example, _) = example_with_registries(dir.path(), &vendor, &registry);
    kubectl.ok(&["apply", "-f", example.to_str().unwrap()]);
    eventually(60, "App shopfront to be Ready", async || {
        let ready = kubectl.ok(&[
            "get",
            "app",
            "shopfront",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
        ]);
        (ready == "True").then_some(())
    })
    .await;

    let state = dir.path().join("state");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("db_password"), "correct-horse-battery\n").unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    for (file, module) in local_policies {
        std::fs::write(policies.join(file), module).unwrap();
    }
    let token = cp.mint_runner_token(&format!("default/{INSTALL}"));
    let child = Command::new(outpost_binary())
        .args(["runner", "--server", &cp.url, "--certificate-authority"])
        .arg(&cp.tls.ca)
        .args(["--install", &format!("default/{INSTALL}"), "--state-dir"])
        .arg(&state)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig(&cluster.admin_token))
        .arg("--terraform")
        .arg(on_path("terraform"))
        .arg("--bwrap")
        .arg(on_path("bwrap"))
        .arg("--secrets-dir")
        .arg(&secrets)
        .arg("--customer-inputs")
        .arg(dir.path().join("customer-inputs.yaml"))
        .arg("--policies")
        .arg(&policies)
        .args(["--heartbeat-seconds", "1"])
        // The token through the environment, as the install stack hands it over.
        .env("OUTPOST_RUNNER_TOKEN", token)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost runner starts");
    let client = cp.client().await;
    Flow {
        plans: Api::namespaced(client.clone(), "default"),
        installs: Api::namespaced(client, "default"),
        cp,
        cluster,
        _controllers: controllers,
        _runner: Process::new(child),
        _vendor: vendor,
        registry,
        image,
        state,
        _dir: dir,
    }
}

impl Flow {
    /// Waits until the install reports `phase`; panics with every Plan's phase if not.
    async fn install_reaches(&self, phase: InstallPhase, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let install = self.installs.get(INSTALL).await.unwrap();
            if install.status.as_ref().and_then(|s| s.phase) == Some(phase) {
                return;
            }
            if Instant::now() > deadline {
                let plans: Vec<String> = self
                    .all_plans()
                    .await
                    .iter()
                    .map(|p| {
                        let status = p.status.clone().unwrap_or_default();
                        format!(
                            "{} {:?} {}",
                            p.metadata.name.clone().unwrap_or_default(),
                            status.phase,
                            status.message.unwrap_or_default()
                        )
                    })
                    .collect();
                panic!(
                    "install {INSTALL} never reached {phase:?}: {:?}\nplans:\n{}",
                    install.status,
                    plans.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every Plan of the install.
    async fn all_plans(&self) -> Vec<Plan> {
        self.plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items
    }

    /// The install's Plans of `operation` on `entity`, oldest first.
    async fn plans_of(&self, operation: Operation, entity: &str) -> Vec<Plan> {
        let mut plans: Vec<Plan> = self
            .all_plans()
            .await
            .into_iter()
            .filter(|p| p.spec.operation == operation && p.spec.entity.name == entity)
            .collect();
        plans.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        plans
    }

    /// The one Succeeded Plan of `operation` on `entity`.
    async fn succeeded(&self, operation: Operation, entity: &str) -> Plan {
        let plans = self.plans_of(operation, entity).await;
        let done: Vec<&Plan> = plans
            .iter()
            .filter(|p| phase(p) == Some(PlanPhase::Succeeded))
            .collect();
        assert_eq!(
            done.len(),
            1,
            "one succeeded {operation} of {entity}: {plans:?}"
        );
        done[0].clone()
    }

    /// The local audit log, in order.
    fn local_audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.state.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit lines are JSON"))
            .collect()
    }

    /// Waits until every local audit event is shipped and `outpost audit verify` passes;
    /// returns how many events verified.
    async fn audit_verifies(&self) -> usize {
        eventually(60, "the audit log to be shipped and verify", async || {
            let expected = self.local_audit().len();
            let output = Command::new(outpost_binary())
                .args([
                    "audit",
                    "verify",
                    &format!("default/{INSTALL}"),
                    "--kubeconfig",
                ])
                .arg(self.cp.kubeconfig(&self.cp.admin_token))
                .arg("--trust-control-plane")
                .output()
                .expect("outpost audit verify runs");
            let out = String::from_utf8_lossy(&output.stdout);
            (output.status.success() && out.trim() == format!("{expected} events verified"))
                .then_some(expected)
        })
        .await
    }

    /// `kubectl` against the stand-in cluster.
    fn cluster_kubectl(&self) -> Kubectl {
        self.cluster.kubectl()
    }
}

fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
}

/// The terraform state the runner keeps for an entity's work dir (`sandbox` or
/// `component-<name>`).
fn tfstate(state: &Path, work: &str) -> Value {
    let path = outpost_e2e::work_dirs(state)
        .join(work)
        .join("module/terraform.tfstate");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} is readable: {e}", path.display()));
    serde_json::from_str(&text).expect("terraform state is JSON")
}

/// The attributes of `terraform_data.<name>` in a terraform state.
fn terraform_data(state: &Value, name: &str) -> Value {
    state["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["type"] == "terraform_data" && r["name"] == name && r["mode"] == "managed")
        .map(|r| r["instances"][0]["attributes"].clone())
        .unwrap_or_else(|| panic!("no terraform_data.{name} in the state: {state}"))
}

/// The value of env var `name` of the first container of a workload.
fn container_env(workload: &Value, name: &str) -> Value {
    workload["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null)
}

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

/// The block scalar `module: |` of a Policy manifest, dedented: the Rego module.
fn policy_module(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|l| l.trim_end() != "  module: |");
    lines.next().expect("the manifest has `module: |`");
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.get(4..).unwrap_or(""))
        .collect();
    body.join("\n").trim_end().to_owned() + "\n"
}

/// Once the install is Active, asks for a new database name, which forces a new
/// instance (`triggers_replace`); returns the database stand-in's state before, and the
/// database's new deploy Plan once it finished.
async fn replace_database(flow: &Flow) -> (Value, Plan) {
    flow.install_reaches(InstallPhase::Active, 300).await;
    let before = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    let first = flow.succeeded(Operation::Deploy, "database").await;

    // A new database name forces a new instance (`triggers_replace`).
    flow.cp.kubectl().ok(&[
        "patch",
        "install",
        INSTALL,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"inputs":{"db_name":"shop_v2"}}}"#,
    ]);
    let replan = eventually(
        120,
        "the database's new deploy Plan to finish",
        async || {
            flow.plans_of(Operation::Deploy, "database")
                .await
                .into_iter()
                .find(|p| {
                    p.metadata.name != first.metadata.name
                        && phase(p).is_some_and(PlanPhase::is_terminal)
                })
        },
    )
    .await;
    (before, replan)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_policy_denies_replacing_the_database_the_control_plane_approved() {
    // The customer keeps the example's no-database-recreate policy in the runner's
    // local configuration: the vendor cannot switch it off.
    let manifest =
        std::fs::read_to_string(manifests().join("policies/no-database-recreate.yaml")).unwrap();
    let module = format!("# outpost:inputs terraform\n{}", policy_module(&manifest));
    let flow = start(&[("no-database-recreate.rego", module)]).await;
    let (before, replan) = replace_database(&flow).await;
    let name = replan.metadata.name.clone().unwrap();
    let status = replan.status.clone().unwrap();

    // The control plane passed it to the runner (approve-all: no person asked; no vendor
    // policy denied) ...
    assert!(
        status.role.is_some() && status.approval.is_none(),
        "the control plane passed {name}: {status:?}"
    );
    assert!(
        status.verdicts.iter().all(|v| !v.denied),
        "no control-plane verdict denied it: {:?}",
        status.verdicts
    );
    // ... and the runner's local policy denied the real diff: the Plan failed with the
    // policy's message, nothing was applied.
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "denied by local policy local/no-database-recreate: terraform_data.database \
             would be replaced (delete and create); database data would be lost"
        )
    );
    let after = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    assert_eq!(after, before, "the database stand-in was not replaced");
    assert_eq!(after["input"]["value"]["db_name"], "shop");
    flow.install_reaches(InstallPhase::Degraded, 30).await;

    // The audit log records the local deny and the refusal, and verifies.
    flow.audit_verifies().await;
    let events: Api<AuditEvent> = Api::namespaced(flow.cp.client().await, "default");
    let of_plan: Vec<AuditEvent> = events
        .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.spec.plan.as_deref() == Some(name.as_str()))
        .collect();
    let details = |type_: AuditEventType| -> Vec<Value> {
        of_plan
            .iter()
            .filter(|e| e.spec.type_ == type_)
            .filter_map(|e| e.spec.details.clone())
            .collect()
    };
    let verdicts = details(AuditEventType::Verdict);
    assert!(
        verdicts.iter().any(|d| d["local"] == true
            && d["verdicts"].as_array().is_some_and(|vs| vs
                .iter()
                .any(|v| { v["policy"] == "local/no-database-recreate" && v["denied"] == true }))),
        "a local deny verdict is audited: {verdicts:#?}"
    );
    let refusals = details(AuditEventType::Refuse);
    assert!(
        refusals
            .iter()
            .any(|d| d["failed"].as_str() == status.message.as_deref()),
        "the refusal is audited: {refusals:#?}"
    );
    assert!(
        details(AuditEventType::Apply).is_empty(),
        "no apply of {name} was audited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vendors_policies_are_evaluated_on_the_real_diff_too() {
    // The vendor's own no-database-recreate Policy: at the gate it has no terraform plan
    // to look at (the desired state holds none); the runner evaluates it on the plan
    // terraform computed against live state.
    let flow = start(&[]).await;
    flow.cp.kubectl().ok(&[
        "apply",
        "-f",
        manifests()
            .join("policies/no-database-recreate.yaml")
            .to_str()
            .unwrap(),
    ]);
    let (before, replan) = replace_database(&flow).await;
    let status = replan.status.clone().unwrap();
    assert!(
        status.verdicts.iter().all(|v| !v.denied),
        "no verdict at the gate denied it: {:?}",
        status.verdicts
    );
    assert!(status.role.is_some(), "passed by the gate: {status:?}");
    assert_eq!(status.phase, Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "denied by vendor policy on the real diff no-database-recreate: \
             terraform_data.database would be replaced (delete and create); database data \
             would be lost"
        )
    );
    let after = terraform_data(&tfstate(&flow.state, "component-database"), "database");
    assert_eq!(after, before, "the database stand-in was not replaced");
    flow.audit_verifies().await;
}
