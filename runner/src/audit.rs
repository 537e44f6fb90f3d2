//! The audit log: every runner step is an [`AuditEventSpec`] with a sequence number,
//! the hash of the previous event and an ed25519 signature by the runner's key.
//!
//! * `hash` is [`outpost_api::content_hash`] (SHA-256 over canonical JSON, keys sorted)
//!   of the event's spec without `hash` and `signature`, so it covers `previousHash`
//!   and chains the events.
//! * `signature` is the runner key's signature over the UTF-8 bytes of `hash`.
//!
//! The runner appends each event to `audit.jsonl` in its state dir (fsync'd) before it
//! ships it as the object `<install>-<sequence>`; [`verify`] checks a log read from
//! either place.

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::{AuditEventSpec, AuditEventType, EntityRef};
use serde_json::Value;

pub use outpost_api::audit_chain::{Failure, Source, event_hash, verify};

use crate::identity::Identity;

/// File name of the runner's copy of the audit log in the state dir.
pub const AUDIT_FILE: &str = "audit.jsonl";

/// What one event is about, besides its type.
#[derive(Clone, Debug, Default)]
pub struct Subject {
    /// The Plan.
    pub plan: Option<String>,
    /// The entity.
    pub entity: Option<EntityRef>,
    /// The role (rendered).
    pub role: Option<String>,
}

/// The runner's audit log: its local copy and the chain's head.
pub struct AuditLog {
    install: String,
    runner: String,
    identity: Arc<Identity>,
    path: PathBuf,
    file: File,
    events: Vec<AuditEventSpec>,
    /// Sequence of the first event of the local copy: 0, or where a runner that lost
    /// its state dir continued the chain ([`AuditLog::continue_after`]).
    base: u64,
    /// The hash the first event links to when the local copy continues a chain.
    continues: Option<String>,
}

impl AuditLog {
    /// Opens the local copy in `dir` (created when missing) and continues its chain.
    pub fn open(
        dir: &Path,
        install: &str,
        runner: &str,
        identity: Arc<Identity>,
    ) -> anyhow::Result<Self> {
        let path = dir.join(AUDIT_FILE);
        let (events, torn) = read_lines(&path)?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        if torn {
            // A line cut by a crash before its fsync: nothing was shipped from it.
            file.write_all(b"\n")?;
        }
        Ok(Self {
            install: install.to_owned(),
            runner: runner.to_owned(),
            identity,
            path,
            file,
            base: events.first().map_or(0, |e| e.sequence),
            continues: events.first().and_then(|e| e.previous_hash.clone()),
            events,
        })
    }

    /// Continues the chain after `head` (the newest event the control plane holds) when
    /// the local copy is empty: a runner that lost its state dir. Its next event must be
    /// the `key-reset` that says so.
    pub fn continue_after(&mut self, head: &AuditEventSpec) {
        assert!(
            self.events.is_empty(),
            "only an empty local audit log continues another's chain"
        );
        self.base = head.sequence + 1;
        self.continues = Some(head.hash.clone());
    }

    /// Records a `key-rotation` naming `next`'s public key, signed by the current key,
    /// and signs with `next` from then on ([`crate::rotation`]).
    pub fn rotate(&mut self, next: Arc<Identity>) -> anyhow::Result<AuditEventSpec> {
        let details = serde_json::json!({
            "previousPublicKey": self.identity.public_key(),
            "newPublicKey": next.public_key(),
        });
        let event = self.append(
            AuditEventType::KeyRotation,
            Subject::default(),
            Some(details),
        )?;
        self.identity = next;
        Ok(event)
    }

    /// The newest event, if any.
    pub fn head(&self) -> Option<&AuditEventSpec> {
        self.events.last()
    }

    /// Appends one signed event to the local copy (fsync'd) and returns it.
    pub fn append(
        &mut self,
        type_: AuditEventType,
        subject: Subject,
        details: Option<Value>,
    ) -> anyhow::Result<AuditEventSpec> {
        let mut event = AuditEventSpec {
            install: self.install.clone(),
            runner: self.runner.clone(),
            sequence: self.base + self.events.len() as u64,
            timestamp: Time(jiff::Timestamp::now()),
            type_,
            plan: subject.plan,
            entity: subject.entity,
            role: subject.role,
            details,
            previous_hash: match self.events.last() {
                Some(last) => Some(last.hash.clone()),
                None => self.continues.clone(),
            },
            hash: String::new(),
            signature: String::new(),
        };
        event.hash = event_hash(&event);
        event.signature = self.identity.sign(event.hash.as_bytes());
        let mut line = serde_json::to_vec(&event)?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .with_context(|| format!("cannot append to {}", self.path.display()))?;
        self.events.push(event.clone());
        Ok(event)
    }

    /// Every event of the local copy, from its first (sequence 0 unless it continues a
    /// chain).
    pub fn events(&self) -> &[AuditEventSpec] {
        &self.events
    }
}

/// Reads the local copy in `dir`, in file order.
pub fn read_local(dir: &Path) -> anyhow::Result<Vec<AuditEventSpec>> {
    let path = dir.join(AUDIT_FILE);
    anyhow::ensure!(path.exists(), "{} does not exist", path.display());
    Ok(read_lines(&path)?.0)
}

/// The events of a JSON-lines file, and whether its last line was torn.
fn read_lines(path: &Path) -> anyhow::Result<(Vec<AuditEventSpec>, bool)> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], false)),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let lines: Vec<Vec<u8>> = BufReader::new(file)
        .split(b'\n')
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut events = Vec::new();
    let mut torn = false;
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice(line) {
            Ok(event) => events.push(event),
            // Only a crash can cut the last line; anything else is damage verify must see.
            Err(_) if i == last => torn = true,
            Err(e) => anyhow::bail!("{} line {}: {e}", path.display(), i + 1),
        }
    }
    Ok((events, torn))
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
