//! `outpost audit verify NS/INSTALL [--local DIR]`: checks an install's audit log —
//! order, hash chain, signatures against the registered Runner keys, gaps — and names
//! every event that fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::{AuditEvent, Runner};
use outpost_runner::audit::{Source, read_local, verify};

use crate::client::Connection;

/// Audit verbs.
#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// Verify an install's audit log. Prints "N events verified" (exit 0), or one line
    /// per failing event and why (exit 1).
    Verify {
        /// The install, as NAMESPACE/NAME (or NAME in namespace `default`).
        install: String,
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
        local,
        connection,
    } = command;
    let (namespace, name) = install.split_once('/').unwrap_or(("default", &install));
    let client = connection.client().await?;
    let keys: BTreeMap<String, String> = Api::<Runner>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("spec.install={name}")))
        .await
        .with_context(|| format!("cannot read the runners of {namespace}/{name}"))?
        .items
        .into_iter()
        .map(|r| (r.name_any(), r.spec.public_key))
        .collect();
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
