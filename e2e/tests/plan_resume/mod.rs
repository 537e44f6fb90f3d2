//! Interrupted applies resume: the real runner (`outpost-runner`, real terraform) of
//! several installs, each killed (`kill -9`) in the middle of terraform applies — while a
//! resource's `local-exec` provisioner runs — and restarted at once, across 50 Plans.
//! The restarted runner re-plans against live state and finishes each apply within what
//! was cleared (approved by a person on the `prompt` installs, passed by the policies on
//! the `approve-all` ones), with nobody asked again:
//!
//! * every Plan ends `Succeeded`, reason `Resumed`; a `prompt` Plan keeps the diff its
//!   approval binds to, and no Plan is ever shown to a person again after its approval;
//! * the audit log the control plane holds has exactly one successful `apply` event per
//!   Plan, saying `resumed: true` and naming the cut apply's cleared diff;
//! * terraform's state of every component holds each resource once, untainted, chained
//!   to the ids of the resources that are really there.
//!
//! Each component's module makes three chained `terraform_data` resources whose
//! provisioner appends the resource's id to `plans/created.log` in the component's work dir and
//! sleeps: a line there says terraform is applying, and the test kills the runner a
//! moment later. Some Plans are killed a second time during their resumed apply.
//!
//! Also: an approved apply cut and a resource changed out of band before the restart
//! makes the runner ask again (outside the approval); Kubernetes applies cut by a kill
//! resume too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::{Plan, PlanPhase};
use outpost_runner::Stage;
use outpost_runner::journal::{JOURNAL_FILE, Record};
use outpost_testing::approve::approve;
use outpost_testing::job_plans::{
    audited_applies, create_app, create_install, install_runner_command, local_events, ready_plan,
};
use outpost_testing::phase;
use outpost_testing::{Backend, ControlPlane, Process, eventually, on_path};
use serde_json::{Value, json};

/// Installs, each with its own runner; odd ones ask a person (`prompt`).
const INSTALLS: usize = 10;
/// Plans per install: 50 in all.
const PLANS: usize = 5;
/// How long each resource's provisioner takes: the window the kills land in.
const PROVISIONER_SECONDS: f64 = 0.6;
/// The longest wait between a provisioner starting and the kill: well inside the window.
const MAX_KILL_DELAY_MS: u64 = 100;

/// Three chained resources; each provisioner records the resource's id in
/// `plans/created.log` of the work dir (terraform runs sandboxed in
/// `work/component-NAME/module`, and may write there and in `plans/` only; the module
/// directory is laid out anew by each Plan), then takes a while.
fn module(dir: &Path) -> PathBuf {
    let module = dir.join("module-src");
    std::fs::create_dir_all(&module).unwrap();
    let resource = |name: &str, input: &str| {
        format!(
            "resource \"terraform_data\" \"{name}\" {{\n  input = {input}\n  provisioner \"local-exec\" {{\n    command = \"echo {name} ${{self.id}} >> ../plans/created.log && sleep {PROVISIONER_SECONDS}\"\n  }}\n}}\n"
        )
    };
    let main = [
        resource("a", "var.note"),
        resource("b", "terraform_data.a.id"),
        resource("c", "terraform_data.b.id"),
    ]
    .concat();
    std::fs::write(
        module.join("main.tf"),
        format!("variable \"note\" {{\n  type = string\n}}\n\n{main}\noutput \"last\" {{\n  value = terraform_data.c.id\n}}\n"),
    )
    .unwrap();
    module
}

/// One install, its runner and its Plans.
struct Site {
    install: String,
    prompt: bool,
    token: String,
    state: PathBuf,
    log: PathBuf,
    /// Plan name → component name.
    plans: BTreeMap<String, String>,
    /// The stand-in cluster the runner applies Kubernetes components to.
    kubeconfig: Option<PathBuf>,
}

impl Site {
    fn start(&self, cp: &ControlPlane) -> Process {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command =
            install_runner_command(&self.install, &cp.url, &cp.tls.ca, &self.token, &self.state);
        command.arg("--terraform").arg(on_path("terraform"));
        // The terraform components' module is a local directory next to the state dir.
        let modules = self.state.with_file_name("module-src");
        if modules.is_dir() {
            command.arg("--module-root").arg(modules);
        }
        if let Some(kubeconfig) = &self.kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        command
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log);
        Process::new(command.spawn().expect("outpost-runner starts"))
    }

    fn created_log(&self, component: &str) -> PathBuf {
        outpost_e2e::work_dirs(&self.state).join(format!("component-{component}/plans/created.log"))
    }

    fn module_dir(&self, component: &str) -> PathBuf {
        outpost_e2e::work_dirs(&self.state).join(format!("component-{component}/module"))
    }

    /// The last journaled stage of Plan `name`.
    fn stage(&self, name: &str) -> Option<Stage> {
        let text = std::fs::read_to_string(self.state.join(JOURNAL_FILE)).unwrap_or_default();
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Record>(l).ok())
            .find(|r| r.plan == name)
            .map(|r| r.stage)
    }

    /// Whether the runner's own audit log has a completed `apply` of Plan `name`: the
    /// runner got past its apply and audited it, so a kill before it journaled the result
    /// leaves the journal at `applying` but nothing to resume (it reports what it audited,
    /// without `Resumed`).
    fn apply_audited(&self, name: &str) -> bool {
        std::fs::read_to_string(self.state.join(outpost_runner::audit::AUDIT_FILE))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<outpost_api::AuditEventSpec>(l).ok())
            .any(|e| {
                e.plan.as_deref() == Some(name)
                    && e.type_ == outpost_api::AuditEventType::Apply
                    && e.details
                        .as_ref()
                        .is_some_and(|d| d.get("failed").is_none())
            })
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

