//! The `outpost` CLI verbs (`status`, `deploy`, `trigger`, `approve`, `deny`, `drift`,
//! `logs`, and `kubectl outpost`) against the real `outpost server` and `outpost
//! controllers`, the example app applied, and the test playing the runner: on a
//! `prompt` install it posts a diff for approval first; it moves Ready (approve-all) and
//! Approved Plans through Applying (a first log line) to Succeeded (a second one, and
//! the outputs later components' templates need).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kube_client::api::{Api, ListParams, Patch, PatchParams, PostParams};
use outpost_api::{DriftReport, Install, Plan, Runner};
use outpost_e2e::{Backend, ControlPlane, Process, manifests, outpost_binary};
use serde_json::{Value, json};

/// A control plane with controllers, the example app and a simulated runner.
struct Fleet {
    cp: ControlPlane,
    kubeconfig: PathBuf,
    _controllers: Process,
    runner: tokio::task::JoinHandle<()>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.runner.abort();
    }
}

impl Fleet {
    async fn start() -> Fleet {
        let cp = ControlPlane::start(Backend::Embedded).await;
        cp.kubectl()
            .ok(&["apply", "-f", manifests().to_str().unwrap()]);
        let controllers = cp.start_controllers("cli");
        let plans = Api::<Plan>::namespaced(cp.client().await, "default");
        let runner = tokio::spawn(play_runner(plans));
        Fleet {
            kubeconfig: cp.kubeconfig(&cp.admin_token),
            cp,
            _controllers: controllers,
            runner,
        }
    }

    /// `outpost ARGS...` as the admin (through `KUBECONFIG`), as operator alice.
    fn outpost(&self, args: &[&str]) -> Ran {
        let mut command = Command::new(outpost_binary());
        command.args(args);
        self.run(command)
    }

