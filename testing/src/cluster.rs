use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::pki::TestCa;
use crate::{EtcdCluster, Kubectl, ThrowawayEtcd};

/// The control plane's serving certificate and the CA clients trust (PEM files).
#[derive(Clone, Debug)]
pub struct ServingCert {
    /// The serving certificate, for `localhost` and `127.0.0.1`.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA certificate clients trust.
    pub ca: PathBuf,
}

impl ServingCert {
    /// A new CA and serving certificate in `dir`.
    fn generate(dir: &Path) -> ServingCert {
        std::fs::create_dir_all(dir).expect("the pki dir");
        let ca = TestCa::new(dir, "outpost test CA");
        let (cert, key) = ca.leaf(dir, "serving", "outpost apiserver");
        ServingCert {
            cert,
            key,
            ca: ca.cert,
        }
    }

    /// The CA certificate, base64-encoded as kubeconfig's `certificate-authority-data`.
    pub fn ca_data(&self) -> String {
        use base64::Engine as _;
        let pem = std::fs::read(&self.ca).expect("the CA file is readable");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }
}

/// Which store a control plane runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store in a temporary directory.
    Embedded,
    /// A throwaway etcd (or the one in `OUTPOST_TEST_ETCD`).
    Etcd,
}

/// The `outpost` binary next to the test executable (`target/<profile>/outpost`).
///
/// # Panics
/// If it has not been built; `./x test` builds it first.
pub fn outpost_binary() -> PathBuf {
    workspace_binary("outpost", "outpost")
}

/// The `outpost-runner` binary (the runner alone) next to the test executable.
///
/// # Panics
/// If it has not been built; `./x test` builds it first.
pub fn runner_binary() -> PathBuf {
    workspace_binary("outpost-runner", "outpost-runner")
}

