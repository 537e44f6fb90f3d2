//! `outpost token NS/INSTALL`: mint the install's runner token.

use anyhow::Context as _;
use serde_json::Value;

use crate::client::Connection;

/// Arguments of `outpost token`.
#[derive(clap::Args)]
pub struct TokenArgs {
    /// The install, as NAMESPACE/NAME (or NAME in namespace `default`).
    install: String,
    #[command(flatten)]
    connection: Connection,
}

/// Mints a token (admins only) and prints it on standard output.
pub async fn run(args: TokenArgs) -> anyhow::Result<()> {
    let (namespace, name) = args
        .install
        .split_once('/')
        .unwrap_or(("default", args.install.as_str()));
    let client = args.connection.client().await?;
    println!("{}", mint(&client, namespace, name).await?);
    Ok(())
}

/// Mints a new runner token for install `namespace/name` (rotating any previous one).
pub async fn mint(
    client: &kube_client::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    let request = http::Request::post(format!(
        "/apis/outpost.dev/v1alpha1/namespaces/{namespace}/installs/{name}/token"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(b"{}".to_vec())?;
    let answer: Value = client
        .request(request)
        .await
        .with_context(|| format!("cannot mint a runner token for install {namespace}/{name}"))?;
    let token = answer
        .get("token")
        .and_then(Value::as_str)
        .context("the API server answered without a token")?;
    Ok(token.to_owned())
}
