//! The runner's session with the control plane: registration, heartbeats, the watch on
//! its install's Plans, and the tasks that execute and report.
//!
//! The runner listens on no port: every connection is one it dials.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_client::api::{Api, Patch, PatchParams};
use kube_client::runtime::reflector::{self, Store};
use kube_client::runtime::{WatchStreamExt as _, watcher};
use outpost_api::{AuditEvent, AuditEventType, Lean, Plan, Runner, RunnerSpec};
use serde_json::json;
use tokio::sync::Notify;

use crate::audit::{AuditLog, Subject};
use crate::aws::anchor_parameters::AnchorParameters;
use crate::executor::Executors;
use crate::failover::{Failover, Servers};
use crate::identity::Identity;
use crate::journal::Journal;
use crate::secrets::{DirectorySecrets, NoSecrets, SecretSource, SecretsManagerSecrets};
use crate::settings::RunnerArgs;
use crate::token::{RunnerToken, TokenSource};

/// The label naming a Plan's install.
pub use outpost_api::labels::INSTALL as INSTALL_LABEL;

/// What every task of a running runner shares.
pub struct Session {
    /// The settings it was started with.
    pub args: RunnerArgs,
    /// The install's namespace.
    pub namespace: String,
    /// The install's name.
    pub install: String,
    /// The runner's name (`Runner` object, `claimedBy`).
    pub name: String,
    /// The install's Plans.
    pub plans: Api<Plan>,
    /// The install's Plans, decoded without their managed fields: for status writes
    /// whose answer the runner does not read.
    pub lean_plans: Api<Lean<Plan>>,
    /// The install's audit events.
    pub audit_events: Api<AuditEvent>,
    /// The runner's Runner objects.
    pub runners: Api<Runner>,
    /// Plans of the install as last watched.
    pub store: Store<Plan>,
    /// The journal of Plan transitions.
    pub journal: Mutex<Journal>,
    /// The audit log.
    pub audit: Mutex<AuditLog>,
    /// Executors by type.
    pub executors: Executors,
    /// Where secrets come from.
    pub secrets: Box<dyn SecretSource>,
    /// Wakes the worker (a Plan changed).
    pub plans_changed: Notify,
    /// Wakes the Plan reporter (a Plan finished locally).
    pub to_report: Notify,
    /// Wakes the audit shipper (an event was recorded).
    pub to_ship: Notify,
    /// Wakes the checkpoint writer (an event was recorded).
    pub to_checkpoint: Notify,
    /// Drift baselines and the reports owed.
    pub drift: crate::drift::Drift,
    /// The install's vendor Policies as last read: used while the control plane is away.
    pub vendor_policies: Mutex<Option<Vec<outpost_api::Policy>>>,
    /// The customer's AWS account (`--stack`): each Plan runs under its assumed role.
    pub aws: Option<crate::aws::Account>,
    /// The secret values of what is in flight, masked in everything recorded.
    pub masks: crate::mask::Masks,
    identity: Arc<Identity>,
}

impl Session {
    /// The install's App, read from the control plane (the Install, then its App),
    /// without their managed fields.
    pub async fn app(&self) -> Result<outpost_api::App, kube_client::Error> {
        let client = self.plans.clone().into_client();
        let Lean(install) =
            Api::<Lean<outpost_api::Install>>::namespaced(client.clone(), &self.namespace)
                .get(&self.install)
                .await?;
        Api::<Lean<outpost_api::App>>::namespaced(client, &self.namespace)
            .get(&install.spec.app)
            .await
            .map(Lean::into_inner)
    }

    /// Records an audit event in the local log and wakes the shipper. An event that
    /// cannot be written to the state dir stops the runner: it must not act unaudited.
    /// Secret values in flight ([`Session::masks`]) are masked in its details.
    pub fn audit(&self, type_: AuditEventType, subject: Subject, details: serde_json::Value) {
        let details = (!details.is_null()).then(|| self.masks.current().mask_json(&details));
        self.audit
            .lock()
            .expect("audit lock is never poisoned: appends do not panic")
            .append(type_, subject, details)
            .expect("the audit log in the state dir is writable");
        self.to_ship.notify_one();
        self.to_checkpoint.notify_one();
    }

    /// The runner's public key (base64).
    pub fn public_key(&self) -> String {
        self.identity.public_key()
    }

