//! `outpost audit verify NS/INSTALL [--local DIR]`: checks an install's audit log —
//! order, hash chain, signatures against the registered Runner keys, gaps — and names
//! every event that fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::{AuditEvent, Install, Runner};
use outpost_runner::audit::{Source, read_local, verify};

use crate::client::Connection;

/// Audit verbs.
#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// Verify an install's audit log. Prints "N events verified" (exit 0), or one line
    /// per failing event and why (exit 1).
    Verify {
        /// The install, as NAMESPACE/NAME, or NAME in `-n`'s namespace (else the
        /// kubeconfig context's, else `default`).
        install: String,
        /// Namespace of the install, when INSTALL is a bare name.
        #[arg(short, long)]
        namespace: Option<String>,
        /// Verify the runner's local copy in this state dir instead of the shipped
        /// AuditEvents (keys still come from the registered Runners).
        #[arg(long)]
        local: Option<PathBuf>,
        #[command(flatten)]
        connection: Connection,
    },
}

/// Runs an audit verb; the exit code is the verdict.
pub async fn run(command: AuditCommand) -> anyhow::Result<ExitCode> {
    let AuditCommand::Verify {
        install,
        namespace,
        local,
        connection,
    } = command;
    let client = connection.client().await?;
    let fallback = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let (namespace, name) = install
        .split_once('/')
        .unwrap_or((fallback.as_str(), &install));
    let keys: BTreeMap<String, String> = Api::<Runner>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("spec.install={name}")))
        .await
        .with_context(|| format!("cannot read the runners of {namespace}/{name}"))?
        .items
        .into_iter()
        .map(|r| (r.name_any(), r.spec.public_key))
        .collect();
    // An unknown install (and no runner left of it) has no events either: say so rather
    // than "0 events verified".
    if keys.is_empty()
        && Api::<Install>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .with_context(|| format!("cannot read install {namespace}/{name}"))?
            .is_none()
    {
        anyhow::bail!(
            "install {namespace}/{name} not found: list installs with `outpost status -n {namespace}` (or `outpost status -A`)"
        );
    }
    let result = match &local {
        Some(dir) => {
            let events = read_local(dir)
                .with_context(|| format!("cannot read the local audit log in {}", dir.display()))?;
            verify(name, &events, Source::Local, &keys)
        }
        None => {
            let objects = Api::<AuditEvent>::namespaced(client, namespace)
                .list(&ListParams::default().fields(&format!("spec.install={name}")))
                .await
                .with_context(|| format!("cannot read the audit events of {namespace}/{name}"))?
                .items;
            let names: Vec<String> = objects.iter().map(|e| e.name_any()).collect();
            let events: Vec<_> = objects.into_iter().map(|e| e.spec).collect();
            verify(name, &events, Source::Objects(&names), &keys)
        }
    };
    match result {
        Ok(count) => {
            println!("{count} events verified");
            Ok(ExitCode::SUCCESS)
        }
        Err(failures) => {
            for failure in &failures {
                println!("{failure}");
            }
            println!(
                "audit log of {namespace}/{name} does not verify: {} failure(s)",
                failures.len()
            );
            Ok(ExitCode::from(1))
        }
    }
}
