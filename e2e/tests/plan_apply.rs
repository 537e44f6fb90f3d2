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
//!
//! Plans are made `Ready` by the test (as the gate would pass them), so each test runs
//! the runner alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube_client::api::{Api, Patch, PatchParams};
use outpost_api::{ChangeAction, Install, Plan, PlanPhase};
use outpost_e2e::approve::approve;
use outpost_e2e::browser::Browser;
use outpost_e2e::job_plans::{
    INSTALL, install_with_token, pending_plan, ready_plan, runner_command,
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
        self.state.join(format!("work/component-{entity}/module"))
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
