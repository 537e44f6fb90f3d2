//! `outpost stack NS/INSTALL`: print an install's CloudFormation install stack, for the
//! customer to create (`aws cloudformation create-stack --template-body file://stack.json`).

use anyhow::Context as _;
use kube_client::api::Api;
use outpost_api::InstallStack;

use crate::client::Connection;

/// Arguments of `outpost stack`.
#[derive(clap::Args)]
pub struct StackArgs {
    /// The install, as NAMESPACE/NAME, or NAME in `-n`'s namespace (else the kubeconfig
    /// context's, else `default`).
    install: String,
    /// Namespace of the install, when INSTALL is a bare name.
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    connection: Connection,
}

/// Prints the rendered template as JSON on standard output.
pub async fn run(args: StackArgs) -> anyhow::Result<()> {
    let client = args.connection.client().await?;
    let fallback = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let (namespace, name) = args
        .install
        .split_once('/')
        .unwrap_or((fallback.as_str(), args.install.as_str()));
    let stack = Api::<InstallStack>::namespaced(client, namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read the install stack of {namespace}/{name}"))?
        .with_context(|| {
            format!(
                "install {namespace}/{name} has no stack yet: check that it exists (kubectl get install {name} -n {namespace}) and that `outpost controllers` is running"
            )
        })?;
    println!("{}", serde_json::to_string_pretty(&stack.spec.template)?);
    Ok(())
}
