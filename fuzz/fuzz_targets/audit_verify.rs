//! Audit-chain verification, as `outpost audit verify` runs it over a runner's local
//! log (JSON lines, in file order) and over API objects (named `<install>-<sequence>`).
//!
//! Two modes, by the first byte:
//! * even: the rest is a JSON-lines log, decoded line by line as the runner's
//!   `read_local` decodes it, then verified against a registered runner key;
//! * odd: the rest is a script of edits (drop, duplicate, swap, set a field to a value)
//!   applied to a chain of events properly signed by that key.
//!
//! Properties: verification never panics; it accepts a chain only if that chain is a
//! prefix of the signed one (in order for a local log, in any order for API objects) (nobody without the key can make another chain verify,
//! and the log's tail is the only thing a verifier cannot miss, see SECURITY.md).
#![no_main]

use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey};
use libfuzzer_sys::fuzz_target;
use outpost_api::AuditEventSpec;
use outpost_api::audit_chain::{Source, Trust, event_hash, verify};
use serde_json::{Value, json};

const INSTALL: &str = "web";
const RUNNER: &str = "runner-a";

struct Fixture {
    keys: Vec<String>,
    chain: Vec<AuditEventSpec>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let key = SigningKey::from_bytes(&[7; 32]);
        let keys = vec![STANDARD.encode(key.verifying_key().to_bytes())];
        let types = ["register", "claim", "plan", "verdict", "apply"];
        let mut chain: Vec<AuditEventSpec> = Vec::new();
        for (sequence, kind) in types.iter().enumerate() {
            let mut event: AuditEventSpec = serde_json::from_value(json!({
                "install": INSTALL, "runner": RUNNER, "sequence": sequence,
                "timestamp": format!("2026-01-02T03:04:0{sequence}Z"), "type": kind,
                "plan": "web-1", "details": {"step": sequence},
                "previousHash": chain.last().map(|e| e.hash.clone()),
                "hash": "", "signature": "",
            }))
            .expect("a valid event");
            event.hash = event_hash(&event);
            event.signature = STANDARD.encode(key.sign(event.hash.as_bytes()).to_bytes());
            chain.push(event);
        }
        let trust = Trust {
            keys: &keys,
            checkpoint: None,
        };
        assert_eq!(
            verify(INSTALL, &chain, Source::Local, &trust).map(|v| v.events),
            Ok(chain.len())
        );
        Fixture { keys, chain }
    })
}

/// Edits the signed chain (as JSON values) by the script `ops`.
fn edited(chain: &[AuditEventSpec], mut ops: &[u8]) -> Vec<AuditEventSpec> {
    const FIELDS: [&str; 10] = [
        "install",
        "runner",
        "sequence",
        "timestamp",
        "type",
        "plan",
        "details",
        "previousHash",
        "hash",
        "signature",
    ];
    let mut events: Vec<Value> = chain
        .iter()
        .map(|e| serde_json::to_value(e).expect("events encode"))
        .collect();
    while let [op, a, b, rest @ ..] = ops {
        ops = rest;
        let len = events.len().max(1);
        let (i, j) = (usize::from(*a) % len, usize::from(*b) % len);
        match op % 5 {
            0 if !events.is_empty() => {
                events.remove(i);
            }
            1 if !events.is_empty() => events.insert(j, events[i].clone()),
            2 if !events.is_empty() => events.swap(i, j),
            3 => events.truncate(i),
            4 if !events.is_empty() => {
                // Set a field to the JSON value (or string) up to the next 0xFF.
                let end = ops.iter().position(|b| *b == 0xFF).unwrap_or(ops.len());
                let text = String::from_utf8_lossy(&ops[..end]).into_owned();
                ops = ops.get(end + 1..).unwrap_or_default();
                let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
                events[i][FIELDS[j % FIELDS.len()]] = value;
            }
            _ => {}
        }
    }
    events
        .into_iter()
        .filter_map(|e| serde_json::from_value(e).ok())
        .collect()
}

fn check(events: &[AuditEventSpec]) {
    let Fixture { keys, chain } = fixture();
    let names: Vec<String> = events
        .iter()
        .map(|e| format!("{INSTALL}-{}", e.sequence))
        .collect();
    // A local log must be in order; API objects come in any order (by name: `web-10`
    // before `web-2`), each named by its sequence.
    let mut sorted = events.to_vec();
    sorted.sort_by_key(|e| e.sequence);
    for (source, seen) in [
        (Source::Local, events),
        (Source::Objects(&names), &sorted[..]),
    ] {
        let trust = Trust {
            keys,
            checkpoint: None,
        };
        if let Ok(verified) = verify(INSTALL, events, source, &trust) {
            assert_eq!(verified.events, events.len());
            assert!(
                seen.len() <= chain.len() && seen == &chain[..seen.len()],
                "a chain that is not the signed one verifies ({source:?})"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        // As the runner's `read_local`: one event per non-empty line.
        let events: Vec<AuditEventSpec> = rest
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect();
        check(&events);
    } else {
        check(&edited(&fixture().chain, rest));
    }
});