/// Creates Install `name` (`prompt` or `approve-all`) and mints its runner token.
async fn install(cp: &ControlPlane, name: &str, prompt: bool) -> String {
    create_install(cp, name, if prompt { "prompt" } else { "approve-all" }).await
}

/// Creates Plan `name` deploying `component` of `install` with the module (its variable
/// `note` is the component's name), `Ready` as the gate would pass it.
async fn ready(plans: &Api<Plan>, install: &str, name: &str, component: &str, source: &Path) {
    let desired = json!({"app": "shop", "type": "terraform_module",
        "terraform": {"source": source.display().to_string(), "variables": {"note": component}}});
    ready_plan(plans, install, name, component, desired, json!([])).await;
}

/// What happened to one install's Plans while its runner was killed.
#[derive(Default, Debug)]
struct Kills {
    /// Plan → kills that landed while its journal said `applying`.
    mid_apply: BTreeMap<String, usize>,
}

/// Runs `site`'s runner until all its Plans are final, killing it (`kill -9`) once in the
/// middle of every Plan's apply — a random 1 to 3 provisioners into it, plus up to
/// [`MAX_KILL_DELAY_MS`] — and a second time in the resumed apply of every fifth, and
/// restarting it at once each time. A `prompt` install's Plans are approved the first time
/// they ask; asking again fails the test (nobody is there after the kill).
async fn drive(cp: Arc<ControlPlane>, site: Arc<Site>, plans: Api<Plan>) -> Kills {
    let mut runner = site.start(&cp);
    let mut kills = Kills::default();
    let mut approved = std::collections::BTreeSet::new();
    // Component → (kills wanted, kills so far, created.log lines at the last kill, the
    // lines to wait for before the next).
    let mut plan_kills: BTreeMap<String, (usize, usize, usize, usize)> = site
        .plans
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let wanted = if i % 5 == 0 { 2 } else { 1 };
            (
                name.clone(),
                (wanted, 0, 0, 1 + rand::random::<u64>() as usize % 3),
            )
        })
        .collect();
    // Not a wait: each turn approves, kills and restarts as due, so the loop is the
    // test's driver, bounded by one timeout.
    let driven = tokio::time::timeout(Duration::from_secs(300), async {
    loop {
        let mine: Vec<Plan> = plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={}", site.install)))
            .await
            .unwrap()
            .items;
        if mine.len() == site.plans.len()
            && mine
                .iter()
                .all(|p| phase(p).is_some_and(PlanPhase::is_terminal))
        {
            break;
        }
        for plan in &mine {
            if phase(plan) != Some(PlanPhase::AwaitingApproval) {
                continue;
            }
            let name = plan.name_any();
            let reason = plan.status.as_ref().and_then(|s| s.reason.clone());
            assert!(
                site.prompt && reason.is_none() && !approved.contains(&name),
                "{name} asks a person again (reason {reason:?}): {:?}",
                plan.status
            );
            approve(&plans, plan).await.unwrap();
            approved.insert(name);
        }
        for (name, (wanted, done, at, step)) in &mut plan_kills {
            let created = lines(&site.created_log(&site.plans[name]));
            if *done >= *wanted || created < *at + *step {
                continue;
            }
            tokio::time::sleep(Duration::from_millis(
                rand::random::<u64>() % MAX_KILL_DELAY_MS,
            ))
            .await;
            runner.kill();
            let stage = site.stage(name);
            assert!(
                matches!(stage, Some(Stage::Applying { .. })),
                "{name}: killed {created} provisioners into its apply, the journal says {stage:?}"
            );
            *kills.mid_apply.entry(name.clone()).or_default() += 1;
            *done += 1;
            *at = created;
            *step = 1;
            runner = site.start(&cp);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    })
    .await;
    assert!(driven.is_ok(), "{}: plans not final in time", site.install);
    // Stay up until every audit event is shipped.
    let what = format!("{}'s audit events to be shipped", site.install);
    let state = site.state.clone();
    eventually(60, &what, async move || {
        let shipped = std::fs::read_to_string(state.join("audit.shipped")).unwrap_or_default();
        (shipped.trim() == local_events(&state).to_string()).then_some(())
    })
    .await;
    runner.kill();
    kills
}

/// terraform's state of a component: resource name → (instances, the first's id, its
/// input, whether it is tainted).
fn resources(module_dir: &Path) -> BTreeMap<String, (usize, String, String, bool)> {
    let text = std::fs::read_to_string(module_dir.join("terraform.tfstate")).unwrap();
    let state: Value = serde_json::from_str(&text).unwrap();
    let mut found = BTreeMap::new();
    for resource in state["resources"].as_array().unwrap() {
        let instances = resource["instances"].as_array().unwrap();
        let first = &instances[0];
        let input = &first["attributes"]["input"];
        found.insert(
            resource["name"].as_str().unwrap().to_owned(),
            (
                instances.len(),
                first["attributes"]["id"].as_str().unwrap().to_owned(),
                input
                    .get("value")
                    .unwrap_or(input)
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                first["status"] == "tainted",
            ),
        );
    }
    found
}

/// ConfigMaps per Kubernetes component: enough server-side applies that a kill soon after
/// `applying` is journaled lands among them.
const CONFIG_MAPS: usize = 60;

mod kubernetes;
mod terraform;
