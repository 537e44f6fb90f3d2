//! The `terraform_module` executor: drives the real `terraform` binary.
//!
//! * **plan**: lays the module out in the entity's work dir ([`workspace`]), then
//!   `terraform init`, `terraform plan -out` (`-destroy` for `teardown` and
//!   `deprovision`) and `terraform show -json` of the saved plan: that JSON, with what
//!   terraform marks sensitive redacted, is the [`Diff`] document policies see (input
//!   `terraform`).
//! * **apply**: checks the saved plan still says what the Diff said, then
//!   `terraform apply` of *that saved plan* (never a fresh one; terraform itself refuses
//!   it if the state moved), `terraform output -json` for outputs and `terraform show
//!   -json` for `last_applied`.
//! * **observe**: `terraform plan -refresh-only -out` and the refreshed state from its
//!   `show -json` (state on disk is not changed).
//!
//! Module sources: a local directory (absolute path or `file://` URL) under one of the
//! runner's `--module-root`s, copied; or the module inline (a component's
//! `terraform.files`, the sandbox's `files`), whose file names must stay inside the
//! module directory ([`module_paths`]). Registry and VCS addresses are refused: the
//! runner does not fetch modules. Teardown Plans (whose desired state names no module)
//! destroy what the work dir holds.
//!
//! Sandbox: every terraform command runs under bubblewrap with the job steps' allow-list
//! ([`super::job::sandbox`]) and the network of a step with `network: true` (providers
//! reach their APIs; the instance metadata service and the host's loopback do not
//! answer, as for job steps: [`sandbox::network`]): it sees
//! the system directories, its module directory and the entity's `plans/` directory
//! (read-write), and read-only the terraform binary, the runner's CLI configuration
//! (`TF_CLI_CONFIG_FILE`: [`providers`]) and the provider mirrors. Never the runner's
//! state dir, keys, journal, configuration, secrets dir or other components' state.
//!
//! Before any of it runs: the module's static configuration ([`configuration`]) is read,
//! providers not on the customer's allow-list ([`ProviderAllowList`]) refuse the Plan,
//! and [`Executor::configuration`] hands it to the runner for the customer's policies
//! (input `static`).
//!
//! Secrets: the step environment ([`StepContext::env`], the role's credentials and
//! resolved secrets) goes only into terraform's process environment; variables that
//! reference a secret are passed as `TF_VAR_<name>`, never in the variables file.
//! Terraform itself records variable values in saved plans and resources' attributes in
//! its state, as it always does. Sensitive outputs are *not* reported in
//! [`Applied::outputs`] (secret values never enter the control plane): a template that
//! references one fails as undefined. Normalised state redacts sensitive values.
//!
//! Why this file stays whole (~770 lines): it is the executor's one sequence around the
//! `terraform` binary (lay out, init, plan, show, apply, refresh-only observe) and the
//! error type every step returns; the parts that stand alone are already their own
//! modules (`workspace`, `configuration`, `providers`, `plan_json`, `module_paths`).
//! Splitting the sequence would make a reader jump between files to follow one apply.

pub mod configuration;
pub mod module_paths;
mod plan_json;
pub mod providers;
mod state_backend;
mod workspace;

use super::child::{ChildError, Finished, OUTPUT_LIMIT};
use super::job::sandbox::{self, Bind, Sandbox};
use super::secret_ref::UnresolvedSecret;
use super::{Applied, Diff, Executor, ExecutorError, Purpose, StepContext, typed};
use configuration::{Configuration, ConfigurationError};
use futures::future::BoxFuture;
use outpost_api::{Operation, PolicyInput};
pub use providers::{NotAllowed, ProviderAllowList};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

pub use plan_json::REDACTED;
pub use state_backend::{BACKEND_FILE, StateBackend};

