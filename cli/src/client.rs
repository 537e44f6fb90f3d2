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
        let path = self.kubeconfig.clone().context(
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