/// `OUTPOST_TEST_BINARIES=DIR` runs the binaries in DIR instead: for several checkouts
/// sharing one target directory, whose builds replace each other's `target/debug/outpost`.
fn workspace_binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows where it runs from");
    let profile_dir = match std::env::var_os("OUTPOST_TEST_BINARIES") {
        Some(dir) => PathBuf::from(dir),
        None => exe
            .parent()
            .and_then(Path::parent)
            .expect("test binaries live in target/<profile>/deps")
            .to_owned(),
    };
    let binary = profile_dir.join(name);
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build -p {package}` (./x test does)",
        binary.display()
    );
    binary
}

/// A running `outpost server` with an admin and a viewer token. The embedded store
/// keeps only 50 revisions of history, so tests can outlive it.
pub struct ControlPlane {
    child: Child,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The admin's bearer token (group `outpost:admins`).
    pub admin_token: String,
    /// A viewer's bearer token (group `outpost:viewers`).
    pub viewer_token: String,
    /// A token of a user in no group.
    pub nobody_token: String,
    /// An approver's bearer token (group `outpost:approvers`, user `approver`).
    pub approver_token: String,
    /// The CA of the serving certificate.
    pub tls: ServingCert,
    /// The store it runs on.
    pub backend: Backend,
    /// Where clients connect when not to `url`: a [`crate::RecordingProxy`].
    clients_url: Option<String>,
    args: ServerArgs,
    dir: tempfile::TempDir,
    _etcd: Option<ThrowawayEtcd>,
}

struct ServerArgs {
    store: String,
    tokens: PathBuf,
    tls: ServingCert,
    standin_cluster: bool,
    /// More flags of `outpost server` (e.g. `--etcd-cafile`, limits).
    extra: Vec<String>,
}

/// Starts `outpost server` and returns it with the URL it printed.
async fn spawn_server(args: &ServerArgs, listen: &str) -> (Child, String) {
    let mut child = Command::new(outpost_binary())
        .args([
            "server",
            "--listen",
            listen,
            "--store",
            &args.store,
            "--tokens",
        ])
        .arg(&args.tokens)
        .arg("--tls-cert")
        .arg(&args.tls.cert)
        .arg("--tls-key")
        .arg(&args.tls.key)
        // BOOKMARKs every second, unless the caller's flags set their own interval.
        .args(
            (!args.extra.iter().any(|a| a == "--watch-bookmark-seconds"))
                .then_some(["--watch-bookmark-seconds", "1"])
                .into_iter()
                .flatten(),
        )
        .args(["--embedded-history", "50"])
        .args(args.standin_cluster.then_some("--standin-cluster"))
        .args(&args.extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost server starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let url = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        let url = lines.find_map(|line| {
            line.ok()?
                .strip_prefix("outpost: serving on ")
                .map(str::to_owned)
        });
        // Keep draining so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        url
    })
    .await
    .expect("reader thread")
    .expect("outpost server printed its address");
    (child, url)
}

impl ControlPlane {
    /// Starts `outpost server` on `backend`, on a free port, over TLS.
    pub async fn start(backend: Backend) -> ControlPlane {
        Self::start_with(backend, false, &[]).await
    }

    /// Starts `outpost server` on `backend` with more `flags` (limits, timeouts).
    pub async fn start_with_flags(backend: Backend, flags: &[&str]) -> ControlPlane {
        Self::start_with(backend, false, flags).await
    }

    /// Starts `outpost server --standin-cluster` (the common Kubernetes kinds, API
    /// only) on the embedded store: the "cluster" kubernetes components are applied to.
    pub async fn start_standin_cluster() -> ControlPlane {
        Self::start_with(Backend::Embedded, true, &[]).await
    }

    /// [`ControlPlane::start_standin_cluster`] on `backend` (a throwaway etcd for
    /// [`Backend::Etcd`]).
    pub async fn start_standin_cluster_on(backend: Backend) -> ControlPlane {
        Self::start_with(backend, true, &[]).await
    }

    /// [`ControlPlane::start_standin_cluster`] with more `flags` (the EKS token
    /// authenticator's).
    pub async fn start_standin_cluster_with(flags: &[&str]) -> ControlPlane {
        Self::start_with(Backend::Embedded, true, flags).await
    }

    /// Starts `outpost server` on the etcd cluster `etcd` (every member in `--store`),
    /// on a free port, over TLS. [`ControlPlane::start_replica`] adds more replicas.
    pub async fn start_on(etcd: &EtcdCluster) -> ControlPlane {
        let dir = tempfile::tempdir().expect("a temp dir");
        Self::start_in(dir, etcd.store(), Backend::Etcd, None, false, Vec::new()).await
    }

    /// Starts `outpost server --store STORE` (an etcd the test runs itself) with more
    /// flags, e.g. `--etcd-cafile` for an etcd that speaks TLS.
    pub async fn start_on_etcd_with(store: String, flags: Vec<String>) -> ControlPlane {
        let dir = tempfile::tempdir().expect("a temp dir");
        Self::start_in(dir, store, Backend::Etcd, None, false, flags).await
    }

    async fn start_with(backend: Backend, standin_cluster: bool, flags: &[&str]) -> ControlPlane {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (store, etcd) = match backend {
            Backend::Embedded => (
                format!("embedded:{}", dir.path().join("store").display()),
                None,
            ),
            Backend::Etcd => {
                let etcd = ThrowawayEtcd::start().await.expect("etcd starts");
                (etcd.store(), Some(etcd))
            }
        };
        let extra = flags.iter().map(|f| (*f).to_owned()).collect();
        Self::start_in(dir, store, backend, etcd, standin_cluster, extra).await
    }

    async fn start_in(
        dir: tempfile::TempDir,
        store: String,
        backend: Backend,
        etcd: Option<ThrowawayEtcd>,
        standin_cluster: bool,
        extra: Vec<String>,
    ) -> ControlPlane {
        let token = || format!("{:032x}", rand::random::<u128>());
        let (admin_token, viewer_token, nobody_token, approver_token) =
            (token(), token(), token(), token());
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{admin_token},admin,1,\"outpost:admins\"\n{viewer_token},viewer,2,\"outpost:viewers\"\n{nobody_token},nobody,3\n{approver_token},approver,4,\"outpost:approvers\"\n"
            ),
        )
        .expect("token file written");
        let tls = ServingCert::generate(&dir.path().join("pki"));
        let args = ServerArgs {
            store,
            tokens,
            tls: tls.clone(),
            standin_cluster,
            extra,
        };
        let (child, url) = spawn_server(&args, "127.0.0.1:0").await;
        ControlPlane {
            child,
            url,
            args,
            admin_token,
            viewer_token,
            nobody_token,
            approver_token,
            tls,
            backend,
            clients_url: None,
            dir,
            _etcd: etcd,
        }
    }

    /// Another `outpost server` on the same store, with the same tokens and serving
    /// certificate, on a port of its own: a replica, with a watch cache of its own.
    /// Its files are copied into a temp dir of its own, so it outlives this one.
    pub async fn start_replica(&self) -> ControlPlane {
        let dir = tempfile::tempdir().expect("a temp dir");
        let tokens = dir.path().join("tokens.csv");
        std::fs::copy(&self.args.tokens, &tokens).expect("token file copied");
        let pki = dir.path().join("pki");
        std::fs::create_dir(&pki).expect("pki dir");
        let copy = |file: &Path| {
            let to = pki.join(file.file_name().expect("a file name"));
            std::fs::copy(file, &to).expect("certificate copied");
            to
        };
        let tls = ServingCert {
            cert: copy(&self.tls.cert),
            key: copy(&self.tls.key),
            ca: copy(&self.tls.ca),
        };
        let args = ServerArgs {
            store: self.args.store.clone(),
            tokens,
            tls: tls.clone(),
            standin_cluster: self.args.standin_cluster,
            extra: self.args.extra.clone(),
        };
        let (child, url) = spawn_server(&args, "127.0.0.1:0").await;
        ControlPlane {
            child,
            url,
            args,
            admin_token: self.admin_token.clone(),
            viewer_token: self.viewer_token.clone(),
            nobody_token: self.nobody_token.clone(),
            approver_token: self.approver_token.clone(),
            tls,
            backend: self.backend,
            clients_url: None,
            dir,
            _etcd: None,
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same port and store; its
    /// watch caches start afresh, so watches from before the restart get 410.
    pub async fn restart(&mut self) {
        self.stop();
        self.start_again().await;
    }

    /// The server's `--store` (`embedded:DIR` or `etcd://HOST:PORT,...`): where a test
    /// opens the store directly, going around the API (`outpost_e2e::EditStore`).
    pub fn store(&self) -> &str {
        &self.args.store
    }

    /// Stops the server (SIGKILL); [`ControlPlane::start_again`] brings it back.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a stopped server again on the same port and store.
    pub async fn start_again(&mut self) {
        let listen = self.url.trim_start_matches("https://").to_owned();
        let (child, url) = spawn_server(&self.args, &listen).await;
        assert_eq!(url, self.url, "the server came back on the same address");
        self.child = child;
    }

    /// Starts an `outpost controllers` replica as the admin, named `identity`; it stops
    /// (SIGKILL) when the returned process is dropped.
    pub fn start_controllers(&self, identity: &str) -> Process {
        self.start_controllers_with_lease(identity, 15)
    }

    /// [`ControlPlane::start_controllers`] with a leader-election lease of
    /// `lease_seconds`: how long the other replicas wait for a killed leader.
    pub fn start_controllers_with_lease(&self, identity: &str, lease_seconds: u64) -> Process {
        self.start_controllers_publishing(identity, lease_seconds, &self.url)
    }

    /// [`ControlPlane::start_controllers_with_lease`] writing `public_url` (one URL or
    /// several, comma-separated) into install stacks as the address runners dial.
    pub fn start_controllers_publishing(
        &self,
        identity: &str,
        lease_seconds: u64,
        public_url: &str,
    ) -> Process {
        let child = Command::new(outpost_binary())
            .args([
                "controllers",
                "--identity",
                identity,
                "--lease-seconds",
                &lease_seconds.to_string(),
                "--public-url",
                public_url,
                "--kubeconfig",
            ])
            .arg(self.kubeconfig(&self.admin_token))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("outpost controllers starts");
        Process(child)
    }

    /// `outpost runner` for install `default/install` dialling this control plane with
    /// `token`, trusting its CA, its state in `state`, a heartbeat every second, its
    /// warnings on the test's stderr: a runner stand. The caller adds what its test needs
    /// (`--kubeconfig`, `--terraform`, ...) and spawns it.
    pub fn runner(&self, install: &str, token: &str, state: &Path) -> Command {
        let mut command = Command::new(outpost_binary());
        command
            .args(["runner", "--server", &self.url, "--certificate-authority"])
            .arg(&self.tls.ca)
            .args(["--install", &format!("default/{install}"), "--state-dir"])
            .arg(state)
            .args(["--heartbeat-seconds", "1"])
            .env("OUTPOST_RUNNER_TOKEN", token)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        command
    }

    /// Mints the runner token of `install` (`NAMESPACE/NAME`) with `outpost token`, as an
    /// admin would, and returns it.
    pub fn mint_runner_token(&self, install: &str) -> String {
        let output = Command::new(outpost_binary())
            .args(["token", install, "--kubeconfig"])
            .arg(self.kubeconfig(&self.admin_token))
            .output()
            .expect("outpost token runs");
        assert!(
            output.status.success(),
            "outpost token {install}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// A kubeconfig for `token`, written into the control plane's temp dir.
    pub fn kubeconfig(&self, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("kubeconfig-{}", &token[..8]));
        let ca = self.tls.ca_data();
        // Written aside and renamed: a process reading the kubeconfig (a controller
        // replica starting) never sees it half rewritten.
        let partial = tempfile::NamedTempFile::new_in(self.dir.path()).expect("a temp file");
        std::fs::write(
            partial.path(),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: outpost\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: outpost\n  context:\n    cluster: outpost\n    user: u\n    namespace: default\ncurrent-context: outpost\n",
                self.clients_url()
            ),
        )
        .expect("kubeconfig written");
        partial
            .persist(&path)
            .expect("kubeconfig renamed into place");
        path
    }

    /// Sends every client made from now on (kubeconfigs, kubectl, kube-rs clients,
    /// controllers) to `url` instead of the server: a [`crate::RecordingProxy`] in
    /// front of it.
    pub fn route_clients_through(&mut self, url: &str) {
        self.clients_url = Some(url.to_owned());
    }

    /// The URL clients connect to: the server's, or the one set by
    /// [`ControlPlane::route_clients_through`].
    pub fn clients_url(&self) -> &str {
        self.clients_url.as_deref().unwrap_or(&self.url)
    }

    /// `kubectl` as the admin.
    pub fn kubectl(&self) -> Kubectl {
        Kubectl::new(self.kubeconfig(&self.admin_token), self.dir.path())
    }

    /// `kubectl` as `token`'s user.
    pub fn kubectl_as(&self, token: &str) -> Kubectl {
        Kubectl::new(self.kubeconfig(token), self.dir.path())
    }

    /// A kube-rs client as `token`'s user.
    pub async fn client_as(&self, token: &str) -> kube_client::Client {
        kube_client::Client::try_from(self.client_config_as(token).await).expect("client")
    }

    /// The kube-rs client configuration of `token`'s user.
    pub(crate) async fn client_config_as(&self, token: &str) -> kube_client::Config {
        let file =
            kube_client::config::Kubeconfig::read_from(self.kubeconfig(token)).expect("kubeconfig");
        kube_client::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("client config")
    }

    /// A kube-rs client as the admin.
    pub async fn client(&self) -> kube_client::Client {
        self.client_as(&self.admin_token).await
    }

    /// Stops (SIGKILL) and removes the control plane's etcd, leaving the server running
    /// cut off from its store.
    ///
    /// # Panics
    /// If the control plane does not run on etcd.
    pub fn stop_etcd(&mut self) {
        assert!(
            self._etcd.take().is_some(),
            "stop_etcd needs a control plane on Backend::Etcd"
        );
    }

    /// The etcd endpoint, when the control plane runs on etcd.
    pub fn etcd_endpoint(&self) -> Option<&str> {
        self._etcd.as_ref().map(ThrowawayEtcd::endpoint)
    }

    /// A scratch directory that lives as long as the control plane.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

/// A child process killed (SIGKILL) when dropped.
pub struct Process(Child);

impl Process {
    /// Takes ownership of a started child process.
    pub fn new(child: Child) -> Self {
        Self(child)
    }

    /// Whether the process is still running (it has not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// Kills the process now.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