/// What went wrong driving terraform.
#[derive(Debug, thiserror::Error)]
pub enum TerraformError {
    /// The desired state does not describe a terraform module.
    #[error("desired state is not a terraform module: {0}")]
    InvalidDesiredState(String),
    /// The module source is not a local directory.
    #[error(
        "module source {0:?} cannot be fetched by the runner: use an absolute directory path, \
         a file:// URL, or terraform.files"
    )]
    UnsupportedSource(String),
    /// An inline file name would write outside the module directory, or into
    /// terraform's own state and caches.
    #[error("inline file {name:?} refused: {reason}")]
    UnsafeFileName {
        /// The name, as the desired state gives it.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// A local module source is not under the runner's module roots.
    #[error("module source {module:?} refused: {reason}")]
    SourceOutsideRoots {
        /// The source, as the desired state gives it.
        module: String,
        /// Why it is refused.
        reason: String,
    },
    /// The module's static configuration cannot be read (so it cannot be checked).
    #[error("the module's configuration cannot be checked before it runs: {0}")]
    Configuration(#[from] ConfigurationError),
    /// The module needs a provider the allow-list does not name.
    #[error(transparent)]
    NotAllowed(#[from] NotAllowed),
    /// A variable references a secret the step does not have.
    #[error(transparent)]
    Secret(#[from] UnresolvedSecret),
    /// bubblewrap cannot sandbox terraform here, or its network could not be set up.
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// A file operation in the work dir failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// terraform could not be run or timed out.
    #[error(transparent)]
    Child(#[from] ChildError),
    /// The step's timeout passed while terraform ran; its process group was killed.
    #[error(
        "`terraform {command}` was killed: the step's timeout of {after:?} passed; last output:\n{output}"
    )]
    TimedOut {
        /// The subcommand.
        command: String,
        /// The step's timeout.
        after: Duration,
        /// The tail of its output.
        output: String,
    },
    /// terraform exited non-zero.
    #[error("`terraform {command}` failed with exit code {code}:\n{output}")]
    Failed {
        /// The subcommand.
        command: String,
        /// Its exit code.
        code: i32,
        /// The tail of its output.
        output: String,
    },
    /// terraform printed JSON that does not parse.
    #[error("`terraform {command}` printed invalid JSON")]
    Json {
        /// The subcommand.
        command: String,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The state is in the bucket, but the module is not in the work dir (a new runner):
    /// nothing to observe until a Plan lays it out.
    #[error(
        "{0} is empty: no Plan of this entity ran on this runner yet, so there is no module to observe"
    )]
    NotLaidOut(String),
    /// The module directory holds local state while the runner keeps state in the
    /// install's bucket.
    #[error(
        "{path} holds local terraform state, but this runner keeps state in bucket {bucket} \
         (key {key}): move it there first (`terraform init -migrate-state` in that \
         directory, whose {BACKEND_FILE} names the bucket, with a lifecycle role's \
         credentials), or remove it if the bucket already holds this state"
    )]
    LocalState {
        /// The local state file.
        path: String,
        /// The state bucket.
        bucket: String,
        /// The entity's object in it.
        key: String,
    },
    /// The saved plan is missing or no longer says what the Diff said.
    #[error("saved plan for Plan {plan}: {reason}")]
    SavedPlan {
        /// The Plan's name.
        plan: String,
        /// What is wrong.
        reason: String,
    },
}

/// Environment variables passed on from the runner's own environment: what terraform
/// needs to run (and the customer's terraform settings, `TF_*`, less [`OWN_ENV`]).
/// Everything else — the runner's token among it — stays out of terraform's
/// environment. `PATH` and `HOME` are the sandbox's own.
const PASSED_ENV: [&str; 6] = [
    "LANG",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "no_proxy",
];

/// How long `plan` and `apply` wait for terraform's state lock, which a terraform run in
/// the module directory outside the runner (the customer's own, by hand) may hold. The
/// runner's own terraform never outlives it: bubblewrap's `--die-with-parent` kills the
/// sandbox, and terraform with it, when the runner dies.
const LOCK_TIMEOUT: &str = "-lock-timeout=300s";

/// Terraform settings the runner decides, whatever its own environment says: the CLI
/// configuration (the provider allow-list), the plugin cache and the data directory
/// (which would move providers and `.terraform` out of the sandboxed module directory).
const OWN_ENV: [&str; 3] = ["TF_CLI_CONFIG_FILE", "TF_PLUGIN_CACHE_DIR", "TF_DATA_DIR"];

/// The runner's terraform CLI configuration, in the entity's work dir (outside the
/// module directory terraform may write).
const CLI_CONFIG: &str = "terraform.rc";

/// The `terraform_module` executor.
#[derive(Debug, Clone)]
pub struct TerraformExecutor {
    binary: PathBuf,
    module_roots: Vec<PathBuf>,
    state: Option<StateBackend>,
    sandbox: Sandbox,
    providers: ProviderAllowList,
}

impl Default for TerraformExecutor {
    /// `terraform` from `PATH`.
    fn default() -> Self {
        Self::new("terraform")
    }
}

