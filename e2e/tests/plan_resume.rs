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
use outpost_e2e::approve::approve;
use outpost_e2e::job_plans::{
    audited_applies, create_app, create_install, install_runner_command, local_events, ready_plan,
};
use outpost_e2e::{Backend, ControlPlane, Process, eventually, on_path};
use outpost_runner::Stage;
use outpost_runner::journal::{JOURNAL_FILE, Record};
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
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
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
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        assert!(
            Instant::now() < deadline,
            "{}: plans not final in time",
            site.install
        );
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
    // Stay up until every audit event is shipped.
    let shipped = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(site.state.join("audit.shipped"))
        .unwrap_or_default()
        .trim()
        != local_events(&site.state).to_string()
    {
        assert!(
            Instant::now() < shipped,
            "{}: audit events not shipped",
            site.install
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_killed_mid_apply_resume_every_plan_to_succeeded_applied_once() {
    let started = Instant::now();
    let cp = Arc::new(ControlPlane::start(Backend::Embedded).await);
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dir = tempfile::tempdir().unwrap();
    let source = module(dir.path());
    let mut sites = Vec::new();
    for i in 0..INSTALLS {
        let name = format!("r{i}");
        let prompt = i % 2 == 1;
        if i == 0 {
            create_app(&cp).await;
        }
        let token = install(&cp, &name, prompt).await;
        let site = Site {
            state: dir.path().join(format!("{name}-state")),
            log: dir.path().join(format!("{name}.log")),
            plans: (0..PLANS)
                .map(|p| (format!("{name}-deploy-c{p}"), format!("c{p}")))
                .collect(),
            install: name,
            prompt,
            token,
            kubeconfig: None,
        };
        for (plan, component) in &site.plans {
            ready(&plans, &site.install, plan, component, &source).await;
        }
        sites.push(Arc::new(site));
    }
    let drivers: Vec<_> = sites
        .iter()
        .map(|site| tokio::spawn(drive(cp.clone(), site.clone(), plans.clone())))
        .collect();
    let mut kills = Vec::new();
    for (site, driver) in sites.iter().zip(drivers) {
        match driver.await {
            Ok(k) => kills.push(k),
            Err(e) => panic!(
                "{}: {e}\nrunner log:\n{}",
                site.install,
                std::fs::read_to_string(&site.log).unwrap_or_default()
            ),
        }
    }

    let applies = audited_applies(&cp).await;
    let (mut total_kills, mut redone) = (0, 0);
    for (site, kills) in sites.iter().zip(&kills) {
        for (name, component) in &site.plans {
            let plan = plans.get(name).await.unwrap();
            let status = plan.status.clone().unwrap();
            assert_eq!(
                status.phase,
                Some(PlanPhase::Succeeded),
                "{name}: {status:?}"
            );
            assert_eq!(
                status.reason.as_deref(),
                Some("Resumed"),
                "{name}: {status:?}"
            );
            let killed = kills.mid_apply.get(name).copied().unwrap_or(0);
            assert!(killed >= 1, "{name} was never killed mid-apply");
            total_kills += killed;
            if site.prompt {
                let approval = status.approval.as_ref().expect("approved once");
                let shown = status.diff.as_ref().expect("the approved diff");
                assert_eq!(
                    approval.diff_hash.as_deref(),
                    Some(shown.hash.as_str()),
                    "{name}"
                );
            }
            // One apply in the audit log, the resumed one, naming what was cleared.
            let events = applies.get(name).cloned().unwrap_or_default();
            assert_eq!(
                events.len(),
                1,
                "{name}: one apply in the audit log: {events:?}"
            );
            assert_eq!(events[0]["resumed"], true, "{name}: {}", events[0]);
            assert_eq!(events[0]["approved"], site.prompt, "{name}: {}", events[0]);
            assert_eq!(
                events[0]["cut"]["summary"], "3 to add, 0 to change, 0 to destroy",
                "{name}: {}",
                events[0]
            );
            if site.prompt {
                let shown = status.diff.as_ref().unwrap();
                assert_eq!(events[0]["cut"]["diffHash"], shown.hash.as_str(), "{name}");
            }
            // Each resource once in terraform's state, untainted, chained to the others.
            let state = resources(&site.module_dir(component));
            assert_eq!(
                state.keys().collect::<Vec<_>>(),
                ["a", "b", "c"],
                "{name}: {state:?}"
            );
            for (resource, (instances, _, _, tainted)) in &state {
                assert_eq!(*instances, 1, "{name}: {resource} {state:?}");
                assert!(!tainted, "{name}: {resource} is tainted");
            }
            assert_eq!(state["a"].2, *component, "{name}: {state:?}");
            assert_eq!(state["b"].2, state["a"].1, "{name}: b takes a's id");
            assert_eq!(state["c"].2, state["b"].1, "{name}: c takes b's id");
            assert_eq!(
                status.outputs.get("last"),
                Some(&json!(state["c"].1)),
                "{name}: the outputs are the live ones"
            );
            redone += lines(&site.created_log(component)) - 3;
        }
    }
    println!(
        "{} plans, {total_kills} kills mid-apply, {redone} resource creations redone \
         (cut before terraform recorded them), {:.0?}",
        INSTALLS * PLANS,
        started.elapsed()
    );
}

/// A `prompt` install's approved apply, cut after its first resource was made; while the
/// runner is down that resource is changed out of band, so the restarted runner's re-plan
/// updates it where the approval only created it: outside the approval. The runner asks
/// again (`AwaitingApproval`, reason `Resumed`, a new diff, the old approval dropped,
/// nothing applied and no `apply` event), and applies once a person approves that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_apply_beyond_the_approval_asks_again() {
    let cp = Arc::new(ControlPlane::start(Backend::Embedded).await);
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dir = tempfile::tempdir().unwrap();
    let source = module(dir.path());
    let site = Site {
        install: "r0".into(),
        prompt: true,
        token: {
            create_app(&cp).await;
            install(&cp, "r0", true).await
        },
        state: dir.path().join("state"),
        log: dir.path().join("runner.log"),
        plans: BTreeMap::from([("r0-deploy-c0".to_owned(), "c0".to_owned())]),
        kubeconfig: None,
    };
    let name = "r0-deploy-c0";
    ready(&plans, &site.install, name, "c0", &source).await;
    let mut runner = site.start(&cp);
    let reaches = async |check: &dyn Fn(&Plan) -> bool| {
        eventually(120, &format!("{name} to move on"), async || {
            let plan = plans.get(name).await.ok()?;
            check(&plan).then_some(plan)
        })
        .await
    };
    let waiting = reaches(&|p| phase(p) == Some(PlanPhase::AwaitingApproval)).await;
    let approved_diff = waiting.status.clone().unwrap().diff.unwrap();
    approve(&plans, &waiting).await.unwrap();

    // b's provisioner runs: a is in terraform's state. Kill the runner there.
    let created = site.created_log("c0");
    eventually(60, "the apply to reach b", async || {
        (lines(&created) >= 2).then_some(())
    })
    .await;
    runner.kill();
    assert!(matches!(site.stage(name), Some(Stage::Applying { .. })));
    // Out of band, a's input changes (terraform waits for the killed runner's terraform
    // to let go of the state lock).
    let out_of_band = std::process::Command::new(on_path("terraform"))
        .current_dir(site.module_dir("c0"))
        .args([
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-lock-timeout=60s",
            "-target=terraform_data.a",
            "-var",
            "note=moved",
        ])
        .output()
        .unwrap();
    assert!(
        out_of_band.status.success(),
        "{}",
        String::from_utf8_lossy(&out_of_band.stdout)
    );

    let _runner = site.start(&cp);
    let asked = reaches(&|p| {
        p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Resumed")
            && phase(p) == Some(PlanPhase::AwaitingApproval)
    })
    .await;
    let status = asked.status.clone().unwrap();
    assert!(status.approval.is_none(), "the old approval is dropped");
    let diff = status.diff.clone().unwrap();
    assert_ne!(diff.hash, approved_diff.hash);
    let a = diff
        .resources
        .iter()
        .find(|r| r.address == "terraform_data.a")
        .expect("the re-plan changes a");
    assert_eq!(a.action, outpost_api::ChangeAction::Update, "{diff:?}");
    assert_eq!(resources(&site.module_dir("c0"))["a"].2, "moved");
    eventually(30, "the audit log to be shipped", async || {
        let shipped = std::fs::read_to_string(site.state.join("audit.shipped")).ok()?;
        (shipped.trim() == local_events(&site.state).to_string()).then_some(())
    })
    .await;
    assert_eq!(
        audited_applies(&cp).await.get(name),
        None,
        "nothing applied yet"
    );

    approve(&plans, &asked).await.unwrap();
    let done = reaches(&|p| phase(p).is_some_and(PlanPhase::is_terminal)).await;
    let status = done.status.unwrap();
    assert_eq!(status.phase, Some(PlanPhase::Succeeded), "{status:?}");
    assert_eq!(status.diff.unwrap().hash, diff.hash);
    let state = resources(&site.module_dir("c0"));
    assert_eq!(state["a"].2, "c0");
    assert_eq!(state["c"].2, state["b"].1);
    eventually(30, "one apply in the audit log", async || {
        let applies = audited_applies(&cp).await;
        (applies.get(name).map(Vec::len) == Some(1)).then_some(())
    })
    .await;
}

/// ConfigMaps per Kubernetes component: enough server-side applies that a kill soon after
/// `applying` is journaled lands among them.
const CONFIG_MAPS: usize = 60;

/// Kubernetes components (a stand-in cluster): the runner is killed a random moment
/// (up to 150 ms) after it journals `applying` for each of 6 Plans, each applying
/// [`CONFIG_MAPS`] ConfigMaps, and restarted. A Plan whose apply the kill cut (the
/// journal still says `applying`) re-plans — the objects already written show no change,
/// the rest are still created — and finishes: `Succeeded`, reason `Resumed`, one
/// `apply` event saying `resumed: true`; every ConfigMap of every component is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_applies_cut_by_a_kill_resume() {
    let cp = Arc::new(ControlPlane::start(Backend::Embedded).await);
    let cluster = ControlPlane::start_standin_cluster().await;
    let plans: Api<Plan> = Api::namespaced(cp.client().await, "default");
    let dir = tempfile::tempdir().unwrap();
    create_app(&cp).await;
    let site = Site {
        install: "k0".into(),
        prompt: false,
        token: install(&cp, "k0", false).await,
        state: dir.path().join("state"),
        log: dir.path().join("runner.log"),
        plans: (0..6)
            .map(|p| (format!("k0-deploy-m{p}"), format!("m{p}")))
            .collect(),
        kubeconfig: Some(cluster.kubeconfig(&cluster.admin_token)),
    };
    for (name, component) in &site.plans {
        let content: String = (0..CONFIG_MAPS)
            .map(|i| {
                format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {component}-{i}\ndata:\n  n: \"{i}\"\n")
            })
            .collect();
        let desired = json!({"app": "shop", "type": "kubernetes_manifest",
            "manifest": {"namespace": "shop", "content": content}});
        ready_plan(&plans, &site.install, name, component, desired, json!([])).await;
    }
    let mut runner = site.start(&cp);
    let mut cut = BTreeMap::new();
    for name in site.plans.keys() {
        let applying = async || matches!(site.stage(name), Some(Stage::Applying { .. }));
        eventually(120, &format!("{name} to be applying"), async || {
            applying().await.then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 150)).await;
        runner.kill();
        // Cut: the journal still says `applying` and the control plane has not been
        // told the result (a runner killed after reporting, before journaling that it
        // reported, has nothing to resume). A report the runner sent just before it was
        // killed may still be landing: look after it has.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reported = plans
            .get(name)
            .await
            .ok()
            .and_then(|p| phase(&p))
            .is_some_and(PlanPhase::is_terminal);
        cut.insert(name.clone(), applying().await && !reported);
        runner = site.start(&cp);
    }
    eventually(120, "every plan to be final", async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        items
            .iter()
            .all(|p| phase(p).is_some_and(PlanPhase::is_terminal))
            .then_some(())
    })
    .await;
    eventually(60, "every audit event to be shipped", async || {
        let shipped = std::fs::read_to_string(site.state.join("audit.shipped")).ok()?;
        (shipped.trim() == local_events(&site.state).to_string()).then_some(())
    })
    .await;
    let applies = audited_applies(&cp).await;
    let kubectl = cluster.kubectl();
    for (name, component) in &site.plans {
        let status = plans.get(name).await.unwrap().status.unwrap();
        assert_eq!(
            status.phase,
            Some(PlanPhase::Succeeded),
            "{name}: {status:?}"
        );
        let events = applies.get(name).cloned().unwrap_or_default();
        assert_eq!(
            events.len(),
            1,
            "{name}: one apply in the audit log: {events:?}"
        );
        if cut[name] {
            assert_eq!(
                status.reason.as_deref(),
                Some("Resumed"),
                "{name}: {status:?}"
            );
            assert_eq!(events[0]["resumed"], true, "{name}: {}", events[0]);
        }
        let names = kubectl.ok(&["get", "configmaps", "-n", "shop", "-o", "name"]);
        let mine = names
            .lines()
            .filter(|l| l.starts_with(&format!("configmap/{component}-")))
            .count();
        assert_eq!(mine, CONFIG_MAPS, "{name}: its ConfigMaps");
    }
    let resumed = cut.values().filter(|c| **c).count();
    println!(
        "{resumed} of {} kubernetes applies cut and resumed",
        cut.len()
    );
    assert!(resumed > 0, "no kill landed during an apply");
}
