//! The customer's hold on terraform, with the real `terraform` and `bwrap`: the provider
//! allow-list and the `static` configuration local policies see before `terraform init`,
//! and the sandbox terraform runs in.
//!
//! Vendor code here is a provider in a filesystem mirror ([`outpost_testing::providers`]):
//! `acme/evil` is a script that appends to a marker file in the module directory
//! whenever terraform starts it, as any provider's code runs at `terraform plan`;
//! `hashicorp/aws` is the real provider from the machine's mirror, run offline.

use outpost_api::{Operation, PolicyInput};
use outpost_runner::executor::terraform::{ProviderAllowList, TerraformExecutor};
use outpost_runner::executor::{Executor, Purpose, StepContext};
use outpost_runner::local_policy;
use outpost_testing::providers::{
    EVIL_MODULE, aws_module, aws_plugins, marker_lines, marker_mirror, provider_policy,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The module of a Plan: inline files.
fn desired(main_tf: &str) -> Value {
    json!({"app": "shop", "type": "terraform_module", "terraform": {"files": {"main.tf": main_tf}}})
}

fn step(work_dir: &Path, plan: &str, desired: Value) -> StepContext {
    StepContext {
        plan: plan.into(),
        plan_uid: format!("uid-{plan}"),
        operation: Operation::Deploy,
        entity: "db".into(),
        desired,
        work_dir: work_dir.to_owned(),
        env: BTreeMap::new(),
        timeout: Duration::from_secs(300),
    }
}

fn terraform(providers: &[&str], mirrors: &[&Path]) -> TerraformExecutor {
    let providers: Vec<String> = providers.iter().map(|p| (*p).to_owned()).collect();
    let mirrors = mirrors.iter().map(|m| m.to_path_buf()).collect();
    TerraformExecutor::new(
        std::env::var("OUTPOST_TERRAFORM").unwrap_or_else(|_| "/usr/local/bin/terraform".into()),
    )
    .with_providers(ProviderAllowList::new(&providers, mirrors).expect("a valid allow-list"))
}

fn ran(module: &Path) -> bool {
    marker_lines(module) > 0
}

#[tokio::test]
async fn providers_not_allowed_or_denied_never_run_and_allowed_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let mirror = marker_mirror(dir.path());
    let work = tempfile::tempdir().unwrap();
    let module = work.path().join("module");
    let ctx = step(work.path(), "p1", desired(EVIL_MODULE));

    // Not on the runner's allow-list: refused by name, before init.
    let strict = terraform(&[], &[&mirror]);
    let refused = format!(
        "{:#}",
        strict.configuration(&ctx, Purpose::Plan).await.unwrap_err()
    );
    assert!(
        refused.contains(
            "needs provider registry.terraform.io/acme/evil which the runner's allow-list"
        ),
        "{refused}"
    );
    let refused = format!("{:#}", strict.plan(&ctx).await.unwrap_err());
    assert!(refused.contains("acme/evil"), "{refused}");
    assert!(!module.join(".terraform").exists(), "init did not run");
    assert!(!ran(&module), "the provider did not run");

    // Allowed by the runner, denied by the customer's local policy on the static input.
    let lenient = terraform(&["acme/evil"], &[&mirror]);
    let config = lenient
        .configuration(&ctx, Purpose::Plan)
        .await
        .unwrap()
        .expect("a module to run");
    assert_eq!(config.input, PolicyInput::Static);
    let evil = config.document["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["source"] == "registry.terraform.io/acme/evil")
        .expect("the provider is listed");
    assert_eq!(evil["allowed"], true);
    assert_eq!(evil["versions"], json!(["1.0.0"]));
    let policies = tempfile::tempdir().unwrap();
    // The customer's own list, whatever the runner allows.
    let policy = provider_policy("vendor_providers", &["registry.terraform.io/hashicorp/aws"]);
    std::fs::write(policies.path().join("vendor-providers.rego"), policy).unwrap();
    let verdicts = local_policy::load(policies.path())
        .unwrap()
        .evaluate(&config);
    assert_eq!(
        verdicts[0].denials,
        ["provider registry.terraform.io/acme/evil is not on the customer's list"]
    );
    assert!(!module.join(".terraform").exists() && !ran(&module));

    // The control: planned, the provider's code does run (and fails: it is no provider).
    let failed = format!("{:#}", lenient.plan(&ctx).await.unwrap_err());
    assert!(failed.contains("terraform plan"), "{failed}");
    assert!(module.join(".terraform").exists(), "init ran");
    assert!(ran(&module), "the provider's code ran at plan");
}

#[tokio::test]
async fn an_allowed_provider_plans_applies_and_observes_in_the_sandbox() {
    let tf = terraform(&["hashicorp/aws"], &[&aws_plugins()]);
    let work = tempfile::tempdir().unwrap();
    let ctx = step(work.path(), "aws", desired(&aws_module("hashicorp/aws")));
    let config = tf
        .configuration(&ctx, Purpose::Plan)
        .await
        .unwrap()
        .unwrap();
    let sources: Vec<&Value> = config.document["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["source"])
        .collect();
    assert_eq!(
        sources,
        [
            &json!("registry.terraform.io/hashicorp/aws"),
            &json!("terraform.io/builtin/terraform")
        ]
    );
    let diff = tf.plan(&ctx).await.unwrap();
    assert_eq!(diff.summary, "1 to add, 0 to change, 0 to destroy");
    let applied = tf.apply(&ctx, &diff).await.unwrap();
    assert_eq!(applied.outputs["partition"], json!("aws"));
    let live = tf.observe(&ctx, &applied.last_applied).await.unwrap();
    assert_eq!(live, applied.last_applied);
}

#[tokio::test]
async fn terraform_sees_its_module_but_not_the_runner_state() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    outpost_api::secret_file::private_dir(&state).unwrap();
    let key = state.join("identity.key");
    std::fs::write(&key, "the runner's signing key").unwrap();
    let works = outpost_runner::settings::default_work_dir(&state);
    outpost_runner::work_dirs::prepare(&state, &works).unwrap();
    let work = outpost_runner::work_dirs::entity(&works, "component", "db").unwrap();
    let tf = terraform(&[], &[]);

    let reads = |path: &Path| {
        desired(&format!(
            "resource \"terraform_data\" \"read\" {{\n  input = file({:?})\n}}\n",
            path.display().to_string()
        ))
    };
    // Its own module directory: readable.
    let own = step(&work, "own", reads(&work.join("module/main.tf")));
    tf.plan(&own).await.unwrap();
    // The runner's key, next to the work dir: not there.
    let other = step(&work, "key", reads(&key));
    let err = format!("{:#}", tf.plan(&other).await.unwrap_err());
    assert!(err.contains("no file exists"), "{err}");
    assert!(err.contains("identity.key"), "{err}");
}