impl TerraformExecutor {
    /// An executor running the terraform binary at `binary` (the runner's
    /// `--terraform PATH`) under `bwrap` from `PATH`, with no provider allowed but the
    /// built-in one.
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            module_roots: Vec::new(),
            state: None,
            sandbox: Sandbox::new("bwrap"),
            providers: ProviderAllowList::default(),
        }
    }

    /// The same, accepting local module sources under `roots` (the runner's
    /// `--module-root`; none: inline modules only). See [`module_paths`].
    pub fn with_module_roots(self, roots: Vec<PathBuf>) -> Self {
        Self {
            module_roots: roots,
            ..self
        }
    }

    /// The same, keeping each entity's state in the install's S3 bucket (the runner's
    /// `--state-bucket`) instead of its work dir. See [`StateBackend`].
    pub fn with_state_backend(self, state: Option<StateBackend>) -> Self {
        Self { state, ..self }
    }

    /// Whether the entity may have state: always with a bucket (the bucket knows; a new
    /// runner's empty work dir does not), else when its work dir holds a state file.
    fn may_have_state(&self, dir: &Path) -> bool {
        self.state.is_some() || dir.join("terraform.tfstate").exists()
    }

    /// `terraform init` in `dir`, with the state backend configured first.
    async fn init(
        &self,
        ctx: &StepContext,
        dir: &Path,
        deadline: Instant,
    ) -> Result<(), TerraformError> {
        if let Some(state) = &self.state {
            let key = StateBackend::key(ctx.operation, &ctx.entity);
            // Terraform reaches the endpoint from the sandbox's network namespace.
            let mut state = state.clone();
            if self.sandbox.network().host_loopback
                && let Some(seen) = state
                    .endpoint
                    .as_deref()
                    .and_then(super::job::loopback_as_seen_from_a_step)
            {
                state.endpoint = Some(seen);
            }
            state.configure(dir, &key).await?;
        }
        self.checked(
            ctx,
            dir,
            &["init", "-input=false", "-no-color"],
            deadline,
            &[0],
        )
        .await?;
        Ok(())
    }

    /// Runs terraform in `sandbox` (the runner's `--bwrap` and the network job steps
    /// get: `--sandbox-blocked-address`, `--sandbox-host-loopback`).
    pub fn with_sandbox(self, sandbox: Sandbox) -> Self {
        Self { sandbox, ..self }
    }

    /// Lets terraform install and run the providers of `providers` (the runner's
    /// `--terraform-providers` and `--terraform-provider-mirror`).
    pub fn with_providers(mut self, providers: ProviderAllowList) -> Self {
        self.providers = providers;
        self
    }

    /// The terraform binary as an absolute path (searched in `PATH` when it is a bare
    /// name), so that it can be bound into the sandbox.
    fn binary_path(&self) -> PathBuf {
        let named = &self.binary;
        let found = if named.components().count() > 1 {
            Some(named.clone())
        } else {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(named))
                    .find(|candidate| candidate.is_file())
            })
        };
        found
            .and_then(|p| std::fs::canonicalize(p).ok())
            .unwrap_or_else(|| named.clone())
    }

    /// Reads the static configuration of the module in `dir`, refusing providers the
    /// allow-list does not name.
    async fn checked_configuration(&self, dir: &Path) -> Result<Configuration, TerraformError> {
        let dir = dir.to_owned();
        let config = tokio::task::spawn_blocking(move || Configuration::read(&dir))
            .await
            .map_err(|e| TerraformError::Io {
                what: "reading the module's configuration".into(),
                source: std::io::Error::other(e),
            })??;
        self.providers.check(&config)?;
        Ok(config)
    }

    /// Lays the module out (a plan of a deploy) or takes what the work dir holds (a
    /// destroy, an observation) and reads its checked configuration; `None` when there
    /// is nothing terraform would run.
    async fn configuration_step(
        &self,
        ctx: &StepContext,
        purpose: Purpose,
    ) -> Result<Option<Configuration>, TerraformError> {
        let dir = workspace::module_dir(&ctx.work_dir);
        if purpose == Purpose::Observe || Self::destroys(ctx.operation) {
            if !self.may_have_state(&dir) {
                return Ok(None);
            }
            // With a bucket, a wiped work dir still has state to tear down: terraform
            // runs in an empty module directory (the state names the providers, which
            // the CLI configuration still limits).
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|source| TerraformError::Io {
                    what: format!("creating {}", dir.display()),
                    source,
                })?;
        } else {
            let mut module = workspace::module_of(&ctx.desired)?.ok_or_else(|| {
                TerraformError::InvalidDesiredState("it has neither terraform nor sandbox".into())
            })?;
            if let workspace::Origin::Directory(source) = &mut module.origin {
                *source = module_paths::source(source, &self.module_roots)?;
            }
            workspace::lay_out(&dir, &module).await?;
        }
        Ok(Some(self.checked_configuration(&dir).await?))
    }

    /// Whether the Plan removes what the module manages.
    fn destroys(operation: Operation) -> bool {
        matches!(operation, Operation::Teardown | Operation::Deprovision)
    }

    /// Runs `terraform ARGS` in `dir` with the step's environment, before `deadline`.
    async fn terraform(
        &self,
        ctx: &StepContext,
        dir: &Path,
        args: &[&str],
        deadline: Instant,
        keep_stdout: bool,
    ) -> Result<Finished, TerraformError> {
        let io = |what: String| move |source| TerraformError::Io { what, source };
        let plans = workspace::plans_dir(&ctx.work_dir);
        tokio::fs::create_dir_all(&plans)
            .await
            .map_err(io(format!("creating {}", plans.display())))?;
        let cli_config = ctx.work_dir.join(CLI_CONFIG);
        tokio::fs::write(&cli_config, self.providers.cli_config())
            .await
            .map_err(io(format!("writing {}", cli_config.display())))?;
        // Read by terraform as the sandbox's uid, whatever the runner's umask.
        tokio::fs::set_permissions(&cli_config, std::fs::Permissions::from_mode(0o644))
            .await
            .map_err(io(format!("making {} readable", cli_config.display())))?;
        let binary = self.binary_path();
        let mut binds = vec![
            Bind::Writable(&plans),
            Bind::ReadOnly(&cli_config),
            Bind::ReadOnly(&binary),
        ];
        binds.extend(self.providers.mirrors().map(Bind::ReadOnly));
        let mut argv = vec![binary.as_os_str()];
        argv.extend(args.iter().map(OsStr::new));
        let secret_variables = match workspace::module_of(&ctx.desired).ok().flatten() {
            Some(module) => workspace::secret_variables(&module.variables, &ctx.env)?,
            None => Default::default(),
        };
        let mut sandboxed = self.sandbox.command(Some(dir), true, &binds, &argv).await?;
        let command = &mut sandboxed.command;
        for (name, value) in std::env::vars() {
            let terraform_setting = name.starts_with("TF_") && !OWN_ENV.contains(&name.as_str());
            if PASSED_ENV.contains(&name.as_str()) || terraform_setting {
                command.env(name, value);
            }
        }
        command
            .env("PATH", super::job::SANDBOX_PATH)
            .env("HOME", "/tmp")
            .env("TF_CLI_CONFIG_FILE", &cli_config)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .envs(&ctx.env)
            .envs(secret_variables);
        // An AWS endpoint on the host's loopback (an emulator, a local egress proxy) is,
        // from the sandbox's network namespace, the relay's gateway: reachable only when
        // the customer lets the sandbox reach the host's loopback (as job steps).
        if self.sandbox.network().host_loopback {
            for (name, value) in &ctx.env {
                if name.starts_with("AWS_ENDPOINT_URL")
                    && let Some(seen) = super::job::loopback_as_seen_from_a_step(value)
                {
                    command.env(name, seen);
                }
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = remaining.max(Duration::from_millis(1));
        match sandboxed.run(timeout, OUTPUT_LIMIT, keep_stdout).await {
            Err(ChildError::TimedOut { output, .. }) => Err(TerraformError::TimedOut {
                command: args.first().copied().unwrap_or_default().to_owned(),
                after: ctx.timeout,
                output,
            }),
            done => Ok(done?),
        }
    }

    /// Like [`Self::terraform`], failing on exit codes other than `ok`.
    async fn checked(
        &self,
        ctx: &StepContext,
        dir: &Path,
        args: &[&str],
        deadline: Instant,
        ok: &[i32],
    ) -> Result<Finished, TerraformError> {
        let done = self.terraform(ctx, dir, args, deadline, false).await?;
        if ok.contains(&done.exit_code()) {
            Ok(done)
        } else {
            Err(TerraformError::Failed {
                command: args.first().copied().unwrap_or_default().to_owned(),
                code: done.exit_code(),
                output: done.output,
            })
        }
    }

    /// Runs a JSON-printing subcommand and parses what it printed.
    async fn json(
        &self,
        ctx: &StepContext,
        dir: &Path,
        args: &[&str],
        deadline: Instant,
    ) -> Result<Value, TerraformError> {
        let command = args.first().copied().unwrap_or_default().to_owned();
        let done = self.terraform(ctx, dir, args, deadline, true).await?;
        if done.exit_code() != 0 {
            return Err(TerraformError::Failed {
                command,
                code: done.exit_code(),
                output: done.output,
            });
        }
        serde_json::from_slice(&done.stdout)
            .map_err(|source| TerraformError::Json { command, source })
    }

    async fn plan_step(&self, ctx: &StepContext) -> Result<Diff, TerraformError> {
        let deadline = Instant::now() + ctx.timeout;
        let dir = workspace::module_dir(&ctx.work_dir);
        let destroy = Self::destroys(ctx.operation);
        // Laid out and checked again here, whether or not the runner asked for the
        // configuration first: nothing runs unchecked.
        if self.configuration_step(ctx, Purpose::Plan).await?.is_none() {
            return Ok(nothing_deployed());
        }
        let plan_file = workspace::plan_file(&ctx.work_dir, &ctx.plan);
        let plan_path = plan_file.to_string_lossy();
        self.init(ctx, &dir, deadline).await?;
        let out = format!("-out={plan_path}");
        let mut args = vec![
            "plan",
            "-input=false",
            "-no-color",
            "-detailed-exitcode",
            LOCK_TIMEOUT,
            &out,
        ];
        if destroy {
            args.push("-destroy");
        }
        let planned = self.checked(ctx, &dir, &args, deadline, &[0, 2]).await?;
        let shown = self
            .json(
                ctx,
                &dir,
                &["show", "-json", "-no-color", &plan_path],
                deadline,
            )
            .await?;
        let document = plan_json::redacted_plan(&shown);
        Ok(Diff {
            input: PolicyInput::Terraform,
            summary: plan_json::summary(&document),
            changes: planned.exit_code() == 2,
            resources: None,
            basis: Value::Null,
            document,
        })
    }

    async fn apply_step(&self, ctx: &StepContext, diff: &Diff) -> Result<Applied, TerraformError> {
        let deadline = Instant::now() + ctx.timeout;
        let dir = workspace::module_dir(&ctx.work_dir);
        if diff.document["nothingDeployed"] == true {
            return Ok(Applied {
                log: "nothing deployed: nothing to destroy\n".into(),
                last_applied: plan_json::normalised_state(&Value::Null),
                ..Applied::default()
            });
        }
        let plan_file = workspace::plan_file(&ctx.work_dir, &ctx.plan);
        let plan_path = plan_file.to_string_lossy();
        let saved_plan_error = |reason: String| TerraformError::SavedPlan {
            plan: ctx.plan.clone(),
            reason,
        };
        if !plan_file.exists() {
            return Err(saved_plan_error(format!(
                "{} is missing: plan the step again",
                plan_file.display()
            )));
        }
        let saved = self
            .json(
                ctx,
                &dir,
                &["show", "-json", "-no-color", &plan_path],
                deadline,
            )
            .await?;
        let saved = plan_json::redacted_plan(&saved);
        if plan_json::change_set(&saved) != plan_json::change_set(&diff.document) {
            return Err(saved_plan_error(
                "it no longer matches the diff policies saw".into(),
            ));
        }
        let applied = self
            .checked(
                ctx,
                &dir,
                &[
                    "apply",
                    "-input=false",
                    "-no-color",
                    LOCK_TIMEOUT,
                    &plan_path,
                ],
                deadline,
                &[0],
            )
            .await;
        // A saved plan applies once; a retry must plan again.
        let _ = tokio::fs::remove_file(&plan_file).await;
        let applied = applied?;
        self.live(ctx, &dir, deadline, applied.output).await
    }

    /// Outputs and normalised state as they are now, with `log` as the step's log.
    async fn live(
        &self,
        ctx: &StepContext,
        dir: &Path,
        deadline: Instant,
        log: String,
    ) -> Result<Applied, TerraformError> {
        let outputs = self
            .json(ctx, dir, &["output", "-json", "-no-color"], deadline)
            .await?;
        let state = self
            .json(ctx, dir, &["show", "-json", "-no-color"], deadline)
            .await?;
        Ok(Applied {
            outputs: reported_outputs(&outputs),
            log,
            last_applied: plan_json::normalised_state(&state["values"]),
            audit: Default::default(),
        })
    }

    /// A diff without changes: nothing is applied; the outputs and state are read as they
    /// are, and the saved plan is dropped.
    async fn unchanged_step(
        &self,
        ctx: &StepContext,
        diff: &Diff,
    ) -> Result<Applied, TerraformError> {
        let _ = tokio::fs::remove_file(workspace::plan_file(&ctx.work_dir, &ctx.plan)).await;
        if diff.document["nothingDeployed"] == true {
            return Ok(Applied {
                last_applied: plan_json::normalised_state(&Value::Null),
                ..Applied::default()
            });
        }
        let deadline = Instant::now() + ctx.timeout;
        let dir = workspace::module_dir(&ctx.work_dir);
        self.live(ctx, &dir, deadline, String::new()).await
    }

    async fn observe_step(&self, ctx: &StepContext) -> Result<Value, TerraformError> {
        let deadline = Instant::now() + ctx.timeout;
        let dir = workspace::module_dir(&ctx.work_dir);
        if self.state.is_some() && !dir.join(".terraform").exists() {
            // The bucket has the state, but this work dir not the module: a Plan lays it
            // out. Reporting nothing deployed would be a false drift.
            return Err(TerraformError::NotLaidOut(dir.display().to_string()));
        }
        if self
            .configuration_step(ctx, Purpose::Observe)
            .await?
            .is_none()
        {
            return Ok(plan_json::normalised_state(&Value::Null));
        }
        let plan_file = workspace::plan_file(&ctx.work_dir, "observe");
        let plan_path = plan_file.to_string_lossy();
        let out = format!("-out={plan_path}");
        let args = ["plan", "-refresh-only", "-input=false", "-no-color", &out];
        self.checked(ctx, &dir, &args, deadline, &[0]).await?;
        let refreshed = self
            .json(
                ctx,
                &dir,
                &["show", "-json", "-no-color", &plan_path],
                deadline,
            )
            .await;
        let _ = tokio::fs::remove_file(&plan_file).await;
        Ok(plan_json::normalised_state(
            &refreshed?["prior_state"]["values"],
        ))
    }
}

/// The Diff of a teardown of something never deployed.
fn nothing_deployed() -> Diff {
    Diff {
        input: PolicyInput::Terraform,
        document: json!({"nothingDeployed": true}),
        summary: "0 to add, 0 to change, 0 to destroy".into(),
        changes: false,
        resources: None,
        basis: Value::Null,
    }
}

/// `terraform output -json` as reported outputs: name to value, sensitive ones left out.
fn reported_outputs(outputs: &Value) -> BTreeMap<String, Value> {
    outputs
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, o)| o["sensitive"] != true)
        .map(|(name, o)| (name.clone(), o["value"].clone()))
        .collect()
}

