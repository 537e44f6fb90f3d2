//! `outpost audit verify NS/INSTALL (--key FILE | --trust-control-plane) [--checkpoint
//! FILE] [--local DIR]`: checks an install's audit log — order, hash chain, signatures,
//! gaps, key changes, the runner's newest checkpoint — and names every event that fails.
//!
//! The keys it trusts come from the customer's side (`--key`: the runner's anchor
//! `public-keys`), or, only when told to, from the vendor's control plane.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::audit_anchor::{CHECKPOINT_FILE, Checkpoint, fingerprint, parse_keys};
use outpost_api::audit_chain::{Failure, Trust, Verified};
use outpost_api::{AuditEvent, Install, Runner};
use outpost_runner::audit::{Source, read_local, verify};

use crate::client::Connection;

/// Audit verbs.
#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// Verify an install's audit log against the customer's trust anchor. Prints "N
    /// events verified" (exit 0); with a `key-reset` in the chain, a "FLAGGED" line per
    /// reset for the customer to confirm and exit 3; or one line per failing event and
    /// why (exit 1).
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
        /// The runner's public keys as the customer holds them: its anchor dir's
        /// `public-keys` (one base64 key a line). Repeatable.
        #[arg(long = "key", value_name = "FILE")]
        keys: Vec<PathBuf>,
        /// The runner's newest signed checkpoint (`checkpoint.json` of its anchor dir);
        /// by default the one next to the first `--key` file, when there is one.
        #[arg(long, value_name = "FILE")]
        checkpoint: Option<PathBuf>,
        /// Trust the public keys of the `Runner` objects in the control plane, which the
        /// vendor (or a runner token) can rewrite. Prints a warning.
        #[arg(long, conflicts_with = "keys")]
        trust_control_plane: bool,
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
        keys: key_files,
        checkpoint,
        trust_control_plane,
        connection,
    } = command;
    if key_files.is_empty() && !trust_control_plane {
        anyhow::bail!(
            "no trust anchor: give --key FILE, the runner's public keys as the customer holds them \
             (public-keys in the runner's --anchor-dir), or --trust-control-plane to trust the \
             keys the vendor's control plane registers (which the vendor can rewrite)"
        );
    }
    let mut anchor = read_anchor(&key_files, checkpoint.as_deref())?;
    let client = connection.client().await?;
    let fallback = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let (namespace, name) = install
        .split_once('/')
        .unwrap_or((fallback.as_str(), &install));
    let registered: Vec<(String, String)> = Api::<Runner>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("spec.install={name}")))
        .await
        .with_context(|| format!("cannot read the runners of {namespace}/{name}"))?
        .items
        .into_iter()
        .map(|r| (r.name_any(), r.spec.public_key))
        .collect();
    // An unknown install (and no runner left of it) has no events either: say so rather
    // than "0 events verified".
    if registered.is_empty()
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
    if trust_control_plane {
        anchor.trusted = registered.iter().map(|(_, key)| key.clone()).collect();
        eprintln!(
            "warning: trusting the public keys of the control plane's Runner objects, which the \
             vendor (or a runner token) can rewrite; verify with --key (the runner's anchor \
             public-keys) to hold the trust anchor yourself"
        );
    } else if anchor.checkpoint.is_none() {
        eprintln!(
            "warning: no checkpoint (--checkpoint, or checkpoint.json next to --key): events cut \
             from the end of the log cannot be detected"
        );
    }
    let result = match &local {
        Some(dir) => {
            let events = read_local(dir)
                .with_context(|| format!("cannot read the local audit log in {}", dir.display()))?;
            verify(name, &events, Source::Local, &anchor.trust())
        }
        None => {
            let objects = Api::<AuditEvent>::namespaced(client, namespace)
                .list(&ListParams::default().fields(&format!("spec.install={name}")))
                .await
                .with_context(|| format!("cannot read the audit events of {namespace}/{name}"))?
                .items;
            let names: Vec<String> = objects.iter().map(|e| e.name_any()).collect();
            let events: Vec<_> = objects.into_iter().map(|e| e.spec).collect();
            verify(name, &events, Source::Objects(&names), &anchor.trust())
        }
    };
    // A Runner key in the control plane that the customer does not hold: swapped.
    let swapped: Vec<Failure> = match &anchor.keys {
        Some(_) => registered
            .iter()
            .filter(|(_, key)| !anchor.trusted.contains(key))
            .map(|(runner, key)| Failure {
                event: format!("runner {runner}"),
                reason: format!(
                    "the control plane's Runner object has public key {}, which is not among the customer's keys ({}): swapped",
                    fingerprint(key),
                    anchor.trusted.iter().map(|k| fingerprint(k)).collect::<Vec<_>>().join(", ")
                ),
            })
            .collect(),
        None => Vec::new(),
    };
    let result = match (result, swapped.is_empty()) {
        (Ok(verified), true) => Ok(verified),
        (Ok(_), false) => Err(swapped),
        (Err(failures), _) => Err(failures.into_iter().chain(swapped).collect()),
    };
    match result {
        Ok(Verified { events, flags }) if flags.is_empty() => {
            println!("{events} events verified");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Verified { events, flags }) => {
            for flag in &flags {
                println!("FLAGGED {flag}");
            }
            println!(
                "{events} events verified, {} flagged for the customer to confirm",
                flags.len()
            );
            Ok(ExitCode::from(FLAGGED))
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

/// Exit status of a log that verifies with events the customer must confirm.
pub const FLAGGED: u8 = 3;

/// What the verification trusts.
struct Anchor {
    /// The customer's keys (`--key`); `None` with `--trust-control-plane`.
    keys: Option<Vec<String>>,
    /// The keys verification uses.
    trusted: Vec<String>,
    checkpoint: Option<Checkpoint>,
}

impl Anchor {
    fn trust(&self) -> Trust<'_> {
        Trust {
            keys: &self.trusted,
            checkpoint: self.checkpoint.as_ref(),
        }
    }
}

/// Reads the `--key` files and the checkpoint (given, or next to the first key file).
fn read_anchor(key_files: &[PathBuf], checkpoint: Option<&Path>) -> anyhow::Result<Anchor> {
    let mut keys = Vec::new();
    for file in key_files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the key file {}", file.display()))?;
        let read = parse_keys(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        anyhow::ensure!(!read.is_empty(), "{} holds no public key", file.display());
        keys.extend(read);
    }
    let default = key_files
        .first()
        .and_then(|f| f.parent())
        .map(|dir| dir.join(CHECKPOINT_FILE))
        .filter(|path| path.exists());
    let checkpoint = match checkpoint.map(Path::to_owned).or(default) {
        Some(path) => {
            let bytes = std::fs::read(&path)
                .with_context(|| format!("cannot read the checkpoint {}", path.display()))?;
            Some(
                serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not a checkpoint", path.display()))?,
            )
        }
        None => None,
    };
    Ok(Anchor {
        trusted: keys.clone(),
        keys: (!key_files.is_empty()).then_some(keys),
        checkpoint,
    })
}
