//! `status` (also as a kubectl plugin), `wait`, `stack` and `audit verify`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_summarises_each_install_also_as_a_kubectl_plugin() {
    let fleet = Fleet::start().await;
    let globex = fleet.wait_install("globex", "Active").await;
    assert_eq!(globex["app"], "shopfront");
    assert_eq!(globex["components"], 5, "{globex}");
    assert_eq!(globex["componentsInSync"], 5, "{globex}");
    assert_eq!(globex["runnerOnline"], false);
    // acme is in prompt mode: its sandbox Plan waits for approval.
    fleet
        .wait_plan_in("acme", PlanPhase::AwaitingApproval)
        .await;
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
    let held = fleet
        .wait_plan_in("acme", PlanPhase::AwaitingApproval)
        .await;
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
    // The install stack controller renders it shortly after the install appears.
    let mut last = None;
    let printed = wait_for(Duration::from_secs(30), async || {
        let ran = fleet.outpost(&["stack", "acme"]);
        if ran.ok {
            return Some(ran.stdout);
        }
        last = Some(ran);
        None
    })
    .await
    .unwrap_or_else(|| panic!("no stack for acme: {last:?}"));
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