impl Executor for TerraformExecutor {
    /// terraform records each resource it made in its state as it goes: the re-plan
    /// leaves what the cut apply completed alone.
    fn resumable(&self) -> bool {
        true
    }

    fn configuration<'a>(
        &'a self,
        ctx: &'a StepContext,
        purpose: Purpose,
    ) -> BoxFuture<'a, Result<Option<Diff>, ExecutorError>> {
        typed(async move {
            let Some(config) = self.configuration_step(ctx, purpose).await? else {
                return Ok(None);
            };
            let document = config.document(|source| self.providers.allows(source));
            let summary = format!(
                "{} provider(s), {} module call(s), {} resource(s)",
                config.providers.len(),
                config.modules.len(),
                config.resources.len()
            );
            Ok(Some(Diff {
                input: PolicyInput::Static,
                document,
                summary,
                changes: false,
                resources: None,
                basis: Value::Null,
            }))
        })
    }

    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move { Ok(self.plan_step(ctx).await?) })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move {
            match self.apply_step(ctx, diff).await {
                // terraform refuses a saved plan whose state moved: nothing was applied.
                Err(TerraformError::Failed {
                    command, output, ..
                }) if command == "apply" && output.contains("Saved plan is stale") => {
                    Err(super::Moved("terraform: the saved plan is stale".into()).into())
                }
                Err(TerraformError::SavedPlan { reason, .. }) => {
                    Err(super::Moved(format!("the saved plan: {reason}")).into())
                }
                done => Ok(done?),
            }
        })
    }

    fn unchanged<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move { Ok(self.unchanged_step(ctx, diff).await?) })
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(async move { Ok(self.observe_step(ctx).await?) })
    }
}
