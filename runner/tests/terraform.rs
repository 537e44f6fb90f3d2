//! The terraform_module executor against the real `terraform` binary, with modules of
//! the built-in `terraform_data` resource (no provider download).

use outpost_api::{Operation, PolicyInput};
use outpost_runner::executor::terraform::{
    BACKEND_FILE, REDACTED, StateBackend, TerraformExecutor,
};
use outpost_runner::executor::{Diff, Executor, StepContext};
use outpost_runner::local_policy;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The terraform binary: `$OUTPOST_TERRAFORM`, else the image's.
fn executor() -> TerraformExecutor {
    TerraformExecutor::new(
        std::env::var("OUTPOST_TERRAFORM").unwrap_or_else(|_| "/usr/local/bin/terraform".into()),
    )
}

const DATABASE: &str = r#"
variable "size" {
  type = string
}
variable "engine" {
  type = string
}
variable "zones" {
  type    = list(string)
  default = []
}
resource "terraform_data" "db" {
  input            = { size = var.size, zones = var.zones }
  triggers_replace = [var.engine]
}
output "id" {
  value = terraform_data.db.id
}
output "size" {
  value = terraform_data.db.output.size
}
output "zones" {
  value = terraform_data.db.output.zones
}
variable "password" {
  type      = string
  sensitive = true
  default   = "not-for-the-control-plane"
}
resource "terraform_data" "credentials" {
  input = { password = var.password }
}
output "password" {
  value     = var.password
  sensitive = true
}
"#;

fn component(files: &[(&str, &str)], variables: &[(&str, &str)]) -> Value {
    let files: BTreeMap<&str, &str> = files.iter().copied().collect();
    let variables: BTreeMap<&str, &str> = variables.iter().copied().collect();
    json!({
        "app": "shopfront",
        "type": "terraform_module",
        "terraform": {"files": files, "variables": variables}
    })
}

fn context(work_dir: &Path, plan: &str, operation: Operation, desired: Value) -> StepContext {
    StepContext {
        plan: plan.into(),
        plan_uid: format!("uid-{plan}"),
        operation,
        entity: "database".into(),
        desired,
        work_dir: work_dir.to_owned(),
        env: BTreeMap::new(),
        timeout: Duration::from_secs(120),
    }
}

fn actions(diff: &Diff) -> Vec<(String, Value)> {
    diff.document["resource_changes"]
        .as_array()
        .expect("a plan has resource_changes")
        .iter()
        .map(|rc| {
            (
                rc["address"].as_str().unwrap_or_default().to_owned(),
                rc["change"]["actions"].clone(),
            )
        })
        .collect()
}

/// The seed's `no-database-recreate` policy, as a customer's local policy file.
fn seed_policy_dir() -> tempfile::TempDir {
    let seed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../manifests/policies/no-database-recreate.yaml"),
    )
    .expect("the seed policy exists");
    let policy: Value = serde_saphyr::from_str(&seed).expect("the seed policy is YAML");
    let module = policy["spec"]["module"]
        .as_str()
        .expect("the seed has a module");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("no-database-recreate.rego"),
        format!("# outpost:inputs terraform\n{module}"),
    )
    .expect("write policy");
    dir
}

