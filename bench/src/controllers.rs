//! `outpost bench controllers`: how long, and how many store writes, it takes the
//! controllers to plan a new release for many installs.
//!
//! One process: the API server on a fresh embedded store (its writes counted below the
//! server), every controller, and a *simulated* runner that marks each approved Plan
//! succeeded at once (this measures the control plane, not the executors). Set-up
//! deploys the first release to every install; the measured phase changes the App, which
//! gives every component of every install a new rendered state, and lasts until every
//! install reports every component deployed at the new release.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use kube_client::api::{Api, Patch, PatchParams, PostParams};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use kube_client::{Client, ResourceExt as _};
use outpost_api::{Install, InstallPhase, Plan};
use outpost_apiserver::auth::{TokenFile, User};
use outpost_apiserver::server::ApiServer;
use outpost_apiserver::storage::{
    EmbeddedOptions, EmbeddedStore, KeyValue, ListOptions, ListPage, Revision, Store, StoreError,
    WatchStream,
};
use outpost_kinds::ADMINS;
use serde_json::json;

/// The namespace the bench's objects live in.
const NAMESPACE: &str = "bench";

/// What to measure.
pub struct ControllersBench {
    /// Installs of the App.
    pub installs: usize,
    /// Components of the App (a dependency graph three levels deep).
    pub components: usize,
    /// Give up after this long per phase.
    pub timeout: Duration,
}

/// Successful store writes (creates, updates, deletes) by resource, and refused ones.
#[derive(Default)]
struct Writes {
    counts: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl Writes {
    fn count(&self, op: &'static str, key: &str, ok: bool) {
        // Keys are /registry/<group>/<plural>/<namespace>/<name>.
        let plural = key.split('/').nth(3).unwrap_or("?");
        let op = match (ok, op) {
            (true, op) => op,
            (false, "create") => "refused create",
            (false, "update") => "refused update",
            (false, _) => "refused delete",
        };
        *self
            .counts
            .lock()
            .expect("not poisoned")
            .entry((op, plural.to_owned()))
            .or_default() += 1;
    }

    fn snapshot(&self) -> BTreeMap<(&'static str, String), u64> {
        self.counts.lock().expect("not poisoned").clone()
    }

    /// Once the counts have not moved for half a second (10 s at most). A write is
    /// counted when the store's answer reaches the server, which may be after its watch
    /// event told the bench the phase was over: a phase's last writes would otherwise
    /// land in the next one's counts.
    async fn quiet(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = self.snapshot();
        let mut still_since = Instant::now();
        while Instant::now() < deadline && still_since.elapsed() < Duration::from_millis(500) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = self.snapshot();
            if now != last {
                last = now;
                still_since = Instant::now();
            }
        }
    }
}

/// Counts the writes that reach the store.
struct CountingStore {
    inner: Arc<dyn Store>,
    writes: Arc<Writes>,
}

