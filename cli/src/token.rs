//! `outpost token NS/INSTALL`: mint the install's runner token.

use outpost_runner::token::mint;

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
