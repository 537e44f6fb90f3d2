//! `outpost up`: everything on one machine, on the embedded store.
//!
//! In one process: the API server, the controllers and an API-only stand-in cluster
//! (each server on its own embedded store under the data dir). As supervised children:
//! two local `docker-registry` registries (the vendor's, holding the example image, and
//! the install's) and the example install's runner. Everything resumes from the data
//! dir; SIGINT or SIGTERM stops the children, then the servers.

mod children;
mod progress;
mod registries;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use outpost_api::{InstallPhase, secret_file};
use outpost_apiserver::auth::TokenFile;
use outpost_apiserver::registry::Registry;
use outpost_apiserver::server::{ApiServer, ServerConfig};
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore};
use outpost_apiserver::tls::SelfSigned;
use outpost_kinds::ADMINS;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use outpost_controllers::leader::Election;
use outpost_controllers::run::{all_controllers, run_while_leader};

use crate::manifests;
use crate::server::StopSignals;
use children::{Supervised, on_path};
/// Arguments of `outpost up`.
#[derive(clap::Args)]
pub struct UpArgs {
    /// Where Outpost keeps its state (stores, PKI, tokens, registries, the runner's
    /// state); a second run resumes from it without re-creating anything.
    #[arg(long, default_value = ".outpost", env = "OUTPOST_DATA_DIR")]
    data_dir: PathBuf,
    /// Address of the API server (and of the dashboard, under `/ui`).
    #[arg(long, default_value = "127.0.0.1:8844", env = "OUTPOST_LISTEN")]
    listen: SocketAddr,
    /// Address of the stand-in cluster the example install deploys into.
    #[arg(long, default_value = "127.0.0.1:8845", env = "OUTPOST_CLUSTER_LISTEN")]
    cluster_listen: SocketAddr,
    /// Manifests applied at start (server-side apply, into namespace `default`).
    #[arg(long, default_value = "manifests")]
    manifests: PathBuf,
    /// What the example's customers set themselves (the App's `source: customer`
    /// inputs, which a stack-booted runner reads from its install stack): `DIR/NAME.yaml`
    /// for install NAME, handed to its local runner (`--customer-inputs`).
    #[arg(long, default_value = "customer/inputs")]
    customer_inputs: PathBuf,
    /// The example install, as NAMESPACE/NAME: it gets a local runner and its registry
    /// inputs point at the local registries. `up` waits until it is Active.
    #[arg(long, default_value = "default/globex")]
    install: String,
}