#[async_trait::async_trait]
impl Store for CountingStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        self.inner.get(key).await
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage, StoreError> {
        self.inner.list(prefix, options).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError> {
        let result = self.inner.create(key, value).await;
        self.writes.count("create", key, result.is_ok());
        result
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StoreError> {
        let result = self.inner.update(key, value, expected).await;
        self.writes.count("update", key, result.is_ok());
        result
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(KeyValue, Revision), StoreError> {
        let result = self.inner.delete(key, expected).await;
        self.writes.count("delete", key, result.is_ok());
        result
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        self.inner.watch(prefix, after).await
    }

    async fn current_revision(&self) -> Result<Revision, StoreError> {
        self.inner.current_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.inner.compact(revision).await
    }
    async fn holds_revision(&self, revision: Revision) -> Result<bool, StoreError> {
        self.inner.holds_revision(revision).await
    }
}

/// One phase's figures.
#[derive(Clone, Debug)]
pub struct PhaseReport {
    /// What the phase did.
    pub name: &'static str,
    /// Until the last Plan of the phase was created.
    pub planned: Duration,
    /// Until every install reported every component at the phase's release.
    pub rolled_out: Duration,
    /// Plans created in the phase.
    pub plans: u64,
    /// Successful store writes in the phase by (operation, resource); `refused` counts
    /// writes the store turned down (a create of an existing key, a stale update).
    pub writes: BTreeMap<(&'static str, String), u64>,
}

/// The benchmark's result.
#[derive(Clone, Debug)]
pub struct ControllersBenchReport {
    /// Installs.
    pub installs: usize,
    /// Components per install.
    pub components: usize,
    /// Set-up (first release) and the measured new release.
    pub phases: Vec<PhaseReport>,
}

impl PhaseReport {
    fn total(&self, op: &str) -> u64 {
        self.writes
            .iter()
            .filter(|((o, _), _)| *o == op)
            .map(|(_, n)| n)
            .sum()
    }
}

impl fmt::Display for ControllersBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} installs x {} components, embedded store, simulated runner",
            self.installs, self.components
        )?;
        writeln!(
            f,
            "{:<14} {:>7} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}",
            "phase",
            "plans",
            "planned s",
            "rolled s",
            "creates",
            "updates",
            "deletes",
            "refused",
            "writes/inst",
            "writes/plan"
        )?;
        for p in &self.phases {
            let total = p.total("create") + p.total("update") + p.total("delete");
            writeln!(
                f,
                "{:<14} {:>7} {:>10.2} {:>9.2} {:>8} {:>8} {:>8} {:>8} {:>11.1} {:>11.2}",
                p.name,
                p.plans,
                p.planned.as_secs_f64(),
                p.rolled_out.as_secs_f64(),
                p.total("create"),
                p.total("update"),
                p.total("delete"),
                p.total("refused create") + p.total("refused update") + p.total("refused delete"),
                total as f64 / self.installs.max(1) as f64,
                total as f64 / p.plans.max(1) as f64,
            )?;
        }
        for p in &self.phases {
            let by: Vec<String> = p
                .writes
                .iter()
                .map(|((op, resource), n)| format!("{op} {resource}: {n}"))
                .collect();
            writeln!(f, "{}: {}", p.name, by.join(", "))?;
        }
        Ok(())
    }
}

impl ControllersBench {
    /// Runs the benchmark.
    pub async fn run(&self) -> anyhow::Result<ControllersBenchReport> {
        let dir = tempfile::tempdir()?;
        let writes = Arc::new(Writes::default());
        let store: Arc<dyn Store> = Arc::new(CountingStore {
            inner: Arc::new(EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).await?),
            writes: writes.clone(),
        });
        let token = uuid_token();
        let mut tokens = TokenFile::default();
        tokens.insert(
            token.clone(),
            User {
                name: "bench".into(),
                uid: "bench".into(),
                groups: vec![ADMINS.into()],
            },
        );
        let mut config = outpost_kinds::server_config(tokens);
        config.watch_window = 100_000;
        let server = ApiServer::new(store, config).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let serving = tokio::spawn(server.serve(listener, std::future::pending()));
        let mut kube = kube_client::Config::new(url.parse()?);
        kube.auth_info.token = Some(token.into());
        // Many installs reconcile at once: give the client room.
        kube.read_timeout = Some(Duration::from_secs(120));
        let client = Client::try_from(kube)?;

        create_app(&client, self.components).await?;
        let controllers = tokio::spawn((outpost_controllers::run::all_controllers(vec![
            "https://outpost.bench.invalid".into(),
        ]))(client.clone()));
        let runner = SimulatedRunner::start(client.clone());
        let release = wait_for_release(&client, NAMESPACE, "bench", None, self.timeout).await?;