    fn run(&self, mut command: Command) -> Ran {
        let output: Output = command
            .env("KUBECONFIG", &self.kubeconfig)
            .env("OUTPOST_USER", "alice")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("outpost runs");
        Ran {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `outpost ARGS...`, which must succeed.
    fn ok(&self, args: &[&str]) -> Ran {
        let ran = self.outpost(args);
        assert!(ran.ok, "outpost {} failed: {ran:?}", args.join(" "));
        ran
    }

    /// `outpost ARGS...`, which must fail; its standard error.
    fn fails(&self, args: &[&str]) -> String {
        let ran = self.outpost(args);
        assert!(!ran.ok, "outpost {} succeeded: {ran:?}", args.join(" "));
        ran.stderr
    }

    async fn plans(&self) -> Api<Plan> {
        Api::namespaced(self.cp.client().await, "default")
    }

    /// Waits (30 s at most) until `status -o json` shows `install` in `phase`.
    async fn wait_install(&self, install: &str, phase: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ran = self.ok(&["status", "-o", "json"]);
            let rows: Vec<Value> = serde_json::from_str(&ran.stdout).expect("status -o json");
            let row = rows.into_iter().find(|r| r["name"] == install);
            if let Some(row) = row.filter(|r| r["phase"] == phase) {
                return row;
            }
            assert!(Instant::now() < deadline, "{install} never got {phase}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The name of the first Plan of `install` that reaches `phase` (30 s at most).
    async fn wait_plan_in(&self, install: &str, phase: &str) -> String {
        let plans = self.plans().await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let listed = plans
                .list(&ListParams::default().labels(&format!("outpost.dev/install={install}")))
                .await
                .unwrap();
            if let Some(plan) = listed.items.iter().find(|p| phase_of(p) == phase) {
                return plan.metadata.name.clone().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "no plan of {install} got {phase}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[derive(Debug)]
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn phase_of(plan: &Plan) -> String {
    plan.status
        .as_ref()
        .and_then(|s| s.phase)
        .map(|p| format!("{p:?}"))
        .unwrap_or_default()
}

fn outputs(plan: &Plan) -> Value {
    match (plan.spec.operation.as_str(), plan.spec.entity.name.as_str()) {
        ("provision", _) => {
            json!({"private_subnet_ids": ["subnet-a"], "cluster_name": "acme-eks"})
        }
        ("deploy", "database") => json!({"endpoint": "db.internal:5432"}),
        ("deploy", "cache") => json!({"host": "cache.internal:6379"}),
        ("deploy", "web-image") => json!({"reference": "registry.example/web@sha256:abc"}),
        _ => json!({}),
    }
}

/// Plays the runner (as the admin: the server lets operators make the runner's moves):
/// Ready → Claimed → (a `prompt` install's: AwaitingApproval with a one-resource diff →
/// Approved by a person →) Applying (log `applying NAME`) → Succeeded (log
/// `applied NAME`, outputs), one step per pass.
async fn play_runner(plans: Api<Plan>) {
    let installs: Api<Install> = Api::namespaced(plans.clone().into_client(), "default");
    loop {
        let prompt: Vec<String> = match installs.list(&ListParams::default()).await {
            Ok(listed) => listed
                .items
                .into_iter()
                .filter(|i| i.spec.approval_mode() == outpost_api::ApprovalMode::Prompt)
                .filter_map(|i| i.metadata.name)
                .collect(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        if let Ok(listed) = plans.list(&ListParams::default()).await {
            for plan in listed.items {
                let name = plan.metadata.name.clone().unwrap();
                let status = match phase_of(&plan).as_str() {
                    "Ready" => json!({"phase": "Claimed"}),
                    "Claimed" if prompt.contains(&plan.spec.install) => {
                        let diff = outpost_api::PlanDiff::new(
                            outpost_api::content_hash(&json!({"plan": name})),
                            1,
                            0,
                            0,
                        );
                        json!({"phase": "AwaitingApproval", "diff": diff})
                    }
                    "Claimed" | "Approved" => {
                        json!({"phase": "Applying", "log": format!("applying {name}\n")})
                    }
                    "Applying" => json!({
                        "phase": "Succeeded",
                        "finishedAt": jiff::Timestamp::now().to_string(),
                        "log": format!("applying {name}\napplied {name}\n"),
                        "outputs": outputs(&plan),
                    }),
                    _ => continue,
                };
                let _ = plans
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_summarises_each_install_also_as_a_kubectl_plugin() {
    let fleet = Fleet::start().await;
    let globex = fleet.wait_install("globex", "Active").await;
    assert_eq!(globex["app"], "shopfront");
    assert_eq!(globex["components"], 5, "{globex}");
    assert_eq!(globex["componentsInSync"], 5, "{globex}");
    assert_eq!(globex["runnerOnline"], false);
    // acme is in prompt mode: its sandbox Plan waits for approval.
    fleet.wait_plan_in("acme", "AwaitingApproval").await;
    // Runners as they register and heartbeat: globex's just now, acme's 10 minutes ago
    // (the example app's heartbeat is the default, 30 s: three missed make it offline).
    let runners = Api::<Runner>::namespaced(fleet.cp.client().await, "default");
    for (install, ago) in [("globex", 1), ("acme", 600)] {
        let runner: Runner = serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Runner",
            "metadata": {"name": format!("{install}-runner")},
            "spec": {"install": install, "version": "9.9.9", "publicKey": format!("{}=", "A".repeat(43))},
        }))
        .unwrap();
        runners
            .create(&PostParams::default(), &runner)
            .await
            .unwrap();
        let beat = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(ago);
        runners
            .patch_status(
                &format!("{install}-runner"),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"lastHeartbeat": beat.to_string()}})),
            )
            .await
            .unwrap();
    }
    let table = fleet.ok(&["status"]).stdout;
    let header = table.lines().next().unwrap();
    for column in [
        "INSTALL", "PHASE", "IN-SYNC", "DRIFTED", "AWAITING", "RUNNER",
    ] {
        assert!(header.contains(column), "{table}");
    }
    let row = |name: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} row:\n{table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        row("globex")[..9],
        [
            "default",
            "globex",
            "shopfront",
            "Active",
            "5/5",
            "0",
            "0",
            "0",
            "online"
        ]
    );
    assert_eq!(row("globex")[10..], ["ago", "9.9.9"], "{table}");
    let acme = row("acme");
    assert_eq!(acme[7], "1", "one plan awaits approval:\n{table}");
    assert_eq!(acme[8..], ["offline", "10m", "ago", "9.9.9"], "{table}");

    // --server and --token instead of a kubeconfig; a wrong token says what to check.
    let direct = |token: &str| {
        Command::new(outpost_binary())
            .args([
                "status",
                "-o",
                "json",
                "--server",
                &fleet.cp.url,
                "--token",
                token,
            ])
            .arg("--certificate-authority")
            .arg(&fleet.cp.tls.ca)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let ok = direct(&fleet.cp.viewer_token);
    assert!(ok.status.success(), "{ok:?}");
    let rows: Vec<Value> = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(rows.len(), 2);
    let refused = direct("not-a-token");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("refused the credentials (401)")
            && stderr.contains("--token"),
        "{stderr}"
    );
    // YAML carries the same summary.
    let yaml = fleet.ok(&["status", "-o", "yaml"]).stdout;
    assert!(
        yaml.contains("name: globex") && yaml.contains("componentsInSync: 5"),
        "{yaml}"
    );

    // `kubectl outpost status`: kubectl finds `kubectl-outpost` on PATH.
    let bin = fleet.cp.scratch().join("plugin-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(outpost_binary(), bin.join("kubectl-outpost")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut kubectl = Command::new("kubectl");
    kubectl
        .args(["outpost", "status", "-o", "json"])
        .env("PATH", &path);
    let plugin = fleet.run(kubectl);
    assert!(plugin.ok, "{plugin:?}");
    let rows: Vec<Value> = serde_json::from_str(&plugin.stdout).unwrap();
    assert!(
        rows.iter().any(|r| r["name"] == "globex"),
        "{}",
        plugin.stdout
    );
    let mut help = Command::new("kubectl");
    help.args(["outpost", "--help"]).env("PATH", &path);
    let help = fleet.run(help);
    assert!(help.stdout.contains("Usage: kubectl outpost"), "{help:?}");

    // Errors say what to do next.
    let bad = fleet.fails(&["status", "-o", "xml"]);
    assert!(bad.contains("possible values: table, json, yaml"), "{bad}");
    let everywhere: Vec<Value> = serde_json::from_str(
        &fleet
            .ok(&["status", "-A", "-n", "nowhere", "-o", "json"])
            .stdout,
    )
    .unwrap();
    assert_eq!(everywhere.len(), 2, "-A wins over -n: {everywhere:?}");
    let empty = fleet.ok(&["status", "-n", "nowhere"]);
    assert!(
        empty.stderr.contains("no installs in namespace nowhere")
            && empty.stderr.contains("kubectl apply"),
        "{empty:?}"
    );
    let unreachable = Command::new(outpost_binary())
        .args(["status"])
        .env_remove("KUBECONFIG")
        .env("HOME", fleet.cp.scratch())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(
        !unreachable.status.success() && stderr.contains("pass --server and --token"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_binds_to_the_content_hash_and_logs_follow_the_plan() {
    let fleet = Fleet::start().await;
    let plans = fleet.plans().await;
    let waiting = fleet.wait_plan_in("acme", "AwaitingApproval").await;
    // Follow the Plan's log from before it is approved until it finishes.
    let mut follow = Command::new(outpost_binary());
    follow
        .args(["logs", &waiting, "-f"])
        .env("KUBECONFIG", &fleet.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut follower = follow.spawn().unwrap();
    // Approve only once the follower has seen the Plan waiting.
    let (lines, seen) = std::sync::mpsc::channel();
    let follower_stderr = follower.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut all = String::new();
        for line in std::io::BufReader::new(follower_stderr).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = lines.send(line);
        }
        all
    });
    let awaiting = format!("plan {waiting}: AwaitingApproval");
    loop {
        let line = seen
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the follower reports the Plan awaiting approval");
        if line.contains(&awaiting) {
            break;
        }
    }
    // OUTPOST_USER is alice, but the server records who the token authenticates.
    let approved = fleet.ok(&["approve", &waiting]);
    assert!(
        approved.stderr.contains("approved by admin"),
        "{approved:?}"
    );
    let plan = plans.get(&waiting).await.unwrap();
    let approval = plan.status.as_ref().unwrap().approval.clone().unwrap();
    assert_eq!(approval.by, "admin");
    assert_eq!(Some(approval.content_hash), plan.spec.content_hash);
    let followed = tokio::task::spawn_blocking(move || follower.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&followed.stdout);
    let stderr = reader.join().unwrap();
    assert!(followed.status.success(), "{stderr}");
    assert_eq!(
        stdout,
        format!("applying {waiting}\napplied {waiting}\n"),
        "each line once"
    );
    for phase in ["AwaitingApproval", "Succeeded"] {
        assert!(
            stderr.contains(&format!("plan {waiting}: {phase}")),
            "{stderr}"
        );
    }
    let json = fleet.fails(&["logs", &waiting, "-o", "json"]);
    assert!(
        json.contains(&format!("kubectl get plan {waiting} -n default -o json")),
        "{json}"
    );
    // Without -f: the log as it is.
    let logs = fleet.ok(&["logs", &waiting]);
    assert_eq!(
        logs.stdout,
        format!("applying {waiting}\napplied {waiting}\n")
    );

    // A Plan that does not wait cannot be approved or denied; the error says where it is.
    let again = fleet.fails(&["approve", &waiting]);
    assert!(
        again.contains(&format!(
            "plan default/{waiting} is Succeeded, not AwaitingApproval"
        )) && again.contains(&format!("outpost logs {waiting}")),
        "{again}"
    );
    // A viewer may look but not decide.
    // A policy that warns on manual runs: the approver sees it.
    let policy = fleet.cp.scratch().join("notice.yaml");
    std::fs::write(
        &policy,
        "apiVersion: outpost.dev/v1alpha1\nkind: Policy\nmetadata:\n  name: trigger-notice\nspec:\n  app: shopfront\n  enforcement: warn\n  inputs: [plan]\n  module: |\n    package outpost.trigger_notice\n\n    warn contains msg if {\n      input.operation == \"trigger\"\n      msg := sprintf(\"%s runs by hand\", [input.entity.name])\n    }\n",
    )
    .unwrap();
    fleet
        .cp
        .kubectl()
        .ok(&["apply", "-f", policy.to_str().unwrap()]);
    // acme's next steps wait for its maintenance window; a manual trigger does not.
    // `--wait` shows the Plan waiting for approval (and how to give it), then its end.
    let mut trigger = Command::new(outpost_binary());
    trigger
        .args(["trigger", "migrate", "--install", "acme", "--wait"])
        .env("KUBECONFIG", &fleet.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let trigger = trigger.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let manual = loop {
        let listed = plans
            .list(&ListParams::default().labels("outpost.dev/install=acme"))
            .await
            .unwrap();
        let found = listed
            .items
            .into_iter()
            .find(|p| p.spec.entity.name == "migrate" && phase_of(p) == "AwaitingApproval");
        if let Some(plan) = found {
            break plan.metadata.name.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the manual trigger was never gated"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let viewer = Command::new(outpost_binary())
        .args(["deny", &manual, "--reason", "not now"])
        .env("KUBECONFIG", fleet.cp.kubeconfig(&fleet.cp.viewer_token))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&viewer.stderr);
    assert!(
        !viewer.status.success()
            && stderr.contains("is forbidden")
            && stderr.contains("outpost:approvers or outpost:admins"),
        "{stderr}"
    );
    let plan = plans.get(&manual).await.unwrap();
    assert_eq!(
        phase_of(&plan),
        "AwaitingApproval",
        "the viewer changed nothing"
    );
    let approved = fleet.ok(&["approve", &manual]);
    assert!(
        approved.stderr.contains(&format!(
            "plan {manual}: trigger of action migrate on install acme under role "
        )) && approved
            .stderr
            .contains("policy trigger-notice warns: migrate runs by hand"),
        "{approved:?}"
    );
    let waited = tokio::task::spawn_blocking(move || trigger.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&waited.stderr);
    assert!(waited.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout).trim(),
        format!("plan/{manual}")
    );
    let awaiting = stderr
        .lines()
        .position(|l| {
            l.starts_with(&format!("plan {manual}: AwaitingApproval"))
                && l.contains(&format!("approve the diff with `outpost approve {manual}`"))
        })
        .unwrap_or_else(|| panic!("{stderr}"));
    let succeeded = stderr
        .lines()
        .position(|l| l.starts_with(&format!("plan {manual}: Succeeded")))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(awaiting < succeeded, "{stderr}");
    let missing = fleet.fails(&["approve", "nope"]);
    assert!(
        missing.contains("plan default/nope not found") && missing.contains("kubectl get plans"),
        "{missing}"
    );
    assert!(
        fleet
            .fails(&["logs", "nope"])
            .contains("plan default/nope not found")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_records_who_and_why() {
    let fleet = Fleet::start().await;
    let plans = fleet.plans().await;
    let waiting = fleet.wait_plan_in("acme", "AwaitingApproval").await;
    let denied = fleet.ok(&[
        "deny",
        &waiting,
        "--reason",
        "no change ticket",
        "-o",
        "json",
    ]);
    let shown: Plan = serde_json::from_str(&denied.stdout).unwrap();
    assert_eq!(phase_of(&shown), "Denied");
    let plan = plans.get(&waiting).await.unwrap();
    assert_eq!(phase_of(&plan), "Denied");
    assert_eq!(
        plan.status.unwrap().message.as_deref(),
        Some("denied by admin: no change ticket"),
        "the server records who the token authenticates, not OUTPOST_USER"
    );
    // The install shows the denial as a failure.
    fleet.wait_install("acme", "Degraded").await;
    let again = fleet.fails(&["deny", &waiting, "--reason", "twice"]);
    assert!(again.contains("is Denied, not AwaitingApproval"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_asks_the_install_controller_for_a_plan_like_its_own() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let plans = fleet.plans().await;
    let deployed = fleet.ok(&["deploy", "cache", "--install", "globex", "--wait"]);
    let name = deployed
        .stdout
        .trim()
        .strip_prefix("plan/")
        .unwrap_or_else(|| panic!("{deployed:?}"))
        .to_owned();
    assert!(name.starts_with("globex-deploy-cache-"), "{name}");
    // Progress: the phase changes it saw on standard error (polled, so a short-lived
    // phase may pass unseen), in lifecycle order, ending with Succeeded.
    let order = ["Pending", "Ready", "Claimed", "Applying", "Succeeded"];
    let seen: Vec<usize> = deployed
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("plan {name}: ")))
        .map(|rest| {
            let phase = rest.split([' ', ':']).next().unwrap();
            order
                .iter()
                .position(|p| *p == phase)
                .unwrap_or_else(|| panic!("{rest}"))
        })
        .collect();
    assert!(seen.is_sorted(), "{deployed:?}");
    assert_eq!(seen.last(), Some(&(order.len() - 1)), "{deployed:?}");
    let plan = plans.get(&name).await.unwrap();
    assert_eq!(phase_of(&plan), "Succeeded");
    assert_eq!(plan.spec.operation.as_str(), "deploy");
    assert_eq!(
        plan.spec.reason.as_deref(),
        Some("manual: requested by alice")
    );
    assert_eq!(
        plan.metadata.labels.as_ref().unwrap()["outpost.dev/install"],
        "globex"
    );
    let install = Api::<Install>::namespaced(fleet.cp.client().await, "default")
        .get("globex")
        .await
        .unwrap();
    let owner = &plan.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Install", install.metadata.uid.as_deref().unwrap())
    );
    // The desired state is the one the controller rendered for its own deploy of cache.
    let converge = plans
        .list(&ListParams::default().labels("outpost.dev/install=globex"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.entity.name == "cache" && p.spec.reason.as_deref() == Some("converge"))
        .unwrap();
    assert_eq!(plan.spec.desired_state, converge.spec.desired_state);
    assert_eq!(
        plan.spec.content_hash,
        Some(outpost_api::content_hash(
            plan.spec.desired_state.as_ref().unwrap()
        ))
    );

    // acme's components wait for its sandbox (awaiting approval): no Plan can be made yet.
    let waits = fleet.fails(&["deploy", "web", "--install", "acme", "--timeout", "2"]);
    assert!(
        waits.contains("the install controller did not make plan default/acme-deploy-web-")
            && waits.contains("once its dependencies are deployed"),
        "{waits}"
    );

    assert!(waits.contains("the request was withdrawn"), "{waits}");
    // Served and withdrawn requests leave the Install: deleting a Plan never re-runs it.
    let installs = Api::<Install>::namespaced(fleet.cp.client().await, "default");
    for install in ["acme", "globex"] {
        let requests = installs.get(install).await.unwrap().spec.requests;
        assert!(requests.is_empty(), "{install}: {requests:?}");
    }

    // Errors name the object and what to do next.
    let install = fleet.fails(&["deploy", "cache", "--install", "nope"]);
    assert!(
        install.contains("install default/nope not found")
            && install.contains("outpost status -n default"),
        "{install}"
    );
    let component = fleet.fails(&["deploy", "nope", "--install", "globex"]);
    assert!(
        component.contains("component default/nope not found in app shopfront")
            && component.contains("kubectl get components"),
        "{component}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_runs_an_action_under_the_runtime_override() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let plans = fleet.plans().await;
    let uid = Api::<Install>::namespaced(fleet.cp.client().await, "default")
        .get("globex")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    // The override is the role's name template, as the App declares it.
    let template = "{{ install.id }}-break-glass";
    let role = format!("{uid}-break-glass");
    let ran = fleet.ok(&[
        "trigger",
        "migrate",
        "--install",
        "globex",
        "--role",
        template,
        "--wait",
        "-o",
        "json",
    ]);
    let plan: Plan = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(phase_of(&plan), "Succeeded");
    assert_eq!(plan.spec.operation.as_str(), "trigger");
    assert_eq!(plan.spec.role_override.as_deref(), Some(template));
    let resolved = plan.status.unwrap().role.unwrap();
    assert_eq!(resolved.name, role);
    assert_eq!(serde_json::to_value(resolved.level).unwrap(), "override");

    // Without --role the chain picks the default role.
    let ran = fleet.ok(&[
        "trigger",
        "migrate",
        "--install",
        "globex",
        "--wait",
        "-o",
        "yaml",
    ]);
    assert!(
        ran.stdout.contains(&format!("name: {uid}-maintenance")),
        "{}",
        ran.stdout
    );

    // A role the App does not declare: the gate denies the Plan, --wait says why.
    let denied = fleet.fails(&[
        "trigger",
        "migrate",
        "--install",
        "globex",
        "--role",
        "made-up-role",
        "--wait",
    ]);
    assert!(
        denied.contains(": Denied") && denied.contains("made-up-role"),
        "{denied}"
    );
    let name = fleet.wait_plan_in("globex", "Denied").await;
    assert_eq!(
        plans
            .get(&name)
            .await
            .unwrap()
            .spec
            .role_override
            .as_deref(),
        Some("made-up-role")
    );

    // Errors name the object and what to do next.
    let unknown = fleet.fails(&["trigger", "nope", "--install", "globex"]);
    assert!(
        unknown.contains("action default/nope not found in app shopfront")
            && unknown.contains("kubectl get actions"),
        "{unknown}"
    );
    let cron_only = fleet.fails(&["trigger", "backup-check", "--install", "globex"]);
    assert!(
        cron_only.contains("action default/backup-check has no manual trigger")
            && cron_only.contains("type: manual"),
        "{cron_only}"
    );
    let install = fleet.fails(&["trigger", "migrate", "--install", "nope"]);
    assert!(
        install.contains("install default/nope not found"),
        "{install}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_lists_reports_with_their_field_diffs() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let reports = Api::<DriftReport>::namespaced(fleet.cp.client().await, "default");
    let report: DriftReport = serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "DriftReport",
        "metadata": {"name": "globex-web", "labels": {"outpost.dev/install": "globex", "outpost.dev/component": "web"}},
        "spec": {
            "install": "globex",
            "entity": {"kind": "component", "name": "web"},
            "inSync": false,
            "observedAt": jiff::Timestamp::now().to_string(),
            "diff": [{"path": "Deployment/shop/web.spec.replicas", "op": "changed", "desired": 2, "live": 5}],
        }
    }))
    .unwrap();
    reports
        .create(&PostParams::default(), &report)
        .await
        .unwrap();
    let table = fleet.ok(&["drift", "globex"]).stdout;
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..3] == ["globex", "web", "Drifted"]),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["Deployment/shop/web.spec.replicas", "changed", "2", "5"]),
        "{table}"
    );
    let json: Vec<DriftReport> =
        serde_json::from_str(&fleet.ok(&["drift", "-o", "json"]).stdout).unwrap();
    assert_eq!(json.len(), 1);
    assert_eq!(
        json[0].spec.diff[0].path,
        "Deployment/shop/web.spec.replicas"
    );
    // The install status counts it once the controller saw the report.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fleet.wait_install("globex", "Active").await["drifted"] != 1 {
        assert!(Instant::now() < deadline, "status never counted the drift");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let none = fleet.ok(&["drift", "acme"]);
    assert!(
        none.stdout.is_empty() && none.stderr.contains("no drift reports"),
        "{none:?}"
    );
    let unknown = fleet.fails(&["drift", "nope"]);
    assert!(
        unknown.contains("install default/nope not found") && unknown.contains("outpost status"),
        "{unknown}"
    );
    let waited = fleet.fails(&["drift", "acme", "--wait", "--timeout", "1"]);
    assert!(
        waited.contains("no drift reported in namespace default for install acme within 1 s"),
        "{waited}"
    );
    // --wait returns at once when a report already shows drift.
    let table = fleet.ok(&["drift", "globex", "--wait"]).stdout;
    assert!(table.contains("Drifted"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_once_an_install_converged_and_says_what_holds_it_up() {
    let fleet = Fleet::start().await;
    fleet.wait_install("globex", "Active").await;
    let done = fleet.ok(&["wait", "globex"]);
    assert!(
        done.stdout.contains("install default/globex is Active"),
        "{done:?}"
    );
    // acme's first Plan waits for an approval (prompt mode): wait names it and the command
    // that approves it, then gives up after --timeout.
    let held = fleet.wait_plan_in("acme", "AwaitingApproval").await;
    let ran = fleet.outpost(&["wait", "acme", "--timeout", "1"]);
    assert!(!ran.ok, "{ran:?}");
    assert!(
        ran.stdout.contains(&format!(
            "plan {held} awaits approval of its diff (1 to add, 0 to change, 0 to destroy): `outpost approve {held} -n default`"
        )),
        "{ran:?}"
    );
    assert!(
        ran.stderr
            .contains("install default/acme did not converge within 1 s")
            && ran
                .stderr
                .contains("kubectl get plans -l outpost.dev/install=acme"),
        "{ran:?}"
    );
    let unknown = fleet.fails(&["wait", "nope"]);
    assert!(
        unknown.contains("install default/nope not found") && unknown.contains("outpost status"),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_and_audit_verify_take_an_install_by_name_in_the_namespace() {
    let fleet = Fleet::start().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let printed = loop {
        // The install stack controller renders it shortly after the install appears.
        let ran = fleet.outpost(&["stack", "acme"]);
        if ran.ok {
            break ran.stdout;
        }
        assert!(Instant::now() < deadline, "no stack for acme: {ran:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let template: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(template["Parameters"]["RunnerToken"]["NoEcho"], true);
    let elsewhere = fleet.fails(&["stack", "acme", "-n", "other"]);
    assert!(
        elsewhere.contains("install other/acme has no stack yet")
            && elsewhere.contains("kubectl get install acme -n other"),
        "{elsewhere}"
    );
    // No runner has signed anything for acme yet; an unknown install is an error.
    let verified = fleet.ok(&["audit", "verify", "acme", "--trust-control-plane"]);
    assert_eq!(verified.stdout, "0 events verified\n");
    assert!(
        verified
            .stderr
            .contains("warning: trusting the public keys of the control plane's Runner objects"),
        "{verified:?}"
    );
    // Without a trust anchor it refuses, and says which to give.
    let refused = fleet.fails(&["audit", "verify", "acme"]);
    assert!(
        refused.contains("no trust anchor: give --key FILE")
            && refused.contains("--trust-control-plane"),
        "{refused}"
    );
    let unknown = fleet.fails(&[
        "audit",
        "verify",
        "nope",
        "-n",
        "other",
        "--trust-control-plane",
    ]);
    assert!(
        unknown.contains("install other/nope not found")
            && unknown.contains("outpost status -n other"),
        "{unknown}"
    );
}
