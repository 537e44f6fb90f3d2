//! `outpost audit verify NS/INSTALL (--key FILE | --stack NAME | --trust-control-plane)
//! [--checkpoint FILE] [--local DIR]`: checks an install's audit log — order, hash chain, signatures,
//! gaps, key changes, the runner's newest checkpoint — and names every event that fails.
//!
//! The keys it trusts come from the customer's side (`--key`: the runner's anchor
//! `public-keys`; `--stack`: the install stack's SSM parameters in the customer's AWS
//! account), or, only when told to, from the vendor's control plane.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use kube_client::ResourceExt as _;
use kube_client::api::{Api, ListParams};
use outpost_api::audit_anchor::{
    CHECKPOINT_FILE, Checkpoint, KeyAccount, account_for_keys, fingerprint, parse_keys,
};
use outpost_api::audit_chain::{Failure, Trust, Verified};
use outpost_api::{AuditEvent, Install, Runner};
use outpost_runner::audit::{Source, read_local, verify};
use outpost_runner::aws::anchor_parameters::{PublishedAnchor, read_published};

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
        /// The install stack in the customer's AWS account: the runner's keys come from
        /// its SSM parameter's whole version history (every key must be accounted for by
        /// a `key-rotation` or `key-reset` in the log) and the checkpoint from its
        /// checkpoint parameter. Credentials: the default AWS chain.
        #[arg(long, value_name = "NAME", conflicts_with_all = ["keys", "trust_control_plane"])]
        stack: Option<String>,
        /// AWS region of `--stack`; the default chain's region when omitted.
        #[arg(long, requires = "stack")]
        region: Option<String>,
        /// Endpoint of the AWS APIs, for an emulator; the real regional endpoints when
        /// omitted.
        #[arg(long, requires = "stack")]
        aws_endpoint: Option<String>,
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
        stack,
        region,
        aws_endpoint,
        connection,
    } = command;
    if key_files.is_empty() && !trust_control_plane && stack.is_none() {
        anyhow::bail!(
            "no trust anchor: give --key FILE, the runner's public keys as the customer holds them \
             (public-keys in the runner's --anchor-dir), --stack NAME, the install stack whose SSM \
             parameters the runner publishes its keys and checkpoints to, or --trust-control-plane \
             to trust the keys the vendor's control plane registers (which the vendor can rewrite)"
        );
    }
    let mut anchor = read_anchor(&key_files, checkpoint.as_deref())?;
    let published = match &stack {
        Some(stack) => {
            let config = outpost_runner::aws::sdk_config(region, aws_endpoint).await?;
            Some(
                read_published(&config, stack)
                    .await
                    .with_context(|| format!("cannot read the audit anchor of stack {stack}"))?,
            )
        }
        None => None,
    };
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
    } else if anchor.checkpoint.is_none()
        && published.as_ref().is_none_or(|p| p.checkpoint.is_none())
    {
        eprintln!(
            "warning: no checkpoint (--checkpoint, checkpoint.json next to --key, or the stack's \
             checkpoint parameter): events cut from the end of the log cannot be detected"
        );
    }
    let (events, names) = match &local {
        Some(dir) => {
            let events = read_local(dir)
                .with_context(|| format!("cannot read the local audit log in {}", dir.display()))?;
            (events, None)
        }
        None => {
            let objects = Api::<AuditEvent>::namespaced(client, namespace)
                .list(&ListParams::default().fields(&format!("spec.install={name}")))
                .await
                .with_context(|| format!("cannot read the audit events of {namespace}/{name}"))?
                .items;
            let names: Vec<String> = objects.iter().map(|e| e.name_any()).collect();
            (objects.into_iter().map(|e| e.spec).collect(), Some(names))
        }
    };
    let mut unaccounted = Vec::new();
    if let Some(published) = published {
        unaccounted = from_stack(&mut anchor, published, &events, checkpoint.is_some());
    }
    let source = match &names {
        Some(names) => Source::Objects(names),
        None => Source::Local,
    };
    let result = verify(name, &events, source, &anchor.trust());
    let result = match result {
        Ok(verified) if unaccounted.is_empty() => Ok(verified),
        Ok(_) => Err(unaccounted),
        Err(failures) => Err(failures.into_iter().chain(unaccounted).collect()),
    };
    // A Runner key in the control plane that the customer does not hold: swapped.
    let swapped: Vec<Failure> = match &anchor.keys {
        Some(customer) => registered
            .iter()
            .filter(|(_, key)| !customer.contains(key))
            .map(|(runner, key)| Failure {
                event: format!("runner {runner}"),
                reason: format!(
                    "the control plane's Runner object has public key {}, which is not among the customer's keys ({}): swapped",
                    fingerprint(key),
                    customer.iter().map(|k| fingerprint(k)).collect::<Vec<_>>().join(", ")
                ),
            })
            .collect(),
        None => Vec::new(),
    };
    // The log verifies without the control plane's key, so a swapped one does not fail
    // it; it is named, and among the failures when the log fails too.
    let result = match (result, swapped.is_empty()) {
        (Ok(verified), true) => Ok(verified),
        (Ok(verified), false) => {
            for failure in &swapped {
                eprintln!("warning: {failure}");
            }
            Ok(verified)
        }
        (Err(failures), _) => Err(failures.into_iter().chain(swapped).collect::<Vec<_>>()),
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

/// Takes the trust anchor from the customer's stack: the keys of its key parameter's
/// history, each accounted for by the log (printed), and its checkpoint unless
/// `--checkpoint` was given. Returns the keys nothing accounts for, as failures.
fn from_stack(
    anchor: &mut Anchor,
    published: PublishedAnchor,
    events: &[outpost_api::AuditEventSpec],
    checkpoint_given: bool,
) -> Vec<Failure> {
    if !checkpoint_given {
        anchor.checkpoint = published.checkpoint;
    }
    let parameter = &published.key_parameter;
    let all: Vec<String> = published.keys.iter().map(|k| k.value.clone()).collect();
    // The customer holds every key the parameter held; the control plane's Runner key
    // must be one of them.
    anchor.keys = Some(all.clone());
    anchor.trusted = all;
    match account_for_keys(parameter, &published.keys, events) {
        Ok(accounts) => {
            // Trusted to sign: the first key and reset keys (flagged by verification).
            // A rotated-to key is trusted only after the rotation its predecessor signed.
            anchor.trusted = Vec::new();
            for (key, account) in &accounts {
                let how = match account {
                    KeyAccount::First => "the runner's first key".to_owned(),
                    KeyAccount::Rotation(seq) => {
                        format!("vouched for by the key-rotation at sequence {seq}")
                    }
                    KeyAccount::Reset(seq) => {
                        format!("announced by the key-reset at sequence {seq}")
                    }
                };
                println!(
                    "key {parameter} version {}: {} written {} by {}: {how}",
                    key.version,
                    fingerprint(&key.value),
                    key.modified,
                    key.by
                );
                if !matches!(account, KeyAccount::Rotation(_)) {
                    anchor.trusted.push(key.value.clone());
                }
            }
            Vec::new()
        }
        Err(failures) => failures,
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
