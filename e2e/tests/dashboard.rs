//! The dashboard (`/ui`) in headless Chromium, driven over WebDriver (chromedriver,
//! fantoccini), against real processes: `outpost server` with `outpost controllers`, a
//! stand-in cluster, and `outpost runner` with real terraform. The install is in
//! `prompt` approval mode, so its Plans wait for an admin.
//!
//! As a viewer: log in, open the sandbox Plan that waits, click Approve — refused with
//! the API's 403, and the Plan still waits. As an admin: approve it and the component's
//! Plan by clicking; the install becomes Active and the fleet matrix shows the cell in
//! sync. A `kubectl edit` of the Deployment in the stand-in turns the cell drifted on the
//! open page without a reload (server-sent events); the cell opens the install page
//! with the side-by-side diff (`spec.replicas` applied 2, live 5) and the verified audit
//! log. The admin triggers a manual action from the install page under a runtime role
//! override (the Plan opens, its role chosen by the override); a viewer is refused with
//! the API's 403 and no Plan is made. A Rollout of component web over acme and a second
//! install (no runner, `prompt` mode) shows on the Rollouts page (reached from the
//! navigation) with its phase, wave and installs updated, and on its own page with
//! acme done in wave 1 and the second install held in wave 2 awaiting approval. A
//! screenshot of every page goes to `$CARGO_TARGET_TMPDIR/ui-screenshots/`.
//!
//! Over 600 lines and kept whole: it is one browser scenario (a single test, 400 lines,
//! each step building on the last) and the fixture it needs; split, the steps would
//! only be read out of order.

use std::path::Path;
use std::time::Instant;

use fantoccini::Locator;
use kube_client::api::{Api, ListParams, Patch, PatchParams};
use outpost_api::{InstallPhase, InstallProgressState, Plan, PlanPhase, Rollout};
use outpost_testing::browser::Browser;
use outpost_testing::job_plans::{drift_report_in_sync, install_reaches};
use outpost_testing::phase;
use outpost_testing::{Backend, ControlPlane, Process, eventually};

use crate::drift::{drift_app, drift_runner};

const INSTALL: &str = "acme";

/// The App of the drift test (a terraform sandbox and one Deployment, a drift policy),
/// a manual action, and an install whose Plans wait for approval.
fn objects(sandbox: &Path) -> String {
    format!(
        r#"{app}---
apiVersion: outpost.dev/v1alpha1
kind: Action
metadata:
  name: rotate-logs
spec:
  app: drift-app
  description: Rotates the web tier's logs.
  triggers:
    - type: manual
  steps:
    - name: rotate
      script: echo rotated
---
{install}"#,
        app = drift_app(sandbox, false, ""),
        install = install(INSTALL, "1"),
    )
}

/// An install of the App labelled `tier: gold` and `ring`, whose Plans wait for approval.
fn install(name: &str, ring: &str) -> String {
    format!(
        r#"apiVersion: outpost.dev/v1alpha1
kind: Install
metadata:
  name: {name}
  labels:
    tier: gold
    ring: "{ring}"
spec:
  app: drift-app
  approvalMode: prompt
  cloud:
    provider: aws
    accountId: "111122223333"
    region: eu-west-1
"#
    )
}

/// A second install of the App (no runner: its Plans wait for approval) and a Rollout
/// of component web over both installs, one per wave by `ring`.
fn rollout_objects() -> String {
    format!("{}---\n{ROLLOUT}", install("globex", "2"))
}

/// The Rollout of [`rollout_objects`].
const ROLLOUT: &str = r#"apiVersion: outpost.dev/v1alpha1
kind: Rollout
metadata:
  name: web-rollout
spec:
  app: drift-app
  component: web
  selector:
    matchLabels:
      tier: gold
  orderBy: ring
  waveSize: 1
"#;

/// Plays `install`'s runner for its `Ready` Plans: posts a one-change diff and asks for
/// approval (the runner's move, which the server lets an operator make too).
async fn ask_for_approval(plans: &Api<Plan>, install: &str) {
    let Ok(listed) = plans
        .list(&ListParams::default().labels(&format!("outpost.dev/install={install}")))
        .await
    else {
        return;
    };
    for plan in listed.items {
        if phase(&plan) != Some(PlanPhase::Ready) {
            continue;
        }
        let name = plan.metadata.name.clone().unwrap_or_default();
        let diff = outpost_api::PlanDiff::new(
            outpost_api::content_hash(&serde_json::json!({"plan": name})),
            0,
            1,
            0,
        );
        let status = serde_json::json!({"status": {"phase": "AwaitingApproval", "diff": diff}});
        let _ = plans
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await;
    }
}