/// An API server serving HTTPS until told to stop.
struct Serving {
    url: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Serving {
    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

/// Opens the embedded store in `dir` and serves it over HTTPS on `listen`.
async fn serve(
    dir: &Path,
    tokens: TokenFile,
    standin_cluster: bool,
    listen: SocketAddr,
    tls: &SelfSigned,
) -> anyhow::Result<Serving> {
    let store = EmbeddedStore::open(dir, EmbeddedOptions::default())
        .await
        .with_context(|| format!("cannot open the embedded store in {}", dir.display()))?;
    let mut registry = Registry::new();
    if standin_cluster {
        registry = registry.with_standin_cluster();
    }
    let mut config = ServerConfig::new(registry, tokens);
    outpost_kinds::register(&mut config);
    let server = outpost_dashboard::mount(ApiServer::new(Arc::new(store), config).await?);
    let listener = std::net::TcpListener::bind(listen).with_context(|| {
        format!("cannot listen on {listen} (pass a flag to choose another address)")
    })?;
    listener.set_nonblocking(true)?;
    let url = format!("https://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let (cert, key) = (tls.cert.clone(), tls.key.clone());
    let task = tokio::spawn(async move {
        server
            .serve_tls(listener, &cert, &key, async {
                let _ = stopped.await;
            })
            .await
            .map_err(anyhow::Error::from)
    });
    Ok(Serving { url, stop, task })
}

/// Starts everything, shows progress until the example install is Active, prints how
/// to connect, and runs until Ctrl-C.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let (namespace, install) = args
        .install
        .split_once('/')
        .unwrap_or(("default", args.install.as_str()));
    // Absolute, so what `up` prints and hands its children does not depend on their
    // working directories.
    let dir = &std::path::absolute(&args.data_dir)
        .with_context(|| format!("data dir {}", args.data_dir.display()))?;
    // It holds the admin token and kubeconfigs: owner only.
    secret_file::private_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (tokens, admin_token) = admin_tokens(dir)?;
    // kubectl sends tokens only over TLS: serve HTTPS with a local CA kept in the data dir.
    let tls = SelfSigned::ensure(&dir.join("pki"))?;
    let ca_data = tls.ca_data()?;
    let api = serve(&dir.join("store"), tokens, false, args.listen, &tls).await?;
    let url = api.url.clone();
    println!("outpost: API server at {url}");
    let kubeconfig = write_kubeconfig(dir, "kubeconfig", &url, &ca_data, &admin_token)?;
    let cluster_tokens = TokenFile::read(&dir.join("tokens.csv"))?;
    let cluster = serve(
        &dir.join("cluster/store"),
        cluster_tokens,
        true,
        args.cluster_listen,
        &tls,
    )
    .await?;
    println!("outpost: stand-in cluster at {}", cluster.url);
    let cluster_kubeconfig = write_kubeconfig(
        dir,
        "cluster-kubeconfig",
        &cluster.url,
        &ca_data,
        &admin_token,
    )?;

    let mut skipped = Vec::new();
    let mut registries = Vec::new();
    match on_path(registries::BINARY) {
        Some(binary) => {
            let vendor =
                registries::start(&binary, &dir.join("registry-vendor"), "vendor registry").await?;
            let own = registries::start(&binary, &dir.join("registry-install"), "install registry")
                .await?;
            let (image, pushed) = registries::publish_example_image(&vendor).await?;
            println!(
                "outpost: vendor registry at {} ({image}{}), install registry at {}",
                vendor.host,
                if pushed { ", pushed now" } else { "" },
                own.host
            );
            registries.push(vendor);
            registries.push(own);
        }
        None => skipped.push(format!(
            "no local registries: `{}` is not on PATH (`./x deps` installs it), so the \
             install's web-image cannot be copied",
            registries::BINARY
        )),
    }

    let client = crate::client::from_kubeconfig(&kubeconfig).await?;
    if args.manifests.is_dir() {
        let mut documents = manifests::read_dir(&args.manifests)?;
        if let [vendor, _] = registries.as_slice()
            && namespace == "default"
        {
            point_at_registries(&mut documents, install, &vendor.host)?;
        }
        let applied = manifests::apply(
            &client,
            &outpost_kinds::registry(),
            "default",
            &documents,
            "outpost-up",
        )
        .await?;
        println!(
            "outpost: applied {applied} objects from {}",
            args.manifests.display()
        );
    }
    // The controllers run in-process, electing themselves leader of this data dir.
    let controllers = {
        let election = Election::new(
            "default",
            "outpost-controllers",
            &crate::controllers::default_identity(),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run_while_leader(
            client.clone(),
            election,
            all_controllers(vec![url.clone()]),
            async {
                let _ = stopped.await;
            },
        ));
        (stop, task)
    };
    println!("outpost: controllers running");

    let own_registry = match registries.as_slice() {
        [_, own] if namespace == "default" => Some(own.host.as_str()),
        _ => None,
    };
    let inputs_file = dir.join("customer-inputs.yaml");
    customer_inputs(&args.customer_inputs, install, own_registry, &inputs_file)?;
    let mut runner = start_runner(
        &client,
        dir,
        namespace,
        install,
        &url,
        &tls.ca,
        &cluster_kubeconfig,
        &inputs_file,
        &mut skipped,
    )
    .await?;
    for reason in &skipped {
        println!("outpost: skipped: {reason}");
    }
    // One listener for both waits below: a Ctrl-C between them is not lost.
    let mut signals = StopSignals::listen();
    let stopped_early = if skipped.is_empty() {
        println!("outpost: waiting for install {namespace}/{install} to be Active");
        tokio::select! {
            result = progress::until_active(&client, namespace, install, &mut runner) => {
                if result? == InstallPhase::Degraded {
                    println!(
                        "outpost: install {namespace}/{install} is Degraded: a Plan failed (above); read its output with `outpost logs PLAN`, fix the cause, then `outpost deploy COMPONENT --install {install}`; Outpost keeps running"
                    );
                }
                false
            }
            () = signals.recv() => true,
        }
    } else {
        println!(
            "outpost: not waiting for install {namespace}/{install} to be Active (see skipped above)"
        );
        false
    };
    if !stopped_early {
        println!("outpost: dashboard at {url}/ui");
        println!("outpost: API server at {url}");
        println!("outpost: admin token {admin_token}");
        println!(
            "outpost: kubeconfig {}  (export KUBECONFIG={0})",
            kubeconfig.display()
        );
        println!(
            "outpost: stand-in cluster kubeconfig {}  (kubectl --kubeconfig {0} get deployments -A)",
            cluster_kubeconfig.display()
        );
        println!(
            "outpost: runner pid {} (log {})",
            runner.id().unwrap_or_default(),
            runner.log().display()
        );
        for registry in &registries {
            if let Some(pid) = registry.process.id() {
                println!("outpost: registry {} pid {pid}", registry.host);
            }
        }
        println!("outpost: press Ctrl-C to stop");
        signals.recv().await;
    }
    println!("outpost: stopping");
    runner.stop().await;
    let _ = controllers.0.send(());
    let _ = controllers.1.await;
    for registry in registries {
        registry.process.stop().await;
    }
    cluster.stop().await?;
    api.stop().await?;
    println!("outpost: stopped");
    Ok(())
}

/// Points install `name`'s vendor registry input at the local vendor registry, in the
/// documents before they are applied (so the Install never has another value, and
/// nothing is planned for it). The install's own registry is the customer's input:
/// [`customer_inputs`].
fn point_at_registries(
    documents: &mut [(PathBuf, Value)],
    name: &str,
    vendor: &str,
) -> anyhow::Result<()> {
    let (_, install) = documents
        .iter_mut()
        .find(|(_, d)| d["kind"] == "Install" && d["metadata"]["name"] == name)
        .with_context(|| format!("the manifests have no Install {name}"))?;
    let inputs = install["spec"]["inputs"]
        .as_object_mut()
        .with_context(|| format!("Install {name} has no spec.inputs"))?;
    inputs.insert("vendor_registry".into(), vendor.into());
    Ok(())
}

/// Writes the customer's inputs of `install` (`DIR/INSTALL.yaml` of `--customer-inputs`,
/// none when it is missing), with `image_registry` the local install registry when there
/// is one, to `file` for the runner's `--customer-inputs`.
fn customer_inputs(
    dir: &Path,
    install: &str,
    own_registry: Option<&str>,
    file: &Path,
) -> anyhow::Result<()> {
    let source = dir.join(format!("{install}.yaml"));
    let mut inputs: serde_json::Map<String, Value> = match std::fs::read_to_string(&source) {
        Ok(text) => serde_saphyr::from_str(&text)
            .with_context(|| format!("{} is not a map of inputs", source.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", source.display())),
    };
    if let Some(own) = own_registry {
        inputs.insert("image_registry".into(), own.into());
    }
    std::fs::write(file, serde_json::to_string_pretty(&inputs)?)
        .with_context(|| format!("cannot write {}", file.display()))
}

/// Starts the install's runner under its token (minted once, kept in `DATA/runner/`),
/// with bubblewrap and terraform when they are on `PATH` (noting in `skipped` when not).
#[allow(clippy::too_many_arguments)]
async fn start_runner(
    client: &kube_client::Client,
    dir: &Path,
    namespace: &str,
    install: &str,
    url: &str,
    ca: &Path,
    cluster_kubeconfig: &Path,
    customer_inputs: &Path,
    skipped: &mut Vec<String>,
) -> anyhow::Result<Supervised> {
    let home = dir.join("runner");
    let secrets = home.join("secrets");
    secret_file::private_dir(&secrets)
        .with_context(|| format!("cannot create {}", secrets.display()))?;
    let token = match std::fs::read_to_string(home.join("token")) {
        Ok(token) => token.trim().to_owned(),
        Err(_) => {
            let token = outpost_runner::token::mint(client, namespace, install).await?;
            write_private(&home.join("token"), &token)?;
            println!("outpost: minted the runner token of {namespace}/{install}");
            token
        }
    };
    // The example App declares secret db_password; the customer's secret store is a
    // directory here, with a password generated once.
    if !secrets.join("db_password").exists() {
        write_private(&secrets.join("db_password"), &random_hex(24))?;
    }
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command
        .arg("runner")
        .args(["--server", url, "--certificate-authority"])
        .arg(ca)
        .args([
            "--install",
            &format!("{namespace}/{install}"),
            "--state-dir",
        ])
        .arg(home.join("state"))
        // `DATA-work`, outside the data dir, which is 0700 (tokens, kubeconfigs): a
        // runner run as root runs steps and terraform as uid 65534, which must reach
        // its work dirs.
        .arg("--work-dir")
        .arg(outpost_runner::settings::default_work_dir(dir))
        .arg("--kubeconfig")
        .arg(cluster_kubeconfig)
        .arg("--secrets-dir")
        .arg(&secrets)
        .arg("--customer-inputs")
        .arg(customer_inputs)
        // The customer's trust anchor: `outpost audit verify --key DATA/runner/anchor/public-keys`.
        .arg("--anchor-dir")
        .arg(home.join("anchor"))
        .env("OUTPOST_RUNNER_TOKEN", token)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        );
    match on_path("terraform") {
        Some(terraform) => {
            command.arg("--terraform").arg(terraform);
        }
        None => skipped.push(
            "terraform is not on PATH: the sandbox and the database (terraform modules) cannot be applied"
                .into(),
        ),
    }
    match on_path("bwrap") {
        Some(bwrap) => {
            command.arg("--bwrap").arg(bwrap);
        }
        None => skipped.push(
            "bubblewrap (bwrap) is not on PATH: the migrate action cannot run in its sandbox"
                .into(),
        ),
    }
    let runner = Supervised::spawn(
        "runner",
        command,
        &home.join("runner.log"),
        &home.join("runner.pid"),
    )
    .await?;
    println!(
        "outpost: runner of {namespace}/{install} started (state in {})",
        home.join("state").display()
    );
    Ok(runner)
}

fn random_hex(len: usize) -> String {
    (0..len)
        .map(|_| format!("{:x}", rand::random_range(0..16u8)))
        .collect()
}

/// Writes a line to a file only its owner may read ([`secret_file`]).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    secret_file::write(path, format!("{text}\n"))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The admin token of this data directory, created on first start.
fn admin_tokens(dir: &Path) -> anyhow::Result<(TokenFile, String)> {
    let path = dir.join("tokens.csv");
    if !path.exists() {
        let token = random_hex(32);
        write_private(&path, &format!("{token},admin,admin,\"{ADMINS}\""))?;
    }
    let tokens = TokenFile::read(&path)?;
    let text = std::fs::read_to_string(&path)?;
    let admin = text
        .lines()
        .find(|l| l.contains(ADMINS))
        .and_then(|l| l.split(',').next())
        .with_context(|| format!("{} has no {ADMINS} token", path.display()))?
        .to_owned();
    Ok((tokens, admin))
}

fn write_kubeconfig(
    dir: &Path,
    file: &str,
    url: &str,
    ca_data: &str,
    token: &str,
) -> anyhow::Result<PathBuf> {
    let path = dir.join(file);
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: outpost\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca_data}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: outpost\n  context:\n    cluster: outpost\n    user: admin\n    namespace: default\ncurrent-context: outpost\n"
    );
    secret_file::write(&path, config)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(std::fs::canonicalize(&path)?)
}
