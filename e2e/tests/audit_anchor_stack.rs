//! The audit log's trust anchor in the customer's AWS account (`moto_server`): the
//! customer creates the install stack's audit-anchor parameters exactly as the control
//! plane rendered them (`InstallStack`), the real `outpost-runner` publishes its public
//! key and signed checkpoints into them, and `outpost audit verify --stack` checks the
//! control plane's log against them — the key parameter with its whole version history.
//!
//! * First boot: the key the runner prints is the parameter's, and the log verifies.
//! * `--rotate-key`: a `key-rotation` signed by the old key; the parameter gets the new
//!   key and the chain verifies across it, unflagged.
//! * The vendor swaps the control plane's Runner key (in the store, around the API): the
//!   log still verifies with `--stack` (with a warning naming the swap) and fails with
//!   `--trust-control-plane`.
//! * The newest three events are deleted from the store: `--stack` names the range
//!   against the parameter's checkpoint.
//! * The parameter is rewritten (as the runner's role could) to a key no event accounts
//!   for: `--stack` names that version as swapped.
//!
//! moto creates `AWS::SSM::Parameter` resources but cannot boot the runner VM, so the
//! stack created is the rendered template's audit-anchor parameters and the outputs the
//! runner and `outpost audit verify` read; that only the runner's role may write them is
//! checked on the rendered template (`outpost-controllers` unit tests). moto runs without
//! IAM enforcement here.

use std::path::Path;
use std::process::Stdio;

use kube_client::api::Api;
use outpost_api::audit_anchor::{CHECKPOINT_PARAMETER, Checkpoint, KEY_PARAMETER, fingerprint};
use outpost_api::{InstallStack, Plan, Runner};
use outpost_e2e::EditStore as _;
use outpost_testing::job_plans::{
    INSTALL, audit_verify_with, install_with_token, local_events, runner_command,
};
use outpost_testing::{Backend, ControlPlane, Moto, Process, eventually};
use serde_json::{Value, json};

use crate::audit_anchor::{cut_tail, names_the_cut_tail, run_plans, swap_runner_key};
use crate::customer_aws::{Emulator as _, REGION};

/// The stack's name in the customer's account.
const STACK: &str = "outpost-acme";
/// moto's credentials: anything goes without IAM enforcement.
const KEY: (&str, &str) = ("customer", "customer-secret");

/// The customer's account and the stack's parameter names.
struct Account {
    moto: Moto,
    key_parameter: String,
    checkpoint_parameter: String,
}