    /// A signed checkpoint of the audit log's head; `None` while it is empty.
    pub fn checkpoint(&self) -> Option<outpost_api::audit_anchor::Checkpoint> {
        let audit = self.audit.lock().expect("audit lock is never poisoned");
        let head = audit.head()?;
        Some(crate::anchor::sign_checkpoint(&self.identity, head))
    }
}

/// A client for the `--server`s with the runner's `token` and `--certificate-authority`.
/// It uses one server at a time and moves to the next when that one fails
/// ([`crate::failover`]).
pub fn client(args: &RunnerArgs, token: &RunnerToken) -> anyhow::Result<kube_client::Client> {
    let (namespace, install) = args.install_ref();
    let runner = format!("{namespace}/{install}/{}", args.runner_name());
    let first = crate::failover::first_server(&runner, args.server.len());
    let servers = Arc::new(Servers::new(args.server.clone(), first));
    let root_cert = args
        .certificate_authority
        .as_deref()
        .map(pem_to_der)
        .transpose()?;
    let namespace = namespace.to_owned();
    // With one server, kube's own retry of 429/503/504 on that server stays as it was;
    // with several, a 503 moves to the next server and the caller's backoff retries.
    let retry_in_place = servers.len() == 1;
    let failover = Failover::new(servers.clone(), |url| {
        let mut config = kube_client::Config::new(url.clone());
        config.auth_info.token = Some(token.expose().to_owned().into());
        config.default_namespace = namespace.clone();
        config.read_timeout = Some(Duration::from_secs(30));
        config.root_cert = root_cert.clone().map(|der| vec![der]);
        config.default_retry = retry_in_place;
        kube_client::Client::try_from(config)
    })?;
    tracing::info!(server = %servers.url(servers.current()), servers = servers.len(), "using API server");
    Ok(kube_client::Client::new(failover, namespace))
}

fn pem_to_der(path: &Path) -> anyhow::Result<Vec<u8>> {
    use base64::Engine as _;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .with_context(|| format!("{} is not a PEM certificate", path.display()))
}

