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

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use outpost_api::{AuditEventSpec, AuditEventType, EntityRef, content_hash};
use serde_json::Value;

use crate::identity::{Identity, verify_signature};

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
            events,
        })
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
            sequence: self.events.len() as u64,
            timestamp: Time(jiff::Timestamp::now()),
            type_,
            plan: subject.plan,
            entity: subject.entity,
            role: subject.role,
            details,
            previous_hash: self.events.last().map(|e| e.hash.clone()),
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

    /// Every event of the local copy, from sequence 0.
    pub fn events(&self) -> &[AuditEventSpec] {
        &self.events
    }
}

/// `sha256:<hex>` of the event's canonical JSON without `hash` and `signature`.
pub fn event_hash(event: &AuditEventSpec) -> String {
    let mut value = serde_json::to_value(event).expect("audit events serialise");
    if let Value::Object(map) = &mut value {
        map.remove("hash");
        map.remove("signature");
    }
    content_hash(&value)
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

/// One event that fails verification, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The event, as `<install>-<sequence>` (or where it was found).
    pub event: String,
    /// Why it fails.
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event {}: {}", self.event, self.reason)
    }
}

/// Where the events being verified were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// The runner's local file: events must appear in sequence order.
    Local,
    /// API objects, each with its object name, which must be `<install>-<sequence>`.
    Objects(&'a [String]),
}

/// Checks order, hash chain, signatures (against `keys`: runner name → public key) and
/// gaps. Returns the number of events verified, or every failure found.
pub fn verify(
    install: &str,
    events: &[AuditEventSpec],
    source: Source<'_>,
    keys: &BTreeMap<String, String>,
) -> Result<usize, Vec<Failure>> {
    let mut failures = Vec::new();
    let name = |seq: u64| format!("{install}-{seq}");
    // Order: where each event was found must match its sequence number.
    for (i, event) in events.iter().enumerate() {
        match source {
            Source::Local if event.sequence != i as u64 => failures.push(Failure {
                event: name(event.sequence),
                reason: format!(
                    "out of order: found at position {i} of the log (line {}), expected sequence {i} there",
                    i + 1
                ),
            }),
            Source::Objects(names) if names[i] != name(event.sequence) => failures.push(Failure {
                event: names[i].clone(),
                reason: format!(
                    "out of order: object {} holds sequence {}",
                    names[i], event.sequence
                ),
            }),
            _ => {}
        }
        if event.install != install {
            failures.push(Failure {
                event: name(event.sequence),
                reason: format!("belongs to install {:?}", event.install),
            });
        }
    }
    let mut sorted: Vec<&AuditEventSpec> = events.iter().collect();
    sorted.sort_by_key(|e| e.sequence);
    let mut expected = 0u64;
    let mut previous: Option<&AuditEventSpec> = None;
    for event in sorted {
        let this = name(event.sequence);
        if event.sequence < expected {
            failures.push(Failure {
                event: this,
                reason: format!("sequence {} appears more than once", event.sequence),
            });
            continue;
        }
        if event.sequence > expected {
            let missing = if event.sequence - expected == 1 {
                name(expected)
            } else {
                format!("{} to {}", name(expected), name(event.sequence - 1))
            };
            failures.push(Failure {
                event: this.clone(),
                reason: format!("gap before it: {missing} missing"),
            });
            previous = None;
        }
        let hash = event_hash(event);
        if hash != event.hash {
            failures.push(Failure {
                event: this.clone(),
                reason: format!(
                    "content does not match its hash (stored {}, computed {hash}): edited",
                    event.hash
                ),
            });
        }
        if let Some(previous) = previous
            && event.previous_hash.as_deref() != Some(previous.hash.as_str())
        {
            failures.push(Failure {
                event: this.clone(),
                reason: format!(
                    "previousHash does not match the hash of {}: chain broken",
                    name(previous.sequence)
                ),
            });
        }
        if event.sequence == 0 && event.previous_hash.is_some() {
            failures.push(Failure {
                event: this.clone(),
                reason: "the first event has a previousHash".into(),
            });
        }
        match keys.get(&event.runner) {
            None => failures.push(Failure {
                event: this.clone(),
                reason: format!("runner {:?} has no registered public key", event.runner),
            }),
            Some(key) => {
                if let Err(reason) = verify_signature(key, event.hash.as_bytes(), &event.signature)
                {
                    failures.push(Failure {
                        event: this.clone(),
                        reason,
                    });
                }
            }
        }
        expected = event.sequence + 1;
        previous = Some(event);
    }
    if failures.is_empty() {
        Ok(events.len())
    } else {
        Err(failures)
    }
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