#[tokio::test]
async fn plan_apply_replace_denied_and_teardown() {
    let tf = executor();
    let work = tempfile::tempdir().unwrap();
    let desired = |engine: &str| {
        component(
            &[("main.tf", DATABASE)],
            &[
                ("size", "small"),
                ("engine", engine),
                ("zones", r#"["a","b"]"#),
            ],
        )
    };

    // First plan: everything is created.
    let ctx = context(work.path(), "p1", Operation::Deploy, desired("postgres-15"));
    let diff = tf.plan(&ctx).await.unwrap();
    assert_eq!(diff.input, PolicyInput::Terraform);
    assert!(diff.changes);
    assert_eq!(diff.summary, "2 to add, 0 to change, 0 to destroy");
    assert_eq!(
        actions(&diff),
        [
            ("terraform_data.credentials".into(), json!(["create"])),
            ("terraform_data.db".into(), json!(["create"]))
        ]
    );
    // What terraform marks sensitive is redacted in what policies see.
    assert!(
        !diff
            .document
            .to_string()
            .contains("not-for-the-control-plane"),
        "{}",
        diff.document
    );
    assert_eq!(
        diff.document["resource_changes"][0]["change"]["after"]["input"]["password"],
        json!(REDACTED)
    );

    // Apply: outputs (sensitive ones left out) and the state as last_applied.
    let applied = tf.apply(&ctx, &diff).await.unwrap();
    assert_eq!(applied.outputs["size"], json!("small"));
    assert_eq!(applied.outputs["zones"], json!(["a", "b"]));
    let id = applied.outputs["id"]
        .as_str()
        .expect("id is a string")
        .to_owned();
    assert!(
        !applied.outputs.contains_key("password"),
        "{:?}",
        applied.outputs
    );
    assert!(
        applied.log.contains("Apply complete! Resources: 2 added"),
        "{}",
        applied.log
    );
    assert_eq!(
        applied.last_applied["resources"]["terraform_data.credentials"]["input"]["password"],
        json!(REDACTED)
    );
    let db = &applied.last_applied["resources"]["terraform_data.db"];
    assert_eq!(db["id"], json!(id));
    assert_eq!(db["input"]["size"], json!("small"));
    assert_eq!(applied.last_applied["outputs"]["password"], json!(REDACTED));

    // The same desired state again: no changes. Live state is what was applied.
    let again = context(work.path(), "p2", Operation::Deploy, desired("postgres-15"));
    let diff = tf.plan(&again).await.unwrap();
    assert!(!diff.changes, "{}", diff.summary);
    assert_eq!(diff.summary, "0 to add, 0 to change, 0 to destroy");
    assert_eq!(
        actions(&diff),
        [
            ("terraform_data.credentials".into(), json!(["no-op"])),
            ("terraform_data.db".into(), json!(["no-op"]))
        ]
    );
    let live = tf.observe(&again, &applied.last_applied).await.unwrap();
    assert_eq!(live, applied.last_applied);

    // A new engine replaces the "database": the customer's local policy denies it.
    let replace = context(work.path(), "p3", Operation::Deploy, desired("postgres-16"));
    let diff = tf.plan(&replace).await.unwrap();
    assert_eq!(diff.summary, "1 to add, 0 to change, 1 to destroy");
    assert_eq!(
        actions(&diff)[1],
        ("terraform_data.db".into(), json!(["delete", "create"]))
    );
    let policies = local_policy::load(seed_policy_dir().path()).unwrap();
    let verdicts = policies.evaluate(&diff);
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts[0].denied());
    assert_eq!(
        verdicts[0].denials,
        ["terraform_data.db would be replaced (delete and create); database data would be lost"]
    );
    // The policy does not deny a plan without a replacement.
    let unchanged = tf.plan(&again).await.unwrap();
    assert!(!policies.evaluate(&unchanged)[0].denied());

    // Teardown (its desired state names no module) destroys what the work dir holds.
    let teardown = context(
        work.path(),
        "p4",
        Operation::Teardown,
        json!({"component": "database"}),
    );
    let diff = tf.plan(&teardown).await.unwrap();
    assert!(diff.changes);
    assert_eq!(diff.summary, "0 to add, 0 to change, 2 to destroy");
    assert_eq!(
        actions(&diff)[1],
        ("terraform_data.db".into(), json!(["delete"]))
    );
    let applied = tf.apply(&teardown, &diff).await.unwrap();
    assert_eq!(applied.last_applied["resources"], json!({}));
    assert_eq!(
        tf.observe(&teardown, &Value::Null).await.unwrap()["resources"],
        json!({})
    );
}