/// Runs the runner until the process is stopped: registers, heartbeats, watches the
/// install's Plans and executes them one at a time with `executors`.
pub async fn run(mut args: RunnerArgs, executors: Executors) -> anyhow::Result<()> {
    // The token first: without one nothing starts, and it is read before anything runs.
    let token = TokenSource::of(&args)?.read(&args).await?;
    // Executors run tools (terraform, steps) in work dirs of their own: paths under the
    // state dir must not depend on the runner's working directory.
    args.state_dir = std::path::absolute(&args.state_dir)
        .with_context(|| format!("state dir {}", args.state_dir.display()))?;
    create_private_dir(&args.state_dir)?;
    let work_root = std::path::absolute(args.work_root())
        .with_context(|| format!("work dir {}", args.work_root().display()))?;
    args.work_dir = Some(work_root.clone());
    refuse_paths_steps_see(&args)?;
    crate::work_dirs::prepare(&args.state_dir, &work_root)?;
    if let Some(anchor) = &args.anchor_dir {
        let anchor = std::path::absolute(anchor)
            .with_context(|| format!("anchor dir {}", anchor.display()))?;
        anyhow::ensure!(
            !anchor.starts_with(&args.state_dir),
            "--anchor-dir {} is inside --state-dir {}: the customer's anchor must outlive the \
             state dir (a runner that lost its state continues from the checkpoint kept there)",
            anchor.display(),
            args.state_dir.display()
        );
    }
    crate::rotation::recover(&args.state_dir)?;
    let identity = Arc::new(Identity::load_or_create(&args.state_dir)?);
    let (namespace, install) = args.install_ref();
    let (namespace, install) = (namespace.to_owned(), install.to_owned());
    let name = args.runner_name().to_owned();
    if identity.is_new() {
        println!(
            "outpost-runner: new signing key; public key {}",
            identity.public_key()
        );
    }
    let anchor = args
        .anchor_dir
        .as_deref()
        .map(crate::anchor::Anchor::open)
        .transpose()?
        .map(Arc::new);
    let client = client(&args, &token)?;
    let journal = Journal::open(&args.state_dir)?;
    let mut audit = AuditLog::open(&args.state_dir, &install, &name, identity.clone())?;
    let identity = match (args.rotate_key, audit.events().is_empty()) {
        (true, false) => {
            let next = crate::rotation::rotate(&args.state_dir, &mut audit)?;
            println!(
                "outpost-runner: rotated signing key (key-rotation signed by the old key); public key {}",
                next.public_key()
            );
            next
        }
        (true, true) => {
            tracing::warn!("--rotate-key: no audit log in the state dir, so no key to rotate from");
            identity
        }
        (false, _) => identity,
    };
    if let Some(anchor) = &anchor {
        anchor.publish_key(&identity.public_key())?;
    }
    let events: Api<AuditEvent> = Api::namespaced(client.clone(), &namespace);
    let reset = match audit.events().is_empty() {
        true => continue_chain(&events, &install, &mut audit, anchor.as_deref()).await,
        false => None,
    };
    let aws = match &args.stack {
        Some(stack) => Some(
            crate::aws::Account::load(
                stack.clone(),
                args.aws_region.clone(),
                args.aws_endpoint.clone(),
            )
            .await?,
        ),
        None => None,
    };
    let secrets: Box<dyn SecretSource> = match (&args.secrets_dir, &aws) {
        (Some(dir), _) => Box::new(DirectorySecrets { dir: dir.clone() }),
        (None, Some(account)) => Box::new(SecretsManagerSecrets::new(
            account.config(),
            &namespace,
            &install,
        )),
        (None, None) => Box::new(NoSecrets),
    };
    let parameters = match (
        &args.publish_key_parameter,
        &args.publish_checkpoint_parameter,
    ) {
        (None, None) => None,
        (key, checkpoint) => {
            let config = match &aws {
                Some(account) => account.config().clone(),
                None => {
                    crate::aws::sdk_config(args.aws_region.clone(), args.aws_endpoint.clone())
                        .await?
                }
            };
            Some(Arc::new(AnchorParameters::new(
                &config,
                key.clone(),
                checkpoint.clone(),
            )))
        }
    };
    let plans: Api<Plan> = Api::namespaced(client.clone(), &namespace);
    let (store, writer) = reflector::store();
    let session = Arc::new(Session {
        namespace: namespace.clone(),
        install: install.clone(),
        name: name.clone(),
        plans,
        lean_plans: Api::namespaced(client.clone(), &namespace),
        audit_events: events,
        runners: Api::namespaced(client.clone(), &namespace),
        store,
        journal: Mutex::new(journal),
        audit: Mutex::new(audit),
        executors,
        secrets,
        plans_changed: Notify::new(),
        to_report: Notify::new(),
        to_ship: Notify::new(),
        to_checkpoint: Notify::new(),
        drift: crate::drift::Drift::open(&args.state_dir)?,
        vendor_policies: Mutex::default(),
        aws,
        masks: Default::default(),
        identity,
        args,
    });
    if let Some(details) = reset {
        let mut details = details;
        details["publicKey"] = json!(session.identity.public_key());
        tracing::warn!(%details, "the state dir had no audit log: continuing the install's chain with a new key (key-reset)");
        session.audit(AuditEventType::KeyReset, Subject::default(), details);
    }
    session.audit(
        AuditEventType::Register,
        Subject::default(),
        json!({"version": env!("CARGO_PKG_VERSION"), "publicKey": session.identity.public_key(),
               "capabilities": session.executors.capabilities()}),
    );
    tracing::info!(runner = %name, install = %format!("{namespace}/{install}"), "runner starting");

    // Watch the install's Plans (label selector: only its own), decoded without the
    // managed fields the runner never reads.
    let config = watcher::Config::default().labels(&format!("{INSTALL_LABEL}={install}"));
    let watch = {
        let session = session.clone();
        outpost_api::lean::watcher(Api::namespaced(client.clone(), &namespace), config)
            .default_backoff()
            .reflect(writer)
            .for_each(move |event| {
                match event {
                    Ok(_) => session.plans_changed.notify_one(),
                    // A server the runner moved to may not have the history the watch
                    // would resume from: the watcher lists the Plans again.
                    Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                        tracing::info!(reason = %status.message, "plan watch: 410 Gone; listing the Plans again");
                    }
                    Err(e) => tracing::debug!(error = %e, "plan watch"),
                }
                std::future::ready(())
            })
    };
    let checkpoints = match (&anchor, &parameters) {
        (None, None) => tokio::spawn(futures::future::pending()),
        _ => tokio::spawn(crate::anchor::keep_checkpoints(
            session.clone(),
            anchor,
            parameters,
        )),
    };
    let tasks = [
        checkpoints,
        tokio::spawn(watch),
        tokio::spawn(register_and_heartbeat(session.clone())),
        tokio::spawn(crate::report::report_plans(session.clone())),
        tokio::spawn(crate::report::ship_audit(session.clone())),
        tokio::spawn(crate::worker::work(session.clone())),
        tokio::spawn(crate::drift::detect(session.clone())),
        tokio::spawn(crate::drift::report::report_drift(session.clone())),
        tokio::spawn(crate::stack_report::report_stack(session.clone())),
    ];
    let (result, _, _) = futures::future::select_all(tasks).await;
    result.context("a runner task panicked")?;
    anyhow::bail!("a runner task stopped")
}

