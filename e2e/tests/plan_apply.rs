//! The Plan lifecycle with the real runner (`outpost runner`, real terraform, a stand-in
//! cluster): plan first, show the real diff, a person approves that diff, the runner
//! applies exactly it.
//!
//! * terraform on a `prompt` install: the Plan stops at `AwaitingApproval` with the diff
//!   (`1 to add, 0 to change, 0 to destroy`, the resource's address) and nothing in the
//!   state; approving applies the saved plan. A deploy that changes nothing ends
//!   `Succeeded` with reason `NoChanges` without asking. A change of the state between
//!   planning and approval (an out-of-band `terraform apply`) makes the saved plan stale:
//!   the runner plans again and asks again (`Replanned`, a new diff hash) instead of
//!   applying; the second approval applies.
//! * Kubernetes: the diff shows `Deployment/shop/web spec.replicas 2 → 3`; an
//!   out-of-band edit of the Deployment before the approval makes the runner ask again.
//! * An `approve`-enforced vendor policy (on the diff) or gate verdict makes a Plan of an
//!   `approve-all` install wait for a person.
//! * The customer's hold on vendor code ([`outpost_e2e::providers`] has providers that
//!   leave a marker when they run): a local policy on the `static` input denies a module
//!   using a provider not on the customer's list, and a provider not on the runner's
//!   `--terraform-providers` is refused: both Plans end `Failed` with the reason before
//!   `terraform init` (no `.terraform`, no marker); an allowed provider plans and applies
//!   in the sandbox; without the policy the same module's provider does run. A policy
//!   added after a deploy stops its drift checks' refresh-only plans before the provider
//!   runs (audited `verdict` events, no new report).
//!
//! Plans are made `Ready` by the test (as the gate would pass them), so each test runs
//! the runner alone.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{ChangeAction, DriftReport, Install, Plan, PlanPhase};
use outpost_e2e::approve::approve;
use outpost_e2e::browser::Browser;
use outpost_e2e::job_plans::{
    INSTALL, install_with_token, pending_plan, ready_plan, runner_command,
};
use outpost_e2e::providers::{
    EVIL_MODULE, aws_module, aws_plugins, marker_lines, marker_mirror, provider_policy,
};
use outpost_e2e::{Backend, ControlPlane, Process, eventually, on_path};
use serde_json::{Value, json};

/// The control plane, the install's real runner, and where its state is.
struct Runner {
    cp: ControlPlane,
    cluster: Option<ControlPlane>,
    plans: Api<Plan>,
    state: PathBuf,
    _runner: Process,
    dir: tempfile::TempDir,
}

async fn start(with_cluster: bool) -> Runner {
    start_with(with_cluster, |_| Vec::new()).await
}

/// Starts the runner with more arguments, made from the test's temporary directory.
async fn start_with(with_cluster: bool, args: impl FnOnce(&Path) -> Vec<OsString>) -> Runner {
    let cp = ControlPlane::start(Backend::Embedded).await;
    let cluster = match with_cluster {
        true => Some(ControlPlane::start_standin_cluster().await),
        false => None,
    };
    let token = install_with_token(&cp).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut command = runner_command(&cp.url, &cp.tls.ca, &token, &state);
    command
        .args(args(dir.path()))
        .arg("--terraform")
        .arg(on_path("terraform"))
        // The module directory `module` lays out; the runner accepts no other.
        .arg("--module-root")
        .arg(dir.path().join("module-src"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(cluster) = &cluster {
        command
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig(&cluster.admin_token));
    }
    let runner = Process::new(command.spawn().expect("outpost runner starts"));
    Runner {
        plans: Api::namespaced(cp.client().await, "default"),
        cp,
        cluster,
        state,
        _runner: runner,
        dir,
    }
}

impl Runner {
    async fn approval_mode(&self, mode: &str) {
        Api::<Install>::namespaced(self.cp.client().await, "default")
            .patch(
                INSTALL,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"approvalMode": mode}})),
            )
            .await
            .unwrap();
    }

    /// Creates Plan `name` deploying component `entity` with `desired`, and passes it
    /// as the gate would: `Ready`, its role, and `verdicts`.
    async fn ready(&self, name: &str, entity: &str, desired: Value, verdicts: Value) {
        ready_plan(&self.plans, INSTALL, name, entity, desired, verdicts).await;
    }

    /// Creates Plan `name` for component `entity` and leaves it `Pending` (no gate runs
    /// in these tests, so the runner never sees it).
    async fn pending(&self, name: &str, entity: &str, desired: Value) {
        pending_plan(&self.plans, INSTALL, name, entity, desired).await;
    }

    /// Plan `name` once it is in `phase` and `check` holds (120 s at most); a Plan that
    /// ends elsewhere fails the test at once.
    async fn reaches(&self, name: &str, phase: PlanPhase, check: impl Fn(&Plan) -> bool) -> Plan {
        eventually(120, &format!("plan {name} to be {phase:?}"), async || {
            let plan = self.plans.get(name).await.ok()?;
            let now = plan.status.as_ref().and_then(|s| s.phase);
            if now != Some(phase) && now.is_some_and(PlanPhase::is_terminal) {
                panic!("plan {name} ended {now:?}: {:?}", plan.status);
            }
            (now == Some(phase) && check(&plan)).then_some(plan)
        })
        .await
    }

    fn module_dir(&self, entity: &str) -> PathBuf {
        outpost_e2e::work_dirs(&self.state).join(format!("component-{entity}/module"))
    }
}

