//! How the CLI reaches an Outpost API server: a kubeconfig, or a URL and a token.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Connection flags shared by the commands that talk to an API server.
#[derive(clap::Args, Clone, Debug)]
pub struct Connection {
    /// Kubeconfig of the Outpost API server.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// API server URL, instead of a kubeconfig.
    #[arg(long, requires = "token")]
    pub server: Option<String>,
    /// Bearer token for --server.
    #[arg(long, env = "OUTPOST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM CA certificate of the API server, for --server over HTTPS.
    #[arg(long)]
    pub certificate_authority: Option<PathBuf>,
}

impl Connection {
    /// A client for the configured server.
    pub async fn client(&self) -> anyhow::Result<kube_client::Client> {
        if let Some(server) = &self.server {
            let mut config = kube_client::Config::new(
                server
                    .parse()
                    .with_context(|| format!("--server {server:?} is not a URL"))?,
            );
            config.auth_info.token = self.token.clone().map(Into::into);
            if let Some(ca) = &self.certificate_authority {
                config.root_cert = Some(vec![pem_to_der(ca)?]);
            }
            return Ok(kube_client::Client::try_from(config)?);
        }
        // Like kubectl: the default kubeconfig when none is named.
        let default = std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".kube/config"))
            .filter(|path| path.exists());
        let path = self.kubeconfig.clone().or(default).context(
            "no API server given: pass --server and --token, or --kubeconfig (or set KUBECONFIG)",
        )?;
        from_kubeconfig(&path).await
    }
}

/// A client configured from a kubeconfig file.
pub async fn from_kubeconfig(path: &Path) -> anyhow::Result<kube_client::Client> {
    let file = kube_client::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    let config = kube_client::Config::from_custom_kubeconfig(file, &Default::default()).await?;
    Ok(kube_client::Client::try_from(config)?)
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

/// Flags of the verbs that read or change an install's objects: the connection, the
/// namespace and the output format.
#[derive(clap::Args, Clone, Debug)]
pub struct Common {
    #[command(flatten)]
    pub connection: Connection,
    /// Namespace of the objects; the kubeconfig context's, else `default`.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = crate::output::Format::Table)]
    pub output: crate::output::Format,
}

impl Common {
    /// A client and the namespace to work in.
    pub async fn client(&self) -> anyhow::Result<(kube_client::Client, String)> {
        let client = self.connection.client().await?;
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        Ok((client, namespace))
    }
}

/// Who is acting, as recorded on approvals, denials and requests: `OUTPOST_USER`, else
/// the login name. The API server has no "who am I" endpoint, so this is the operator's
/// claim, next to the API server's own record of the authenticated user.
pub fn operator() -> String {
    ["OUTPOST_USER", "USER", "USERNAME"]
        .into_iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

/// `err` with what to do next when it is the API server refusing the credentials
/// (401), the user (403), or not answering at all.
pub fn explain(err: anyhow::Error) -> anyhow::Error {
    let api = err
        .chain()
        .find_map(|e| e.downcast_ref::<kube_client::Error>());
    let next = match api {
        Some(kube_client::Error::Api(status)) if status.code == 401 => {
            "the API server refused the credentials (401): check --token (or OUTPOST_TOKEN) or the kubeconfig's user; an install's runner token is no operator token".to_owned()
        }
        Some(kube_client::Error::Api(status)) if status.code == 403 => format!(
            "forbidden (403: {}): this needs a user in group outpost:admins (outpost:viewers may only read); ask an admin",
            status.message
        ),
        Some(kube_client::Error::HyperError(_) | kube_client::Error::Service(_)) => {
            "cannot reach the API server: check --server or the kubeconfig's cluster URL, and that `outpost server` runs".to_owned()
        }
        _ => return err,
    };
    err.context(next)
}