/// When the local audit log is empty, the install's chain may still exist in the control
/// plane: this runner lost its state dir (and its key). Reads the chain's head there
/// (retrying until the control plane answers) and continues after it; returns the
/// details of the `key-reset` to record first, `None` for a chain that starts here.
async fn continue_chain(
    events: &Api<AuditEvent>,
    install: &str,
    audit: &mut AuditLog,
    anchor: Option<&crate::anchor::Anchor>,
) -> Option<serde_json::Value> {
    let params = kube_client::api::ListParams::default().fields(&format!("spec.install={install}"));
    let listed = loop {
        match crate::retry::retry(3, || events.list(&params)).await {
            Ok(listed) => break listed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the install's audit log head; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    let head = listed
        .items
        .into_iter()
        .map(|e| e.spec)
        .max_by_key(|e| e.sequence)?;
    let checkpoint = anchor.and_then(|a| match a.checkpoint() {
        Ok(checkpoint) => checkpoint,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the customer-side checkpoint");
            None
        }
    });
    audit.continue_after(&head);
    Some(json!({
        "reason": "the runner's state dir had no audit log (and no key): a new key continues the chain",
        "continuesFrom": {"sequence": head.sequence, "hash": head.hash},
        "checkpoint": checkpoint.map(|c| json!({
            "sequence": c.sequence, "hash": c.hash, "timestamp": c.timestamp, "publicKey": c.public_key,
        })),
    }))
}

/// Job steps see the host's system directories ([`crate::executor::job::sandbox`]): the
/// runner's state, secrets and cluster credentials must not be in one.
fn refuse_paths_steps_see(args: &RunnerArgs) -> anyhow::Result<()> {
    let paths = [
        ("--state-dir", Some(&args.state_dir)),
        ("--work-dir", args.work_dir.as_ref()),
        ("--secrets-dir", args.secrets_dir.as_ref()),
        ("--kubeconfig", args.kubeconfig.as_ref()),
    ];
    for (flag, path) in paths {
        let Some(path) = path else { continue };
        if let Some(root) = crate::executor::job::sandbox::exposing(path) {
            anyhow::bail!(
                "{flag} {} is under {}, which job steps can read; put it elsewhere \
                 (e.g. /var/lib/outpost-runner)",
                path.display(),
                root.display()
            );
        }
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    outpost_api::secret_file::private_dir(dir)
        .with_context(|| format!("cannot create the state dir {}", dir.display()))
}

/// Creates or updates the `Runner` object (server-side apply), then heartbeats
/// `status.lastHeartbeat` forever. Failures are retried; they never stop the runner.
async fn register_and_heartbeat(session: Arc<Session>) {
    let runner = json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Runner",
        "metadata": {"name": session.name, "labels": {INSTALL_LABEL: session.install}},
        "spec": RunnerSpec {
            install: session.install.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            public_key: session.identity.public_key(),
            capabilities: session.executors.capabilities(),
        },
    });
    let params = PatchParams::apply("outpost-runner").force();
    let runner = Patch::Apply(&runner);
    loop {
        let applied = crate::retry::retry(usize::MAX, || {
            session.runners.patch(&session.name, &params, &runner)
        })
        .await;
        match applied {
            Ok(_) => break,
            Err(e) => {
                tracing::error!(error = %e, "cannot register the Runner; retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
    tracing::info!(runner = %session.name, "registered");
    let mut ticks = tokio::time::interval(session.args.heartbeat());
    loop {
        ticks.tick().await;
        let beat = json!({"status": {"lastHeartbeat": Time(jiff::Timestamp::now())}});
        if let Err(e) = session
            .runners
            .patch_status(&session.name, &PatchParams::default(), &Patch::Merge(&beat))
            .await
        {
            tracing::debug!(error = %e, "heartbeat failed");
        }
    }
}