#[tokio::test]
async fn apply_runs_the_saved_plan_never_a_fresh_one() {
    let tf = executor();
    let work = tempfile::tempdir().unwrap();
    let desired = |size: &str| {
        component(
            &[("main.tf", DATABASE)],
            &[("size", size), ("engine", "pg")],
        )
    };
    let first = context(work.path(), "first", Operation::Deploy, desired("small"));
    let first_diff = tf.plan(&first).await.unwrap();
    // Another Plan changes the state in between: the first saved plan is stale.
    let second = context(work.path(), "second", Operation::Deploy, desired("large"));
    let second_diff = tf.plan(&second).await.unwrap();
    tf.apply(&second, &second_diff).await.unwrap();
    // Refused as moved live state (nothing applied): the runner plans and asks again.
    let err = tf.apply(&first, &first_diff).await.unwrap_err();
    assert!(
        matches!(err, outpost_runner::executor::ExecutorError::Moved(_)),
        "{err:#}"
    );
    assert!(
        format!("{err:#}").contains("the saved plan is stale"),
        "{err:#}"
    );
    // A saved plan applies once.
    let err = format!("{:#}", tf.apply(&second, &second_diff).await.unwrap_err());
    assert!(err.contains("is missing"), "{err}");
    // A Diff that is not what the saved plan says is refused.
    let third = context(work.path(), "third", Operation::Deploy, desired("medium"));
    let mut diff = tf.plan(&third).await.unwrap();
    diff.document["resource_changes"] = json!([]);
    let err = format!("{:#}", tf.apply(&third, &diff).await.unwrap_err());
    assert!(err.contains("no longer matches"), "{err}");
}

const USES_CREDENTIALS: &str = r#"
variable "token" {
  type      = string
  ephemeral = true
}
resource "terraform_data" "x" {
  input = "a"
  provisioner "local-exec" {
    command     = "test \"$TOKEN\" = \"$EXPECTED_TOKEN\" && test -n \"$AWS_SECRET_ACCESS_KEY\""
    environment = { TOKEN = var.token }
  }
}
"#;

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn credentials_reach_terraform_but_never_the_disk() {
    let tf = executor();
    let work = tempfile::tempdir().unwrap();
    let secret = format!("secret-{}", std::process::id());
    let key = format!("aws-key-{}", std::process::id());
    let mut ctx = context(
        work.path(),
        "creds",
        Operation::Deploy,
        component(
            &[("main.tf", USES_CREDENTIALS)],
            &[("token", "${outpost-secret:api_token}")],
        ),
    );
    ctx.env = BTreeMap::from([
        ("AWS_SECRET_ACCESS_KEY".to_owned(), key.clone()),
        (
            outpost_runner::secrets::env_name("api_token"),
            secret.clone(),
        ),
        ("EXPECTED_TOKEN".to_owned(), secret.clone()),
    ]);
    let diff = tf.plan(&ctx).await.unwrap();
    // The provisioner checks the values arrived (it fails the apply otherwise).
    tf.apply(&ctx, &diff).await.unwrap();
    tf.observe(&ctx, &Value::Null).await.unwrap();
    let written = files(work.path());
    assert!(written.iter().any(|f| f.ends_with("terraform.tfstate")));
    for file in written {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&secret),
            "{} holds the secret",
            file.display()
        );
        assert!(
            !text.contains(&key),
            "{} holds the credential",
            file.display()
        );
    }

    // Without the secret in the environment, planning fails naming it.
    ctx.env
        .remove(&outpost_runner::secrets::env_name("api_token"));
    let err = format!("{:#}", tf.plan(&ctx).await.unwrap_err());
    assert!(err.contains("\"api_token\""), "{err}");
}

const SLOW: &str = r#"
variable "seconds" {
  type = string
}
resource "terraform_data" "slow" {
  input = "a"
  provisioner "local-exec" {
    command = "echo started > sleep.started; exec sleep ${var.seconds}"
  }
}
"#;

/// Whether a host process runs `sleep SECONDS` (terraform runs in its own pid namespace,
/// so its pids mean nothing here: the unique argument finds it).
fn sleeping(seconds: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let dir = entry.path();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        // A killed process may linger as a zombie until reaped: that is not running.
        let alive = std::fs::read_to_string(dir.join("stat")).is_ok_and(|stat| {
            !matches!(stat.rsplit(") ").next().map(|s| &s[..1]), Some("Z" | "X"))
        });
        alive && args.len() >= 2 && args[0].ends_with(b"sleep") && args[1] == seconds.as_bytes()
    })
}