/// The message the page shows once the API refused the user's click with 403.
async fn refused(browser: &Browser) -> String {
    let error = browser.find("#error").await;
    let status = error.attr("data-status").await.unwrap();
    assert_eq!(status.as_deref(), Some("403"));
    browser.text("#error").await
}

/// The install's Plan of `entity` once it waits for approval.
async fn awaiting(plans: &Api<Plan>, entity: &str) -> String {
    eventually(
        90,
        &format!("the {entity} Plan to await approval"),
        async || {
            plans
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| {
                    p.spec.entity.name == entity
                        && p.status.as_ref().and_then(|s| s.phase)
                            == Some(PlanPhase::AwaitingApproval)
                })?
                .metadata
                .name
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_the_fleet_live_and_lets_admins_approve() {
    let started = Instant::now();
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = ControlPlane::start_standin_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let sandbox = outpost_testing::shop::ready_sandbox(dir.path());
    let file = dir.path().join("app.yaml");
    std::fs::write(&file, objects(&sandbox)).unwrap();
    cp.kubectl().ok(&["apply", "-f", file.to_str().unwrap()]);
    let _controllers = cp.start_controllers("dashboard");
    let token = cp.mint_runner_token(&format!("default/{INSTALL}"));
    let runner = drift_runner(&cp, &cluster, &token, dir.path()).spawn();
    let _runner = Process::new(runner.expect("outpost runner starts"));
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let browser =
        Browser::start(Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots")).await;
    let b = &browser.client;
    let base = cp.url.clone();

    // The login page; a wrong token is refused with a message.
    b.goto(&format!("{base}/ui/login")).await.unwrap();
    let form = b.form(Locator::Css("form")).await.unwrap();
    form.set_by_name("token", "not-a-token").await.unwrap();
    form.submit().await.unwrap();
    assert!(browser.text("#login-error").await.contains("not valid"));
    browser.screenshot("login").await;

    // A viewer sees the Plan waiting but is refused when approving it.
    let sandbox_plan = awaiting(&plans, "sandbox").await;
    browser.log_in(&base, &cp.viewer_token).await;
    b.goto(&format!("{base}/ui/plans/default/{sandbox_plan}"))
        .await
        .unwrap();
    browser.find("#approve").await.click().await.unwrap();
    let message = refused(&browser).await;
    assert!(
        message.contains("403 Forbidden")
            && message.contains("User \"viewer\" cannot patch resource \"plans/approval\""),
        "{message}"
    );
    browser.screenshot("refused").await;
    let still = plans.get(&sandbox_plan).await.unwrap();
    assert_eq!(phase(&still), Some(PlanPhase::AwaitingApproval));
    assert!(still.status.unwrap().approval.is_none());
    browser.log_out().await;

    // An admin approves the sandbox's Plan, then the component's, by clicking; a form
    // with a forged CSRF token is refused first.
    browser.log_in(&base, &cp.admin_token).await;
    b.goto(&format!("{base}/ui/plans/default/{sandbox_plan}"))
        .await
        .unwrap();
    b.execute(
        "document.querySelectorAll('input[name=csrf]').forEach(i => i.value = 'forged');",
        vec![],
    )
    .await
    .unwrap();
    browser.find("#approve").await.click().await.unwrap();
    let forged = browser.text("#error").await;
    assert!(
        forged.contains("403") && forged.contains("CSRF"),
        "{forged}"
    );
    assert_eq!(
        phase(&plans.get(&sandbox_plan).await.unwrap()),
        Some(PlanPhase::AwaitingApproval)
    );
    // A malformed filter is a 400 that says why.
    b.goto(&format!("{base}/ui?label=tier%3D%3D%3D"))
        .await
        .unwrap();
    let bad = browser.text("#error").await;
    assert!(
        bad.contains("400") && bad.contains("invalid label selector"),
        "{bad}"
    );
    for entity in ["sandbox", "web"] {
        let name = awaiting(&plans, entity).await;
        b.goto(&format!("{base}/ui/plans/default/{name}"))
            .await
            .unwrap();
        if entity == "web" {
            browser.screenshot("plan-awaiting").await;
        }
        browser.find("#approve").await.click().await.unwrap();
        // Back on the Plan's page, approved by the admin and bound to its content hash.
        let approval = browser.text("#approval").await;
        assert!(approval.contains("by admin"), "{approval}");
        let plan = plans.get(&name).await.unwrap();
        let approved = plan.status.as_ref().unwrap().approval.clone().unwrap();
        assert_eq!(approved.by, "admin");
        assert_eq!(Some(approved.content_hash), plan.spec.content_hash);
        eventually(120, &format!("{name} to succeed"), async || {
            (phase(&plans.get(&name).await.ok()?) == Some(PlanPhase::Succeeded)).then_some(())
        })
        .await;
    }
    install_reaches(&cp, INSTALL, InstallPhase::Active, 60, String::new).await;
    drift_report_in_sync(&cp, "acme-web", 30).await;

    // The fleet matrix shows the cell in sync, and turns it drifted, live.
    b.goto(&format!("{base}/ui")).await.unwrap();
    let cell = "default/acme/web";
    eventually(30, "the web cell in sync", async || {
        (browser.cell_state(cell).await? == "in-sync").then_some(())
    })
    .await;
    eventually(10, "the page's event stream", async || {
        let live = b
            .find(Locator::Css("body"))
            .await
            .ok()?
            .attr("data-live")
            .await
            .ok()??;
        (live == "connected").then_some(())
    })
    .await;
    browser.screenshot("fleet").await;
    // A marker that a reload would wipe out.
    b.execute("window.notReloaded = true;", vec![])
        .await
        .unwrap();
    let edit = Instant::now();
    cluster.kubectl().edit(
        "s/replicas: 2$/replicas: 5/",
        &["deployment", "web", "-n", "shop"],
    );
    eventually(
        60,
        "the web cell to turn drifted on the open page",
        async || (browser.cell_state(cell).await? == "drifted").then_some(()),
    )
    .await;
    println!(
        "dashboard: kubectl edit → cell drifted in the browser in {} ms",
        edit.elapsed().as_millis()
    );
    let kept = b
        .execute("return window.notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, serde_json::json!(true), "the page reloaded");
    assert_eq!(
        browser.text(&format!("[data-cell='{cell}']")).await,
        "drifted · 1 field"
    );
    assert_eq!(browser.text("[data-count='drifted']").await, "1");
    browser.screenshot("fleet-drifted").await;

    // The cell opens the install page: the field diff side by side, the audit log verified.
    b.find(Locator::Css(&format!("[data-cell='{cell}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(20, "the install page", async || {
        let url = b.current_url().await.ok()?;
        (url.path() == "/ui/installs/default/acme").then_some(())
    })
    .await;
    let diff = browser.find("#drift-web table.diff tbody tr").await;
    let columns: Vec<String> = {
        let mut texts = Vec::new();
        for td in diff.find_all(Locator::Css("td")).await.unwrap() {
            texts.push(td.text().await.unwrap());
        }
        texts
    };
    assert_eq!(
        columns,
        ["Deployment/shop/web.spec.replicas", "changed", "2", "5"],
        "applied and live side by side"
    );
    let badge = browser.find("#audit-badge").await;
    assert_eq!(
        badge.attr("data-verified").await.unwrap().as_deref(),
        Some("true")
    );
    assert!(browser.text("#runner").await.contains("online"));
    // No customer stack here (no --stack): the page says the roles are not reported yet.
    assert!(browser.text("#roles").await.contains("not reported"));
    browser.screenshot("install").await;

    // The Plan page of the deploy: rendered state, the runner's diff, the log.
    let web_plan = plans
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.entity.name == "web")
        .unwrap();
    let web_plan = web_plan.metadata.name.unwrap();
    b.goto(&format!("{base}/ui/plans/default/{web_plan}"))
        .await
        .unwrap();
    assert!(browser.text("#desired-state").await.contains("replicas"));
    assert!(!browser.text("#runner-diff").await.is_empty());
    browser.screenshot("plan").await;

    // The policies page lists the drift policy's violation.
    b.goto(&format!("{base}/ui/policies")).await.unwrap();
    let policy = browser.text("#policy-replicas-pinned").await;
    assert!(policy.contains("replicas changed from 2 to 5"), "{policy}");
    browser.screenshot("policies").await;

    // An admin triggers the manual action from the install page, under a runtime role
    // override: the request goes on the Install and the controller's Plan opens.
    b.goto(&format!("{base}/ui/installs/default/{INSTALL}"))
        .await
        .unwrap();
    browser
        .find("#trigger-role")
        .await
        .send_keys("drift-maintenance")
        .await
        .unwrap();
    browser.screenshot("trigger").await;
    browser.find("#trigger-run").await.click().await.unwrap();
    let triggered = eventually(20, "the triggered Plan's page", async || {
        let url = b.current_url().await.ok()?;
        url.path()
            .strip_prefix("/ui/plans/default/acme-trigger-rotate-logs-")
            .map(|_| url.path().rsplit('/').next().unwrap().to_owned())
    })
    .await;
    let plan = plans.get(&triggered).await.unwrap();
    assert_eq!(plan.spec.entity.name, "rotate-logs");
    assert!(
        plan.spec
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("requested by admin")),
        "{:?}",
        plan.spec.reason
    );
    let role = eventually(20, "the gate's role for the triggered Plan", async || {
        plans.get(&triggered).await.ok()?.status?.role
    })
    .await;
    assert_eq!(role.name, "drift-maintenance");
    assert_eq!(role.level, outpost_api::RoleLevel::Override);
    assert!(browser.text("h1").await.contains(&triggered));
    browser.screenshot("triggered").await;

    // A viewer gets the API's 403 for the same form, and no Plan is made.
    browser.log_out().await;
    browser.log_in(&base, &cp.viewer_token).await;
    b.goto(&format!("{base}/ui/installs/default/{INSTALL}"))
        .await
        .unwrap();
    let before = plans
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    browser.find("#trigger-run").await.click().await.unwrap();
    let message = refused(&browser).await;
    assert!(
        message.contains("User \"viewer\" cannot patch resource \"installs\""),
        "{message}"
    );
    assert_eq!(
        plans
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        before
    );

    // A rollout of web over acme (ring 1) and globex (ring 2, no runner, prompt mode):
    // acme is done at once, globex's Plans wait for an approval.
    let rollouts: Api<Rollout> = Api::namespaced(client.clone(), "default");
    let rollout = dir.path().join("rollout.yaml");
    std::fs::write(&rollout, rollout_objects()).unwrap();
    cp.kubectl().ok(&["apply", "-f", rollout.to_str().unwrap()]);
    let status = eventually(60, "wave 2 of the rollout held", async || {
        // globex has no runner: the test posts its Plans' diffs as its runner would,
        // and the Plans wait for a person.
        ask_for_approval(&plans, "globex").await;
        let status = rollouts.get("web-rollout").await.ok()?.status?;
        let held = status.waves.get(1)?.progress.first()?.state == InstallProgressState::Held;
        held.then_some(status)
    })
    .await;
    assert_eq!(
        (status.current_wave, status.updated, status.total),
        (2, 1, 2)
    );
    b.goto(&format!("{base}/ui")).await.unwrap();
    b.find(Locator::LinkText("Rollouts"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = browser.find("tr[data-rollout='default/web-rollout']").await;
    assert_eq!(b.current_url().await.unwrap().path(), "/ui/rollouts");
    let text = row.text().await.unwrap();
    assert!(
        text.contains("drift-app")
            && text.contains("component web")
            && text.contains("Progressing"),
        "{text}"
    );
    let cell = |attr: &'static str| {
        let row = row.clone();
        async move {
            row.find(Locator::Css(&format!("[{attr}]")))
                .await
                .unwrap()
                .attr(attr)
                .await
                .unwrap()
        }
    };
    assert_eq!(cell("data-wave").await.as_deref(), Some("2/2"));
    assert_eq!(cell("data-updated").await.as_deref(), Some("1/2"));
    browser.screenshot("rollouts").await;
    row.find(Locator::Css("a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let state = |wave: u32, install: &'static str| {
        let browser = &browser;
        async move {
            let css = format!("#wave-{wave} tr[data-install='{install}'] [data-state]");
            browser.find(&css).await.attr("data-state").await.unwrap()
        }
    };
    assert_eq!(state(1, INSTALL).await.as_deref(), Some("done"));
    assert_eq!(state(2, "globex").await.as_deref(), Some("held"));
    let why = browser.text("#wave-2 tr[data-install='globex']").await;
    assert!(why.contains("awaits approval"), "{why}");
    assert!(browser.text("#moves").await.contains("component web"));
    browser.screenshot("rollout").await;

    b.clone().close().await.unwrap();
    println!("dashboard test took {} s", started.elapsed().as_secs());
}
