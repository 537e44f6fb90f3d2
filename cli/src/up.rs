//! `outpost up`: everything on one machine, on the embedded store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use outpost_apiserver::auth::{ADMINS, TokenFile};
use outpost_apiserver::registry::Registry;
use outpost_apiserver::server::{ApiServer, ServerConfig};
use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore};
use outpost_apiserver::tls::SelfSigned;

use outpost_controllers::leader::Election;
use outpost_controllers::run::{all_controllers, run_while_leader};

use crate::manifests;
use crate::server::shutdown_signal;

/// Arguments of `outpost up`.
#[derive(clap::Args)]
pub struct UpArgs {
    /// Where Outpost keeps its state; a second run resumes from it.
    #[arg(long, default_value = ".outpost", env = "OUTPOST_DATA_DIR")]
    data_dir: PathBuf,
    /// Address of the API server.
    #[arg(long, default_value = "127.0.0.1:8844")]
    listen: SocketAddr,
    /// Manifests applied at start (server-side apply, into namespace `default`).
    #[arg(long, default_value = "manifests")]
    manifests: PathBuf,
}

/// Starts the API server on the embedded store, applies the manifests, prints how to
/// connect, and runs until Ctrl-C.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let store_dir = args.data_dir.join("store");
    let store = EmbeddedStore::open(&store_dir, EmbeddedOptions::default())
        .await
        .with_context(|| format!("cannot open the embedded store in {}", store_dir.display()))?;
    println!(
        "outpost: embedded store ready at {}",
        store.path().display()
    );
    let (tokens, admin_token) = admin_tokens(&args.data_dir)?;
    let server = ApiServer::new(std::sync::Arc::new(store), ServerConfig::outpost(tokens)).await?;
    let listener = std::net::TcpListener::bind(args.listen).with_context(|| {
        format!(
            "cannot listen on {} (pass --listen to choose another address)",
            args.listen
        )
    })?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    // kubectl sends tokens only over TLS: serve HTTPS with a local CA kept in the data dir.
    let tls = SelfSigned::ensure(&args.data_dir.join("pki"))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (cert, key) = (tls.cert.clone(), tls.key.clone());
    let serving = tokio::spawn(async move {
        server
            .serve_tls(listener, &cert, &key, async {
                let _ = stopped.await;
            })
            .await
    });
    let url = format!("https://{address}");
    let kubeconfig = write_kubeconfig(&args.data_dir, &url, &tls.ca_data()?, &admin_token)?;

    if args.manifests.is_dir() {
        let documents = manifests::read_dir(&args.manifests)?;
        let client = crate::client::from_kubeconfig(&kubeconfig).await?;
        let applied = manifests::apply(
            &client,
            &Registry::outpost(),
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
        let client = crate::client::from_kubeconfig(&kubeconfig).await?;
        let election = Election::new(
            "default",
            "outpost-controllers",
            &crate::controllers::default_identity(),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run_while_leader(
            client,
            election,
            all_controllers(url.clone()),
            async {
                let _ = stopped.await;
            },
        ));
        (stop, task)
    };
    println!("outpost: controllers running");
    println!("outpost: API server at {url}");
    println!("outpost: admin token {admin_token}");
    println!(
        "outpost: kubeconfig {}  (export KUBECONFIG={0})",
        kubeconfig.display()
    );
    println!("outpost: press Ctrl-C to stop");
    shutdown_signal().await;
    let _ = controllers.0.send(());
    let _ = controllers.1.await;
    let _ = stop.send(());
    serving.await??;
    println!("outpost: stopped");
    Ok(())
}

/// The admin token of this data directory, created on first start.
fn admin_tokens(dir: &Path) -> anyhow::Result<(TokenFile, String)> {
    let path = dir.join("tokens.csv");
    if !path.exists() {
        let token: String = (0..32)
            .map(|_| format!("{:x}", rand::random_range(0..16u8)))
            .collect();
        std::fs::write(&path, format!("{token},admin,admin,\"{ADMINS}\"\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
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

fn write_kubeconfig(dir: &Path, url: &str, ca_data: &str, token: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: outpost\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca_data}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: outpost\n  context:\n    cluster: outpost\n    user: admin\n    namespace: default\ncurrent-context: outpost\n"
    );
    std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(std::fs::canonicalize(&path)?)
}
