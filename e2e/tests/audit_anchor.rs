//! The customer holds the audit log's trust anchor: the real `outpost-runner` publishes
//! its public keys and signed checkpoints into an anchor dir (the customer's side), and
//! `outpost audit verify --key` checks the control plane's log against it. Someone with
//! the control plane's store (the vendor, or an attacker there) deletes the newest events
//! or swaps the Runner's key by writing the store directly, going around the API's
//! append-only rule; verification names the cut range and the swapped key. A runner that
//! lost its state dir continues the chain with a `key-reset` that verification flags.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use kube_client::api::{Api, ListParams};
use outpost_api::audit_anchor::{CHECKPOINT_FILE, Checkpoint, KEYS_FILE, parse_keys};
use outpost_api::{AuditEventType, Plan, PlanPhase, Runner};
use outpost_e2e::EditStore as _;
use outpost_testing::job_plans::{
    INSTALL, approved_job_plan, audit_event_body, audit_verify_trusting, install_with_token,
    local_events, runner_command,
};
use outpost_testing::{Backend, ControlPlane, Process, eventually};
use serde_json::{Value, json};

/// A runner's dirs: its state (lost in a reset), the customer's anchor, its stdout.
struct Dirs {
    _root: tempfile::TempDir,
    anchor: PathBuf,
    root: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let root = tempfile::tempdir().unwrap();
        Dirs {
            anchor: root.path().join("anchor"),
            root: root.path().to_owned(),
            _root: root,
        }
    }

    fn keys(&self) -> PathBuf {
        self.anchor.join(KEYS_FILE)
    }

    fn checkpoint(&self) -> Option<Checkpoint> {
        let bytes = std::fs::read(self.anchor.join(CHECKPOINT_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Starts `outpost-runner` with its state in `state` and the customer's anchor dir; its
/// stdout goes to `<state>.out`.
fn start_runner(cp: &ControlPlane, token: &str, state: &Path, dirs: &Dirs) -> Process {
    let out = std::fs::File::create(state.with_extension("out")).unwrap();
    let child = runner_command(&cp.url, &cp.tls.ca, token, state)
        .arg("--anchor-dir")
        .arg(&dirs.anchor)
        .env("RUST_LOG", "error")
        .stdout(out)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("outpost-runner starts");
    Process::new(child)
}

/// Creates approved job Plans `names` and waits until each Succeeded.
pub(crate) async fn run_plans(plans: &Api<Plan>, names: &[&str]) {
    for name in names {
        approved_job_plan(plans, name).await;
    }
    eventually(60, "the plans to succeed", async || {
        let items = plans.list(&ListParams::default()).await.ok()?.items;
        names
            .iter()
            .all(|name| {
                items.iter().any(|p| {
                    p.metadata.name.as_deref() == Some(name)
                        && p.status.as_ref().and_then(|s| s.phase) == Some(PlanPhase::Succeeded)
                })
            })
            .then_some(())
    })
    .await;
}

/// Waits until every local event is shipped and the anchor's checkpoint names the local
/// head, then stops the runner so the log holds still (an idle runner records nothing).
async fn settle(state: &Path, dirs: &Dirs, runner: &mut Process) -> Checkpoint {
    let checkpoint = eventually(60, "the log to be shipped and checkpointed", async || {
        let local = local_events(state);
        let shipped = std::fs::read_to_string(state.join("audit.shipped")).ok()?;
        let text = std::fs::read_to_string(state.join("audit.jsonl")).ok()?;
        let head: Value = serde_json::from_str(text.lines().last()?).ok()?;
        let checkpoint = dirs.checkpoint()?;
        (shipped.trim() == local.to_string()
            && Some(checkpoint.sequence) == head["sequence"].as_u64())
        .then_some(checkpoint)
    })
    .await;
    runner.kill();
    checkpoint
}

/// `outpost audit verify --key <anchor>/public-keys` (the checkpoint next to it).
fn verify_with_key(cp: &ControlPlane, dirs: &Dirs) -> (i32, String, String) {
    let keys = dirs.keys();
    audit_verify_trusting(cp, &["--key".as_ref(), keys.as_os_str()])
}

fn verify_trusting_control_plane(cp: &ControlPlane) -> (i32, String, String) {
    audit_verify_trusting(cp, &[OsStr::new("--trust-control-plane")])
}

/// Rewrites the install's `Runner` object's `publicKey` to `key` in `store`, around the
/// API (the server stopped).
pub(crate) async fn swap_runner_key(store: &dyn outpost_apiserver::storage::Store, key: &str) {
    let runner_key = format!("/registry/outpost.dev/runners/default/{INSTALL}");
    let kv = store.get(&runner_key).await.unwrap().unwrap();
    let mut object: Value = serde_json::from_slice(&kv.value).unwrap();
    object["spec"]["publicKey"] = json!(key);
    let body = serde_json::to_vec(&object).unwrap();
    store
        .update(&runner_key, body.into(), kv.mod_revision)
        .await
        .unwrap();
}

/// Deletes the newest three of the install's `events` AuditEvents in the store, around
/// the API.
pub(crate) async fn cut_tail(cp: &mut ControlPlane, events: u64) {
    cp.edit_store(async |store| {
        for sequence in events - 3..events {
            store.delete(&event_key(sequence), None).await.unwrap();
        }
    })
    .await;
}

/// Asserts that a verification's output names the three events [`cut_tail`] deleted as
/// missing, against the runner's `checkpoint`.
pub(crate) fn names_the_cut_tail(out: &str, events: u64, checkpoint: &Checkpoint) {
    let (first, last) = (events - 3, events - 1);
    assert!(
        out.contains(&format!(
            "events {INSTALL}-{first}..{INSTALL}-{last}: missing: the log ends at {INSTALL}-{} but the runner's checkpoint at {} says {INSTALL}-{last}",
            first - 1,
            checkpoint.timestamp
        )),
        "{out}"
    );
}

/// The store key of the install's AuditEvent `sequence`.
pub(crate) fn event_key(sequence: u64) -> String {
    format!("/registry/outpost.dev/auditevents/default/{INSTALL}-{sequence}")
}

async fn cut_tail_and_swapped_key(backend: Backend) {
    let mut cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let token = install_with_token(&cp).await;
    let dirs = Dirs::new();
    let state = dirs.root.join("state");
    let mut runner = start_runner(&cp, &token, &state, &dirs);
    run_plans(&plans, &["job-0", "job-1"]).await;
    let checkpoint = settle(&state, &dirs, &mut runner).await;

    // First boot: the runner printed its key and published it on the customer's side;
    // the control plane's Runner object holds the same key.
    let keys = parse_keys(&std::fs::read_to_string(dirs.keys()).unwrap()).unwrap();
    assert_eq!(keys.len(), 1);
    let printed = std::fs::read_to_string(state.with_extension("out")).unwrap();
    assert!(
        printed.contains(&format!("public key {}", keys[0])),
        "{printed}"
    );
    let runners: Api<Runner> = Api::namespaced(client.clone(), "default");
    assert_eq!(runners.get(INSTALL).await.unwrap().spec.public_key, keys[0]);
    assert_eq!(checkpoint.public_key, keys[0]);

    let events = local_events(&state) as u64;
    assert!(events >= 8, "{events} events");
    let (code, out, err) = verify_with_key(&cp, &dirs);
    assert_eq!(
        (code, out.as_str()),
        (0, format!("{events} events verified\n").as_str()),
        "{err}"
    );
    // Without a trust anchor it refuses.
    let (code, _, err) = audit_verify_trusting(&cp, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("no trust anchor: give --key FILE"), "{err}");

    // Someone with the store deletes the newest three events, around the API.
    cut_tail(&mut cp, events).await;
    let (code, out, _) = verify_with_key(&cp, &dirs);
    assert_eq!(code, 1, "{out}");
    names_the_cut_tail(&out, events, &checkpoint);
    let first = events - 3;
    // Trusting the control plane, the shortened log looks whole.
    let (code, out, err) = verify_trusting_control_plane(&cp);
    assert_eq!(
        (code, out.trim()),
        (0, format!("{first} events verified").as_str())
    );
    assert!(
        err.contains("warning: trusting the public keys of the control plane"),
        "{err}"
    );

    // Then swaps the Runner's key for its own and rewrites the whole chain with it, one
    // event edited: a rewrite the control plane's own view cannot tell from the real log.
    let attacker_dir = tempfile::tempdir().unwrap();
    let attacker = outpost_runner::Identity::load_or_create(attacker_dir.path()).unwrap();
    cp.edit_store(async |store| {
        swap_runner_key(store, &attacker.public_key()).await;
        let mut previous: Option<String> = None;
        for sequence in 0..first {
            let key = event_key(sequence);
            let kv = store.get(&key).await.unwrap().unwrap();
            let mut object: Value = serde_json::from_slice(&kv.value).unwrap();
            let mut spec: outpost_api::AuditEventSpec =
                serde_json::from_value(object["spec"].clone()).unwrap();
            if sequence == first - 1 {
                spec.details = Some(json!({"forged": true}));
            }
            spec.previous_hash = previous.clone();
            spec.hash = outpost_api::audit_chain::event_hash(&spec);
            spec.signature = attacker.sign(spec.hash.as_bytes());
            previous = Some(spec.hash.clone());
            object["spec"] = serde_json::to_value(&spec).unwrap();
            let body = serde_json::to_vec(&object).unwrap();
            store
                .update(&key, body.into(), kv.mod_revision)
                .await
                .unwrap();
        }
    })
    .await;
    let swapped = runners.get(INSTALL).await.unwrap().spec.public_key;
    assert_eq!(swapped, attacker.public_key(), "the store write took");
    // Trusting the control plane, the forgery verifies.
    let (code, out, _) = verify_trusting_control_plane(&cp);
    assert_eq!(
        (code, out.trim()),
        (0, format!("{first} events verified").as_str())
    );
    // Against the customer's key it fails, naming the swapped key and the forged event.
    let (code, out, _) = verify_with_key(&cp, &dirs);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "event runner {INSTALL}: the control plane's Runner object has public key {}",
            outpost_api::audit_anchor::fingerprint(&attacker.public_key())
        )) && out.contains("which is not among the customer's keys"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "event {INSTALL}-{}: signature does not verify",
            first - 1
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_tail_or_a_swapped_runner_key_in_the_embedded_store_fails_against_the_customer_key() {
    cut_tail_and_swapped_key(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_tail_or_a_swapped_runner_key_in_etcd_fails_against_the_customer_key() {
    cut_tail_and_swapped_key(Backend::Etcd).await;
}

async fn lost_state_dir(backend: Backend) {
    let cp = ControlPlane::start(backend).await;
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let token = install_with_token(&cp).await;
    let dirs = Dirs::new();
    let first_state = dirs.root.join("state");
    // An anchor inside the state dir would be lost with it: refused at start.
    let refused = runner_command(&cp.url, &cp.tls.ca, &token, &first_state)
        .arg("--anchor-dir")
        .arg(first_state.join("anchor"))
        .output()
        .expect("outpost-runner runs");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("is inside --state-dir"), "{said}");
    assert!(
        !first_state.join("anchor").exists(),
        "nothing was written there"
    );
    let mut runner = start_runner(&cp, &token, &first_state, &dirs);
    run_plans(&plans, &["job-0"]).await;
    let before = settle(&first_state, &dirs, &mut runner).await;

    // The VM comes back with an empty state dir (the anchor dir is the customer's).
    let second_state = dirs.root.join("state-again");
    let mut runner = start_runner(&cp, &token, &second_state, &dirs);
    run_plans(&plans, &["job-1"]).await;
    let after = settle(&second_state, &dirs, &mut runner).await;
    let keys = parse_keys(&std::fs::read_to_string(dirs.keys()).unwrap()).unwrap();
    assert_eq!(keys.len(), 2, "the new key is published next to the old");
    assert_eq!(after.public_key, keys[1]);
    let printed = std::fs::read_to_string(second_state.with_extension("out")).unwrap();
    assert!(
        printed.contains(&format!("public key {}", keys[1])),
        "{printed}"
    );

    // The new runner's first event continues the chain after the old one's last.
    let text = std::fs::read_to_string(second_state.join("audit.jsonl")).unwrap();
    let reset: outpost_api::AuditEventSpec =
        serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(reset.type_, AuditEventType::KeyReset);
    assert_eq!(reset.sequence, before.sequence + 1);
    assert_eq!(reset.previous_hash.as_deref(), Some(before.hash.as_str()));
    let details = reset.details.clone().unwrap();
    assert_eq!(details["checkpoint"]["sequence"], before.sequence);
    assert_eq!(details["publicKey"], keys[1]);

    let total = after.sequence + 1;
    let (code, out, err) = verify_with_key(&cp, &dirs);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(&format!(
            "FLAGGED event {INSTALL}-{}: key-reset: runner \"{INSTALL}\" lost its state dir",
            reset.sequence
        )) && out.ends_with(&format!(
            "{total} events verified, 1 flagged for the customer to confirm\n"
        )),
        "{out}"
    );
    // Nobody but the install's runner token appends a key-reset, even as the next link:
    // an admin's is 403 and nothing is stored.
    let name = format!("{INSTALL}-{total}");
    let mut forged: Value =
        serde_json::from_str(&audit_event_body(INSTALL, total, Some(&after.hash), &name)).unwrap();
    forged["spec"]["type"] = json!("key-reset");
    let path = "/apis/outpost.dev/v1alpha1/namespaces/default/auditevents";
    let json_body = [("content-type", "application/json")];
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            path,
            &json_body,
            forged.to_string(),
        )
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    assert!(
        reply.text.contains("may append to its audit log"),
        "{}",
        reply.text
    );
    let stored = cp
        .raw(
            Some(&cp.admin_token),
            "GET",
            &format!("{path}/{name}"),
            &[],
            String::new(),
        )
        .await;
    assert_eq!(stored.status, 404, "{}", stored.text);

    // A customer who holds only the first key sees the new key's events fail.
    let old_only = dirs.root.join("old-key");
    std::fs::write(&old_only, format!("{}\n", keys[0])).unwrap();
    let (code, out, _) = audit_verify_trusting(
        &cp,
        &[
            "--key".as_ref(),
            old_only.as_os_str(),
            "--checkpoint".as_ref(),
            dirs.anchor.join(CHECKPOINT_FILE).as_os_str(),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "event {INSTALL}-{}: signature does not verify",
            reset.sequence
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_restarted_with_an_empty_state_dir_continues_the_chain_with_a_flagged_key_reset() {
    lost_state_dir(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_restarted_with_an_empty_state_dir_on_etcd_continues_with_a_flagged_key_reset() {
    lost_state_dir(Backend::Etcd).await;
}