        let mut phases = Vec::new();
        let started = Instant::now();
        let before = (writes.snapshot(), runner.created());
        let installs = Api::<Install>::namespaced(client.clone(), NAMESPACE);
        futures::stream::iter(0..self.installs)
            .map(|i| {
                let installs = installs.clone();
                async move { installs.create(&PostParams::default(), &install(i)).await }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await
            .context("creating the installs")?;
        let rolled = wait_rolled_out(&client, &release, self.installs, self.timeout).await?;
        writes.quiet().await;
        phases.push(phase(
            "first release",
            started,
            rolled,
            &runner,
            before,
            &writes,
        ));
        eprintln!("first release deployed to {} installs", self.installs);

        // The measured phase: a new release of the App.
        let started = Instant::now();
        let before = (writes.snapshot(), runner.created());
        Api::<outpost_api::App>::namespaced(client.clone(), NAMESPACE)
            .patch(
                "bench",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"description": "release 2"}})),
            )
            .await
            .context("changing the App")?;
        let release2 =
            wait_for_release(&client, NAMESPACE, "bench", Some(&release), self.timeout).await?;
        let rolled = wait_rolled_out(&client, &release2, self.installs, self.timeout).await?;
        writes.quiet().await;
        phases.push(phase(
            "new release",
            started,
            rolled,
            &runner,
            before,
            &writes,
        ));

        controllers.abort();
        runner.task.abort();
        serving.abort();
        Ok(ControllersBenchReport {
            installs: self.installs,
            components: self.components,
            phases,
        })
    }
}

fn phase(
    name: &'static str,
    started: Instant,
    rolled: Instant,
    runner: &SimulatedRunner,
    (writes_before, plans_before): (BTreeMap<(&'static str, String), u64>, u64),
    writes: &Writes,
) -> PhaseReport {
    let after = writes.snapshot();
    let last_created = runner.last_created().unwrap_or(started);
    PhaseReport {
        name,
        planned: last_created.saturating_duration_since(started),
        rolled_out: rolled - started,
        plans: runner.created() - plans_before,
        writes: after
            .into_iter()
            .map(|(k, n)| {
                let before = writes_before.get(&k).copied().unwrap_or(0);
                (k, n - before)
            })
            .filter(|(_, n)| *n > 0)
            .collect(),
    }
}

fn uuid_token() -> String {
    (0..32)
        .map(|_| format!("{:x}", rand::random_range(0..16u8)))
        .collect()
}

/// The App, its roles and `components` Components: component `i` depends on `i - 4`,
/// so the graph is three levels deep for ten components; every manifest carries the
/// release, so each release re-renders every component.
async fn create_app(client: &Client, components: usize) -> anyhow::Result<()> {
    let app = json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "App",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {
            "description": "release 1",
            "inputs": [{"name": "replicas", "type": "number", "default": 2, "source": "vendor"}],
            "permissions": {"roles": [
                {"name": "{{ install.id }}-provision", "type": "provision"},
                {"name": "{{ install.id }}-maintenance", "type": "maintenance"},
                {"name": "{{ install.id }}-deprovision", "type": "deprovision"},
            ]},
            "sandbox": {"type": "terraform_module", "source": "./sandbox",
                        "variables": {"name": "{{ install.id }}"}},
        }
    });
    Api::<outpost_api::App>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &serde_json::from_value(app)?)
        .await
        .context("creating the App")?;
    let api = Api::<outpost_api::Component>::namespaced(client.clone(), NAMESPACE);
    for i in 0..components {
        let dependencies: Vec<String> = if i >= 4 {
            vec![format!("c{}", i - 4)]
        } else {
            vec![]
        };
        let content = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n  annotations:\n    \
             outpost.dev/release: \"{{{{ app.release }}}}\"\ndata:\n  replicas: \
             \"{{{{ inputs.replicas }}}}\"\n"
        );
        let component = json!({
            "apiVersion": "outpost.dev/v1alpha1", "kind": "Component",
            "metadata": {"name": format!("c{i}"), "namespace": NAMESPACE},
            "spec": {"app": "bench", "type": "kubernetes_manifest",
                     "manifest": {"namespace": "app", "content": content},
                     "dependencies": dependencies},
        });
        api.create(&PostParams::default(), &serde_json::from_value(component)?)
            .await
            .with_context(|| format!("creating component c{i}"))?;
    }
    Ok(())
}