impl Account {
    /// Creates stack [`STACK`] from the rendered template's anchor parameters.
    async fn create(template: &Value) -> Account {
        let moto = Moto::start();
        let mut resources = serde_json::Map::new();
        let mut outputs = serde_json::Map::new();
        for id in [KEY_PARAMETER, CHECKPOINT_PARAMETER, "RoleExternalId"] {
            if let Some(resource) = template["Resources"].get(id) {
                resources.insert(id.into(), resource.clone());
            }
            outputs.insert(id.into(), template["Outputs"][id].clone());
        }
        let body = json!({"AWSTemplateFormatVersion": "2010-09-09",
                          "Resources": resources, "Outputs": outputs});
        let cfn = aws_sdk_cloudformation::Client::new(&moto.sdk(KEY.0, KEY.1, None));
        cfn.create_stack()
            .stack_name(STACK)
            .template_body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("CreateStack: {e:?}\n{}", moto.log()));
        let outputs = eventually(60, "the stack to be created", async || {
            let described = cfn.describe_stacks().stack_name(STACK).send().await.ok()?;
            let stack = described.stacks().first()?.clone();
            let status = stack.stack_status()?.as_str().to_owned();
            assert!(!status.ends_with("_FAILED"), "{stack:?}\n{}", moto.log());
            (status == "CREATE_COMPLETE").then(|| stack.outputs().to_vec())
        })
        .await;
        let output = |id: &str| {
            outputs
                .iter()
                .find(|o| o.output_key() == Some(id))
                .and_then(|o| o.output_value())
                .unwrap_or_else(|| panic!("output {id}: {outputs:?}"))
                .to_owned()
        };
        Account {
            key_parameter: output(KEY_PARAMETER),
            checkpoint_parameter: output(CHECKPOINT_PARAMETER),
            moto,
        }
    }

    fn ssm(&self) -> aws_sdk_ssm::Client {
        aws_sdk_ssm::Client::new(&self.moto.sdk(KEY.0, KEY.1, None))
    }

    async fn parameter(&self, name: &str) -> String {
        let got = self.ssm().get_parameter().name(name).send().await.unwrap();
        got.parameter().unwrap().value().unwrap().to_owned()
    }

    async fn checkpoint(&self) -> Option<Checkpoint> {
        serde_json::from_str(&self.parameter(&self.checkpoint_parameter).await).ok()
    }

    /// Starts `outpost-runner` publishing into the stack's parameters, as the stack's
    /// user data does; `extra` flags after. Its stdout goes to `<state>.out`.
    fn start_runner(
        &self,
        cp: &ControlPlane,
        token: &str,
        state: &Path,
        extra: &[&str],
    ) -> Process {
        let out = std::fs::File::create(state.with_extension("out")).unwrap();
        let child = runner_command(&cp.url, &cp.tls.ca, token, state)
            .args(["--publish-key-parameter", &self.key_parameter])
            .args(["--publish-checkpoint-parameter", &self.checkpoint_parameter])
            .args([
                "--aws-region",
                REGION,
                "--aws-endpoint",
                &self.moto.endpoint(),
            ])
            .args(extra)
            .env("AWS_ACCESS_KEY_ID", KEY.0)
            .env("AWS_SECRET_ACCESS_KEY", KEY.1)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "error")
            .stdout(out)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("outpost-runner starts");
        Process::new(child)
    }

    /// Waits until every local event is shipped and the checkpoint parameter names the
    /// local head, then stops the runner.
    async fn settle(&self, state: &Path, runner: &mut Process) -> Checkpoint {
        let checkpoint = eventually(60, "the log to be shipped and checkpointed", async || {
            let shipped = std::fs::read_to_string(state.join("audit.shipped")).ok()?;
            let text = std::fs::read_to_string(state.join("audit.jsonl")).ok()?;
            let head: Value = serde_json::from_str(text.lines().last()?).ok()?;
            let checkpoint = self.checkpoint().await?;
            (shipped.trim() == local_events(state).to_string()
                && Some(checkpoint.sequence) == head["sequence"].as_u64())
            .then_some(checkpoint)
        })
        .await;
        runner.kill();
        checkpoint
    }

    /// `outpost audit verify` with `trust` flags: exit code, stdout, stderr.
    fn verify(&self, cp: &ControlPlane, trust: &[&str]) -> (i32, String, String) {
        let trust: Vec<&std::ffi::OsStr> = trust.iter().map(std::ffi::OsStr::new).collect();
        audit_verify_with(
            cp,
            &trust,
            &[
                ("AWS_ACCESS_KEY_ID", KEY.0),
                ("AWS_SECRET_ACCESS_KEY", KEY.1),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
        )
    }

    fn verify_with_stack(&self, cp: &ControlPlane) -> (i32, String, String) {
        let endpoint = self.moto.endpoint();
        self.verify(
            cp,
            &[
                "--stack",
                STACK,
                "--region",
                REGION,
                "--aws-endpoint",
                &endpoint,
            ],
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_publishes_its_key_and_checkpoints_into_the_customer_stack_and_verify_stack_holds()
 {
    let mut cp = ControlPlane::start(Backend::Embedded).await;
    let client = cp.client().await;
    let plans: Api<Plan> = Api::namespaced(client.clone(), "default");
    let runners: Api<Runner> = Api::namespaced(client.clone(), "default");
    let token = install_with_token(&cp).await;
    let controllers = cp.start_controllers("audit-anchor-stack");
    let stacks: Api<InstallStack> = Api::namespaced(client.clone(), "default");
    let stack = eventually(60, "the install stack to be rendered", async || {
        stacks.get_opt(INSTALL).await.ok().flatten()
    })
    .await;
    // The stack is all the test needs of the controllers. Left running, their gate would
    // judge the test's hand-made Plans (of a component the App does not declare) and
    // could deny one before the test marks it Ready.
    drop(controllers);
    let account = Account::create(&stack.spec.template).await;
    assert_eq!(
        account.key_parameter,
        format!("/outpost/default/{INSTALL}/runner-public-key")
    );
    // Before the runner's first boot the parameters hold no key and no checkpoint.
    assert_eq!(
        account.parameter(&account.key_parameter).await,
        "unpublished"
    );
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");

    // First boot: the key it prints is the one it publishes and registers.
    let mut runner = account.start_runner(&cp, &token, &state, &[]);
    run_plans(&plans, &["job-0"]).await;
    account.settle(&state, &mut runner).await;
    let first = account.parameter(&account.key_parameter).await;
    let printed = std::fs::read_to_string(state.with_extension("out")).unwrap();
    assert!(
        printed.contains(&format!("public key {first}")),
        "{printed}"
    );
    assert_eq!(runners.get(INSTALL).await.unwrap().spec.public_key, first);
    let (code, out, err) = account.verify_with_stack(&cp);
    let events = local_events(&state);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "key {} version 2: {} written",
            account.key_parameter,
            fingerprint(&first)
        )) && out.contains("the runner's first key")
            && out.ends_with(&format!("\n{events} events verified\n")),
        "{out}"
    );

    // An explicit rotation: the old key vouches for the new one.
    let mut runner = account.start_runner(&cp, &token, &state, &["--rotate-key"]);
    run_plans(&plans, &["job-1"]).await;
    let checkpoint = account.settle(&state, &mut runner).await;
    let second = account.parameter(&account.key_parameter).await;
    assert_ne!(second, first);
    assert_eq!(checkpoint.public_key, second);
    let printed = std::fs::read_to_string(state.with_extension("out")).unwrap();
    assert!(
        printed.contains(&format!(
            "rotated signing key (key-rotation signed by the old key); public key {second}"
        )),
        "{printed}"
    );
    let events = local_events(&state) as u64;
    let (code, out, err) = account.verify_with_stack(&cp);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "key {} version 3: {} written",
            account.key_parameter,
            fingerprint(&second)
        )) && out.contains("vouched for by the key-rotation at sequence")
            && out.ends_with(&format!("\n{events} events verified\n"))
            && !out.contains("FLAGGED"),
        "{out}"
    );

    // The vendor swaps the control plane's Runner key, around the API.
    let attacker_dir = tempfile::tempdir().unwrap();
    let attacker = outpost_runner::Identity::load_or_create(attacker_dir.path()).unwrap();
    cp.edit_store(async |store| {
        swap_runner_key(store, &attacker.public_key()).await;
    })
    .await;
    assert_eq!(
        runners.get(INSTALL).await.unwrap().spec.public_key,
        attacker.public_key(),
        "the store write took"
    );
    let (code, out, err) = account.verify_with_stack(&cp);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.ends_with(&format!("\n{events} events verified\n")),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "the control plane's Runner object has public key {}, which is not among the customer's keys",
            fingerprint(&attacker.public_key())
        )),
        "{err}"
    );
    let (code, out, _) = account.verify(&cp, &["--trust-control-plane"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signature does not verify"), "{out}");

    // Someone with the store deletes the newest three events.
    cut_tail(&mut cp, events).await;
    let (code, out, _) = account.verify_with_stack(&cp);
    assert_eq!(code, 1, "{out}");
    names_the_cut_tail(&out, events, &checkpoint);

    // The parameter is rewritten to a key no event of the log accounts for.
    account
        .ssm()
        .put_parameter()
        .name(&account.key_parameter)
        .value(attacker.public_key())
        .overwrite(true)
        .send()
        .await
        .unwrap();
    let (code, out, _) = account.verify_with_stack(&cp);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "event {} version 4: holds key {} (written",
            account.key_parameter,
            fingerprint(&attacker.public_key())
        )) && out.contains("which no key-rotation or key-reset in the log accounts for: swapped"),
        "{out}"
    );
}