fn diff(plan: &Plan) -> outpost_api::PlanDiff {
    plan.status
        .as_ref()
        .and_then(|s| s.diff.clone())
        .expect("the Plan shows its diff")
}

fn reason(plan: &Plan) -> Option<String> {
    plan.status.as_ref().and_then(|s| s.reason.clone())
}

/// A module with one `terraform_data` resource whose input is variable `note`.
fn module(dir: &Path) -> PathBuf {
    let module = dir.join("module-src");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("main.tf"),
        "variable \"note\" {\n  default = \"one\"\n}\n\nresource \"terraform_data\" \"thing\" {\n  input = var.note\n}\n",
    )
    .unwrap();
    module
}

fn terraform_component(module: &Path, note: Option<&str>) -> Value {
    let mut terraform = json!({"source": module.display().to_string()});
    if let Some(note) = note {
        terraform["variables"] = json!({"note": note});
    }
    json!({"app": "shop", "type": "terraform_module", "terraform": terraform})
}

/// The `input` of `terraform_data.thing` in the state, if it exists.
fn thing_input(module_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(module_dir.join("terraform.tfstate")).ok()?;
    let state: Value = serde_json::from_str(&text).ok()?;
    let resource = state["resources"]
        .as_array()?
        .iter()
        .find(|r| r["type"] == "terraform_data" && r["name"] == "thing")?;
    // A dynamic attribute: `{"value": ..., "type": ...}` in the state.
    let input = &resource["instances"][0]["attributes"]["input"];
    input
        .get("value")
        .unwrap_or(input)
        .as_str()
        .map(str::to_owned)
}