fn install(i: usize) -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1", "kind": "Install",
        "metadata": {"name": format!("i{i:05}"), "namespace": NAMESPACE},
        "spec": {"app": "bench", "approvalMode": "approve-all",
                 "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"}},
    }))
    .expect("a valid Install")
}

/// Waits until App `namespace/app` is Ready with a release other than `previous`.
pub(crate) async fn wait_for_release(
    client: &Client,
    namespace: &str,
    app: &str,
    previous: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<String> {
    let apps = Api::<outpost_api::App>::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + timeout;
    loop {
        let app = apps.get(app).await?;
        if let Some(release) = app.status.and_then(|s| s.release)
            && Some(release.as_str()) != previous
        {
            return Ok(release);
        }
        anyhow::ensure!(Instant::now() < deadline, "the App never got a new release");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `count` installs (of namespace `bench`) report every component deployed
/// at `release`; returns when that was first seen.
pub(crate) async fn wait_rolled_out(
    client: &Client,
    release: &str,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let installs = Api::<Install>::namespaced(client.clone(), NAMESPACE);
    let mut done: BTreeMap<String, bool> = BTreeMap::new();
    let mut events = watcher(installs, watcher::Config::default())
        .applied_objects()
        .boxed();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_report = Instant::now();
    loop {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        let install = match next {
            Ok(Some(install)) => install?,
            Ok(None) => anyhow::bail!("the install watch ended"),
            Err(_) => {
                let finished = done.values().filter(|d| **d).count();
                anyhow::bail!("only {finished} of {count} installs rolled out in {timeout:?}")
            }
        };
        let status = install.status.clone().unwrap_or_default();
        let rolled = status.phase == Some(InstallPhase::Active)
            && !status.components.is_empty()
            && status
                .components
                .iter()
                .all(|c| c.release.as_deref() == Some(release));
        done.insert(install.name_any(), rolled);
        let finished = done.values().filter(|d| **d).count();
        if finished == count {
            return Ok(Instant::now());
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  {finished} of {count} installs rolled out");
            last_report = Instant::now();
        }
    }
}

/// Marks each approved Plan succeeded at once, counting the Plans it sees created.
struct SimulatedRunner {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<(u64, Option<Instant>)>>,
}

impl SimulatedRunner {
    fn start(client: Client) -> Self {
        let seen = Arc::new(Mutex::new((0u64, None)));
        let counted = seen.clone();
        let plans = Api::<Plan>::namespaced(client, NAMESPACE);
        let mut known = std::collections::HashSet::new();
        let task = tokio::spawn(async move {
            let stream = watcher(plans.clone(), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .filter_map(|p| async move { p.ok() });
            stream
                .filter_map(|plan: Plan| {
                    let name = plan.name_any();
                    if known.insert(name.clone()) {
                        let mut seen = counted.lock().expect("not poisoned");
                        seen.0 += 1;
                        seen.1 = Some(Instant::now());
                    }
                    let approved = outpost_runner::claim::claimable(
                        plan.status.as_ref().and_then(|s| s.phase),
                    );
                    async move { approved.then_some(name) }
                })
                .for_each_concurrent(64, |name| {
                    let plans = plans.clone();
                    async move {
                        let done = json!({"status": {"phase": "Succeeded",
                            "finishedAt": jiff_now(), "outputs": {"ok": true}}});
                        if let Err(err) = plans
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(done))
                            .await
                        {
                            tracing::warn!(plan = %name, error = %err, "simulated runner");
                        }
                    }
                })
                .await;
        });
        SimulatedRunner { task, seen }
    }

    fn created(&self) -> u64 {
        self.seen.lock().expect("not poisoned").0
    }

    fn last_created(&self) -> Option<Instant> {
        self.seen.lock().expect("not poisoned").1
    }
}

fn jiff_now() -> String {
    jiff::Timestamp::now().to_string()
}