#[tokio::test]
async fn timeout_kills_terraform_and_what_it_started() {
    let tf = executor();
    let work = tempfile::tempdir().unwrap();
    let started_file = work.path().join("module/sleep.started");
    let seconds = format!("300.{}", std::process::id());
    let mut ctx = context(
        work.path(),
        "slow",
        Operation::Deploy,
        component(&[("main.tf", SLOW)], &[("seconds", &seconds)]),
    );
    let diff = tf.plan(&ctx).await.unwrap();
    ctx.timeout = Duration::from_secs(5);
    let started = Instant::now();
    let err = tf.apply(&ctx, &diff).await.unwrap_err();
    assert!(
        matches!(err, outpost_runner::executor::ExecutorError::TimedOut(_)),
        "{err:#}"
    );
    let err = format!("{err:#}");
    assert!(
        err.contains("`terraform apply` was killed: the step's timeout of 5s passed"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(started_file.exists(), "the provisioner started");
    let what = "the provisioner's sleep to end (it survived the timeout)";
    outpost_testing::eventually(10, what, async || (!sleeping(&seconds)).then_some(())).await;
}

#[tokio::test]
async fn local_directory_sources_and_sandbox_plans() {
    let roots = tempfile::tempdir().unwrap();
    let tf = executor().with_module_roots(vec![roots.path().to_owned()]);
    let module = roots.path().join("db");
    std::fs::create_dir_all(module.join("extra")).unwrap();
    std::fs::write(module.join("main.tf"), DATABASE).unwrap();
    std::fs::write(module.join("extra/README.md"), "copied too").unwrap();
    let work = tempfile::tempdir().unwrap();
    let source = format!("file://{}", module.display());
    let desired = json!({"sandbox": {"type": "terraform_module", "source": source,
        "variables": {"size": "s", "engine": "e"}}});
    let ctx = context(
        work.path(),
        "provision",
        Operation::Provision,
        desired.clone(),
    );
    let diff = tf.plan(&ctx).await.unwrap();
    assert_eq!(diff.summary, "2 to add, 0 to change, 0 to destroy");
    assert!(work.path().join("module/extra/README.md").exists());
    tf.apply(&ctx, &diff).await.unwrap();
    // Deprovision destroys it.
    let ctx = context(work.path(), "deprovision", Operation::Deprovision, desired);
    let diff = tf.plan(&ctx).await.unwrap();
    assert_eq!(diff.summary, "0 to add, 0 to change, 2 to destroy");
    tf.apply(&ctx, &diff).await.unwrap();

    // Nothing deployed: nothing to destroy, without running terraform.
    let empty = tempfile::tempdir().unwrap();
    let ctx = context(
        empty.path(),
        "t",
        Operation::Teardown,
        json!({"component": "x"}),
    );
    let diff = tf.plan(&ctx).await.unwrap();
    assert!(!diff.changes);
    tf.apply(&ctx, &diff).await.unwrap();

    // Registry addresses are not fetched.
    let remote = json!({"terraform": {"source": "registry.terraform.io/acme/db/aws"}});
    let ctx = context(empty.path(), "r", Operation::Deploy, remote);
    let err = format!("{:#}", tf.plan(&ctx).await.unwrap_err());
    assert!(err.contains("cannot be fetched by the runner"), "{err}");
}

#[tokio::test]
async fn escaping_file_names_and_sources_outside_the_roots_fail_before_anything_is_written() {
    let roots = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("main.tf"), DATABASE).unwrap();
    let tf = executor().with_module_roots(vec![roots.path().to_owned()]);
    let work = tempfile::tempdir().unwrap();
    let escape = work.path().join("escaped.tf");
    let cases = [
        (
            json!({"terraform": {"files": {"main.tf": DATABASE, "/etc/cron.d/outpost": "x"}}}),
            r#"inline file "/etc/cron.d/outpost" refused: it is an absolute path"#.to_owned(),
        ),
        (
            json!({"terraform": {"files": {"main.tf": DATABASE, "../escaped.tf": "x"}}}),
            r#"inline file "../escaped.tf" refused: it has a `..` component"#.to_owned(),
        ),
        (
            json!({"terraform": {"files": {"main.tf": DATABASE, ".terraform/providers/p": "x"}}}),
            r#"inline file ".terraform/providers/p" refused: it is inside terraform's state"#
                .to_owned(),
        ),
        (
            json!({"terraform": {"source": elsewhere.path().display().to_string()}}),
            format!(
                "module source {:?} refused: it resolves to",
                elsewhere.path().display().to_string()
            ),
        ),
    ];
    for (desired, says) in cases {
        let ctx = context(work.path(), "p", Operation::Deploy, desired);
        let err = format!("{:#}", tf.plan(&ctx).await.unwrap_err());
        assert!(err.contains(&says), "{says}: {err}");
        // Nothing was laid out: no module directory, nothing beside the work dir.
        assert!(!work.path().join("module").exists(), "{says}");
        assert!(!escape.exists(), "{says}");
    }
    // Without any module root, no local directory is accepted.
    let ctx = context(
        work.path(),
        "p",
        Operation::Deploy,
        json!({"terraform": {"source": roots.path().display().to_string()}}),
    );
    let err = format!("{:#}", executor().plan(&ctx).await.unwrap_err());
    assert!(err.contains("has no --module-root"), "{err}");
}

/// An executor keeping state in bucket `outpost-acme-state` at an endpoint nothing
/// listens on: these cases are refused before terraform would reach it.
fn with_bucket() -> TerraformExecutor {
    executor().with_state_backend(Some(StateBackend {
        bucket: "outpost-acme-state".into(),
        endpoint: Some("http://127.0.0.1:1".into()),
    }))
}

#[tokio::test]
async fn a_state_bucket_is_never_bypassed_local_state_second_backends_and_its_file_are_refused() {
    // Local state from before the runner had a bucket: refused, naming the file, the
    // bucket and the key, and left as it was.
    let work = tempfile::tempdir().unwrap();
    let desired = component(
        &[("main.tf", DATABASE)],
        &[("size", "small"), ("engine", "pg")],
    );
    let ctx = context(work.path(), "local", Operation::Deploy, desired.clone());
    let diff = executor().plan(&ctx).await.unwrap();
    executor().apply(&ctx, &diff).await.unwrap();
    let local = work.path().join("module/terraform.tfstate");
    let before = std::fs::read(&local).unwrap();
    let ctx = context(work.path(), "bucket", Operation::Deploy, desired);
    let err = format!("{:#}", with_bucket().plan(&ctx).await.unwrap_err());
    assert!(
        err.contains(&format!(
            "{} holds local terraform state, but this runner keeps state in bucket \
             outpost-acme-state (key components/database/terraform.tfstate)",
            local.display()
        )) && err.contains("terraform init -migrate-state"),
        "{err}"
    );
    assert_eq!(std::fs::read(&local).unwrap(), before);
    assert!(!work.path().join("plans/bucket.tfplan").exists());

    // A module declaring a backend of its own (the vendor's bucket, say) cannot take the
    // state elsewhere: terraform refuses the second backend before reaching any.
    let work = tempfile::tempdir().unwrap();
    let elsewhere = component(
        &[
            ("main.tf", DATABASE),
            ("backend.tf", "terraform {\n  backend \"local\" {}\n}\n"),
        ],
        &[("size", "small"), ("engine", "pg")],
    );
    let mut ctx = context(work.path(), "elsewhere", Operation::Deploy, elsewhere);
    // What the Plan's role brings (terraform's S3 backend needs a region).
    ctx.env.insert("AWS_REGION".into(), "us-east-2".into());
    let err = format!("{:#}", with_bucket().plan(&ctx).await.unwrap_err());
    assert!(err.contains("Duplicate backend configuration"), "{err}");
    assert!(!work.path().join("module/terraform.tfstate").exists());

    // Nor overwrite the runner's backend file.
    let work = tempfile::tempdir().unwrap();
    let forged = component(
        &[("main.tf", DATABASE), (BACKEND_FILE, "{}")],
        &[("size", "small"), ("engine", "pg")],
    );
    let ctx = context(work.path(), "forged", Operation::Deploy, forged);
    let err = format!("{:#}", with_bucket().plan(&ctx).await.unwrap_err());
    assert!(
        err.contains("inline file \"outpost_backend.tf.json\" refused: the runner writes it"),
        "{err}"
    );
    assert!(!work.path().join("module").exists());
}