fn state_serial(module_dir: &Path) -> u64 {
    let text = std::fs::read_to_string(module_dir.join("terraform.tfstate")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["serial"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_plans_first_applies_the_approved_plan_and_asks_again_when_state_moved() {
    let runner = start(false).await;
    runner.approval_mode("prompt").await;
    let source = module(runner.dir.path());
    let work = runner.module_dir("thing");

    // Planned, shown, waiting: nothing applied yet.
    runner
        .ready(
            "thing-1",
            "thing",
            terraform_component(&source, None),
            json!([]),
        )
        .await;
    let waiting = runner
        .reaches("thing-1", PlanPhase::AwaitingApproval, |_| true)
        .await;
    let shown = diff(&waiting);
    assert_eq!(shown.summary, "1 to add, 0 to change, 0 to destroy");
    assert_eq!(shown.resources.len(), 1, "{shown:?}");
    assert_eq!(shown.resources[0].address, "terraform_data.thing");
    assert_eq!(shown.resources[0].action, ChangeAction::Create);
    let input = shown.resources[0].fields.iter().find(|f| f.path == "input");
    assert_eq!(input.and_then(|f| f.after.as_deref()), Some("\"one\""));
    assert!(outpost_api::is_content_hash(&shown.hash), "{}", shown.hash);
    assert_eq!(
        thing_input(&work),
        None,
        "nothing is applied before approval"
    );

    // Approved: the saved plan is applied, the diff stays the approved one.
    approve(&runner.plans, &waiting).await.unwrap();
    let done = runner
        .reaches("thing-1", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(diff(&done).hash, shown.hash);
    assert_eq!(reason(&done), None);
    assert_eq!(thing_input(&work).as_deref(), Some("one"));

    // (c) The same deploy again changes nothing: Succeeded, NoChanges, not asked, not
    // applied (the state is not written).
    let serial = state_serial(&work);
    runner
        .ready(
            "thing-2",
            "thing",
            terraform_component(&source, None),
            json!([]),
        )
        .await;
    let noop = runner
        .reaches("thing-2", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(reason(&noop).as_deref(), Some("NoChanges"));
    assert_eq!(diff(&noop).summary, "0 to add, 0 to change, 0 to destroy");
    assert!(noop.status.as_ref().unwrap().approval.is_none());
    assert_eq!(state_serial(&work), serial, "a no-op diff applies nothing");

    // A change, approved only after the state moved out of band: terraform refuses the
    // stale saved plan, and the runner plans again and asks again.
    runner
        .ready(
            "thing-3",
            "thing",
            terraform_component(&source, Some("two")),
            json!([]),
        )
        .await;
    let waiting = runner
        .reaches("thing-3", PlanPhase::AwaitingApproval, |_| true)
        .await;
    let first = diff(&waiting);
    assert_eq!(first.resources[0].address, "terraform_data.thing");
    let input = first.resources[0].fields.iter().find(|f| f.path == "input");
    assert_eq!(
        input.map(|f| (f.before.as_deref(), f.after.as_deref())),
        Some((Some("\"one\""), Some("\"two\""))),
        "{first:?}"
    );
    let moved = Command::new(on_path("terraform"))
        .current_dir(&work)
        .args([
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-var",
            "note=three",
        ])
        .env("TF_IN_AUTOMATION", "1")
        .output()
        .unwrap();
    assert!(moved.status.success(), "{moved:?}");
    assert_eq!(thing_input(&work).as_deref(), Some("three"));
    approve(&runner.plans, &waiting).await.unwrap();
    let asked = runner
        .reaches("thing-3", PlanPhase::AwaitingApproval, |p| {
            reason(p).as_deref() == Some("Replanned")
        })
        .await;
    let second = diff(&asked);
    assert_ne!(second.hash, first.hash, "a new diff, bound to a new hash");
    let input = second.resources[0]
        .fields
        .iter()
        .find(|f| f.path == "input");
    assert_eq!(
        input.map(|f| (f.before.as_deref(), f.after.as_deref())),
        Some((Some("\"three\""), Some("\"two\""))),
        "{second:?}"
    );
    assert_eq!(
        thing_input(&work).as_deref(),
        Some("three"),
        "the stale plan was not applied"
    );
    approve(&runner.plans, &asked).await.unwrap();
    let done = runner
        .reaches("thing-3", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(diff(&done).hash, second.hash);
    assert_eq!(thing_input(&work).as_deref(), Some("two"));
}

fn deployment(replicas: u32) -> Value {
    let content = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: registry.example/web:1\n"
    );
    json!({"app": "shop", "type": "kubernetes_manifest",
           "manifest": {"namespace": "shop", "content": content}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_diffs_show_changed_fields_and_moved_objects_are_planned_again() {
    let runner = start(true).await;
    let cluster = runner.cluster.as_ref().unwrap().kubectl();
    let replicas = || {
        cluster.ok(&[
            "get",
            "deployment",
            "web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
    };

    // approve-all: planned and applied in one claim, the diff reported with the result.
    runner.ready("web-1", "web", deployment(2), json!([])).await;
    let created = runner
        .reaches("web-1", PlanPhase::Succeeded, |_| true)
        .await;
    let addresses: Vec<(String, ChangeAction)> = diff(&created)
        .resources
        .iter()
        .map(|r| (r.address.clone(), r.action))
        .collect();
    assert!(
        addresses.contains(&("Deployment/shop/web".into(), ChangeAction::Create)),
        "{addresses:?}"
    );
    assert_eq!(replicas(), "2");

    // prompt: the diff names the field, before and after.
    runner.approval_mode("prompt").await;
    runner.ready("web-2", "web", deployment(3), json!([])).await;
    let waiting = runner
        .reaches("web-2", PlanPhase::AwaitingApproval, |_| true)
        .await;
    let first = diff(&waiting);
    assert_eq!(
        first.summary, "0 to add, 1 to change, 0 to destroy",
        "{first:?}"
    );
    let web = &first.resources[0];
    assert_eq!(
        (web.address.as_str(), web.action),
        ("Deployment/shop/web", ChangeAction::Update)
    );
    let fields: Vec<(&str, Option<&str>, Option<&str>)> = web
        .fields
        .iter()
        .map(|f| (f.path.as_str(), f.before.as_deref(), f.after.as_deref()))
        .collect();
    assert_eq!(fields, [("spec.replicas", Some("2"), Some("3"))]);
    assert_eq!(replicas(), "2");

    // The dashboard's approval page shows that field-level change above the buttons,
    // and the install page lists the waiting Plan before a newer one.
    runner.pending("zz-later", "web", deployment(4)).await;
    let browser = Browser::start(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-apply")).await;
    let base = runner.cp.url.clone();
    browser.log_in(&base, &runner.cp.approver_token).await;
    assert_eq!(browser.text("#who").await, "approver · approver");
    browser
        .client
        .goto(&format!("{base}/ui/installs/default/{INSTALL}"))
        .await
        .unwrap();
    let rows = browser.text("#plans tbody").await;
    let (waits, later) = (rows.find("web-2"), rows.find("zz-later"));
    assert!(
        waits.is_some() && later.is_some() && waits < later,
        "the Plan awaiting approval is listed first: {rows}"
    );
    browser
        .client
        .goto(&format!("{base}/ui/plans/default/web-2"))
        .await
        .unwrap();
    let shown = browser.text("#diff-text").await;
    assert!(
        shown.contains("~ Deployment/shop/web") && shown.contains("spec.replicas: 2 → 3"),
        "{shown}"
    );
    assert!(
        shown.contains("Plan: 0 to add, 1 to change, 0 to destroy."),
        "{shown}"
    );
    assert_eq!(browser.text("#diff-hash").await, first.hash);
    let above = browser
        .client
        .execute(
            "return !!(document.querySelector('#diff-text').compareDocumentPosition(\
             document.querySelector('#approve')) & Node.DOCUMENT_POSITION_FOLLOWING);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        above,
        json!(true),
        "the diff is shown above the Approve button"
    );
    // The runner's audit of the diff says it asked a person, and for which diff.
    let page = browser.text("body").await;
    assert!(
        page.contains(&format!(
            "asked for a person's approval of the diff {}",
            first.hash
        )),
        "{page}"
    );
    browser.screenshot("kubernetes-approval").await;

    // Edited out of band before the approval: the runner asks again.
    cluster.ok(&["label", "deployment", "web", "-n", "shop", "edited=by-hand"]);
    approve(&runner.plans, &waiting).await.unwrap();
    let asked = runner
        .reaches("web-2", PlanPhase::AwaitingApproval, |p| {
            reason(p).as_deref() == Some("Replanned")
        })
        .await;
    assert_ne!(diff(&asked).hash, first.hash);
    assert_eq!(replicas(), "2", "nothing applied on a moved object");
    // The approver approves the new diff on the dashboard, by clicking.
    browser
        .client
        .goto(&format!("{base}/ui/plans/default/web-2"))
        .await
        .unwrap();
    assert_eq!(browser.text("#diff-hash").await, diff(&asked).hash);
    browser.find("#approve").await.click().await.unwrap();
    let approval = browser.text("#approval").await;
    assert!(approval.contains("by approver"), "{approval}");
    let done = runner
        .reaches("web-2", PlanPhase::Succeeded, |_| true)
        .await;
    let approved = done.status.unwrap().approval.unwrap();
    assert_eq!(
        (approved.by.as_str(), approved.diff_hash.as_deref()),
        ("approver", Some(diff(&asked).hash.as_str()))
    );
    assert_eq!(replicas(), "3");
    browser.client.clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_policies_make_an_approve_all_install_wait_for_a_person() {
    let runner = start(false).await;
    let source = module(runner.dir.path());
    // A vendor policy that asks a person for every terraform change, on the real diff.
    let policy = json!({"apiVersion": "outpost.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "person-approves-terraform"},
        "spec": {"app": "shop", "inputs": ["terraform"], "enforcement": "approve",
                 "module": "package outpost.person_approves_terraform\n\ndeny contains \"a person approves every terraform change\" if {\n  count(input.resource_changes) > 0\n}\n"}});
    let reply = runner
        .cp
        .raw(
            Some(&runner.cp.admin_token),
            "POST",
            "/apis/outpost.dev/v1alpha1/namespaces/default/policies",
            &[("content-type", "application/json")],
            policy.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    runner
        .ready(
            "thing-1",
            "thing",
            terraform_component(&source, None),
            json!([]),
        )
        .await;
    let waiting = runner
        .reaches("thing-1", PlanPhase::AwaitingApproval, |_| true)
        .await;
    let verdict = diff(&waiting)
        .verdicts
        .into_iter()
        .find(|v| v.policy == "person-approves-terraform")
        .expect("the policy's verdict is on the diff");
    assert!(
        verdict.approval_required && !verdict.denied && !verdict.local,
        "{verdict:?}"
    );
    assert_eq!(thing_input(&runner.module_dir("thing")), None);
    approve(&runner.plans, &waiting).await.unwrap();
    runner
        .reaches("thing-1", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(
        thing_input(&runner.module_dir("thing")).as_deref(),
        Some("one")
    );

    // The gate's verdict asks too (an approve policy on the rendered state), with no
    // policy on the diff.
    let reply = runner
        .cp
        .raw(
            Some(&runner.cp.admin_token),
            "DELETE",
            "/apis/outpost.dev/v1alpha1/namespaces/default/policies/person-approves-terraform",
            &[],
            String::new(),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let gate_verdict = json!([{"policy": "person-approves-deploys", "enforcement": "approve",
                                "denied": false, "approvalRequired": true,
                                "messages": ["a person approves every deploy"]}]);
    runner
        .ready(
            "other-1",
            "other",
            terraform_component(&source, None),
            gate_verdict,
        )
        .await;
    runner
        .reaches("other-1", PlanPhase::AwaitingApproval, |_| true)
        .await;
    assert_eq!(thing_input(&runner.module_dir("other")), None);
}

/// A runner whose allow-list has `acme/evil` and `acme/marked` (from the test mirror and
/// the machine's aws mirror) and whose local policies are in `DIR/policies`, holding
/// `customer-providers.rego`, allowing `acme/marked` only.
async fn start_with_providers() -> (Runner, PathBuf) {
    let runner = start_with(false, |dir| {
        let policies = dir.join("policies");
        std::fs::create_dir_all(&policies).unwrap();
        let policy = provider_policy("customer_providers", &["registry.terraform.io/acme/marked"]);
        std::fs::write(policies.join("customer-providers.rego"), policy).unwrap();
        vec![
            "--terraform-providers".into(),
            "acme/evil,acme/marked".into(),
            "--terraform-provider-mirror".into(),
            marker_mirror(dir).into(),
            "--terraform-provider-mirror".into(),
            aws_plugins().into(),
            "--policies".into(),
            policies.into(),
        ]
    })
    .await;
    let policies = runner.dir.path().join("policies");
    (runner, policies)
}

fn inline_module(main_tf: &str, drift_seconds: Option<u32>) -> Value {
    let mut desired = json!({"app": "shop", "type": "terraform_module",
                             "terraform": {"files": {"main.tf": main_tf}}});
    if let Some(seconds) = drift_seconds {
        desired["drift"] = json!({"intervalSeconds": seconds});
    }
    desired
}

fn message(plan: &Plan) -> String {
    plan.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_policies_and_the_provider_allow_list_stop_a_plan_before_terraform_init() {
    let (runner, policies) = start_with_providers().await;

    // Denied by the customer's local policy on the static configuration: Failed with
    // the policy's message, and neither `terraform init` nor the provider ran.
    runner
        .ready(
            "evil-1",
            "evil",
            inline_module(EVIL_MODULE, None),
            json!([]),
        )
        .await;
    let denied = runner.reaches("evil-1", PlanPhase::Failed, |_| true).await;
    assert!(
        message(&denied).contains(
            "denied by local policy local/customer-providers: provider \
             registry.terraform.io/acme/evil is not on the customer's list"
        ),
        "{:?}",
        denied.status
    );
    let evil = runner.module_dir("evil");
    assert!(!evil.join(".terraform").exists(), "terraform init ran");
    assert_eq!(marker_lines(&evil), 0, "the provider's code ran");

    // A provider the runner's allow-list does not name: refused the same way, by name.
    let unlisted = EVIL_MODULE.replace("acme/evil", "acme/unlisted");
    runner
        .ready(
            "other-1",
            "other",
            inline_module(&unlisted, None),
            json!([]),
        )
        .await;
    let refused = runner.reaches("other-1", PlanPhase::Failed, |_| true).await;
    assert!(
        message(&refused).contains(
            "needs provider registry.terraform.io/acme/unlisted which the runner's allow-list"
        ),
        "{:?}",
        refused.status
    );
    assert!(!runner.module_dir("other").join(".terraform").exists());

    // An allowed provider the policy accepts runs end to end in the sandbox.
    runner
        .ready(
            "marked-1",
            "marked",
            inline_module(&aws_module("acme/marked"), None),
            json!([]),
        )
        .await;
    let done = runner
        .reaches("marked-1", PlanPhase::Succeeded, |_| true)
        .await;
    let outputs = &done.status.as_ref().unwrap().outputs;
    assert_eq!(outputs.get("partition"), Some(&json!("aws")), "{outputs:?}");
    assert!(marker_lines(&runner.module_dir("marked")) > 0);

    // The control: without the policy, the same module's provider does run (and fails
    // the Plan, being no provider), writing the marker the first Plan did not.
    std::fs::remove_file(policies.join("customer-providers.rego")).unwrap();
    runner
        .ready(
            "evil-2",
            "evil",
            inline_module(EVIL_MODULE, None),
            json!([]),
        )
        .await;
    let ran = runner.reaches("evil-2", PlanPhase::Failed, |_| true).await;
    assert!(message(&ran).contains("terraform plan"), "{:?}", ran.status);
    assert!(marker_lines(&evil) > 0, "the provider ran once allowed");
}

/// The drift checks of `entity` whose static configuration a local policy denied, from
/// the runner's local audit log.
fn denied_drift_checks(state: &Path, entity: &str) -> usize {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| {
            e["type"] == "verdict"
                && e["entity"]["name"] == entity
                && e["details"]["drift"] == true
                && e["details"]["input"] == "static"
                && e["details"]["verdicts"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v["denied"] == true))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_policy_stops_a_drift_refresh_before_its_provider_runs() {
    let (runner, policies) = start_with_providers().await;
    let reports = Api::<DriftReport>::namespaced(runner.cp.client().await, "default");
    let module = runner.module_dir("marked");
    runner
        .ready(
            "marked-1",
            "marked",
            inline_module(&aws_module("acme/marked"), Some(1)),
            json!([]),
        )
        .await;
    runner
        .reaches("marked-1", PlanPhase::Succeeded, |_| true)
        .await;

    // Drift checks run the provider (a refresh-only plan) and report.
    let deployed = marker_lines(&module);
    eventually(
        120,
        "a drift check to run the provider and report",
        async || {
            let report = reports.get_opt("acme-marked").await.ok()??;
            (marker_lines(&module) > deployed).then_some(report)
        },
    )
    .await;

    // The customer freezes the module: the next checks are denied before they run.
    std::fs::write(
        policies.join("frozen.rego"),
        "# outpost:inputs static\npackage outpost.frozen\n\ndeny contains \"frozen by the customer\" if {\n  some p in input.providers\n  p.source == \"registry.terraform.io/acme/marked\"\n}\n",
    )
    .unwrap();
    let denied_checks = async |at_least: usize| {
        eventually(60, &format!("{at_least} denied drift checks"), async || {
            (denied_drift_checks(&runner.state, "marked") >= at_least).then_some(())
        })
        .await;
    };
    // Two more after the first, so a report of a check before the policy is delivered.
    denied_checks(3).await;
    let ran = marker_lines(&module);
    let observed = reports.get("acme-marked").await.unwrap().spec.observed_at;
    denied_checks(5).await;
    assert_eq!(
        marker_lines(&module),
        ran,
        "the provider ran during a denied check"
    );
    assert_eq!(
        reports.get("acme-marked").await.unwrap().spec.observed_at,
        observed,
        "a denied check reported an observation"
    );
}
