//! The `job` executor: `job` components and Action `trigger` Plans, each step run under
//! bubblewrap (`bwrap`).
//!
//! There is no container runtime on the runner VM: a job's `image` is **not pulled**;
//! its `command` runs on the host's system directories, sandboxed. An Action's steps
//! run in order, `command` with `/bin/sh -c`, `script` with `/bin/sh -e -c`.
//!
//! Every step gets, from bubblewrap ([`sandbox`] says what is visible and why):
//! * the host's system directories read-only (an allow-list: never the runner's state
//!   dir, configuration, secrets or any home), a private `/tmp` (`--tmpfs /tmp`), a
//!   minimal `/dev` and a fresh `/proc`;
//! * new user, pid, ipc, uts, cgroup and network namespaces (`--unshare-all`), as uid
//!   [`sandbox::SANDBOX_ID`] inside its user namespace (and, when the runner is root,
//!   as the separate host uid [`sandbox::Sandbox::host_uid`]): no network at all unless the
//!   Action declares `network: true`; then a network namespace of the step's own whose
//!   outbound traffic slirp4netns relays, with the instance metadata service (and
//!   whatever else the runner's `--sandbox-blocked-address` lists) refused by the
//!   kernel ([`sandbox::network`]);
//! * one writable directory, [`job_dir`] of the entity's work dir, bound at the same
//!   path, as working directory, `HOME` and `OUTPOST_WORK_DIR`;
//! * an environment of only `PATH`, `HOME`, `OUTPOST_WORK_DIR`, the step's `env`
//!   (secret references `${outpost-secret:NAME}` resolved there, and only there: a
//!   command reads a secret as `$VAR`, so it never appears in argv) and the role's
//!   credentials from the step context's `env` (which win). A step gets only the
//!   secrets its own `env` references: the Plan's other resolved secrets
//!   (`OUTPOST_SECRET_*`) are not passed on. The environment is handed to bubblewrap as
//!   its own, never on its command line;
//! * `--die-with-parent` and `--new-session`: killing bubblewrap (on timeout) ends the
//!   sandbox's pid namespace and everything in it.
//!
//! The timeout (the smaller of the step context's and the Action's `timeoutSeconds`)
//! covers all steps. Output is captured per step, stdout and stderr interleaved, the
//! last 64 KiB behind a truncation marker. A non-zero exit fails the apply, naming the
//! step, its exit code and the tail of its output. The log and that tail have the
//! secret values of the step context masked ([`crate::mask`]), as everything the
//! runner reports has.

pub mod sandbox;
mod steps;

use super::child::{ChildError, OUTPUT_LIMIT};
use super::secret_ref::{self, UnresolvedSecret};
use super::{Applied, Diff, Executor, ExecutorError, StepContext, typed};
use crate::mask::Masker;
use futures::future::BoxFuture;
use outpost_api::PolicyInput;
use sandbox::{Sandbox, Sandboxed};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use steps::{JobRun, JobStep};
use tokio::time::Instant;

/// `PATH` inside the sandbox.
pub(crate) const SANDBOX_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Bytes of a failed step's output quoted in its error.
const ERROR_TAIL: usize = 2048;

/// What went wrong running a job.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The desired state is neither a job component nor an action.
    #[error("desired state is not a job or an action: {0}")]
    InvalidDesiredState(String),
    /// bubblewrap is missing or cannot create its namespaces here, or a step's network
    /// could not be set up.
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// The Diff given to apply is not what this desired state plans.
    #[error("the diff to apply is not the plan of this desired state")]
    DiffMismatch,
    /// A step's env references a secret the step does not have.
    #[error(transparent)]
    Secret(#[from] UnresolvedSecret),
    /// The work dir could not be created.
    #[error("creating the job directory {path}")]
    WorkDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A step could not be run or timed out.
    #[error("step {step}: {source}")]
    Child {
        /// The step's name.
        step: String,
        /// What happened.
        #[source]
        source: ChildError,
    },
    /// The timeout passed while a step ran; the sandbox was killed.
    #[error("step {step} was killed: the timeout of {after:?} passed; last output:\n{output}")]
    TimedOut {
        /// The step's name.
        step: String,
        /// The timeout.
        after: Duration,
        /// The end of its output.
        output: String,
    },
    /// A step exited non-zero.
    #[error("step {step} failed with exit code {code}; last output:\n{tail}")]
    StepFailed {
        /// The step's name.
        step: String,
        /// Its exit code (128 + signal when killed by one).
        code: i32,
        /// The end of its output.
        tail: String,
    },
}

/// The writable directory steps of an entity whose work dir is `work_dir` run in.
pub fn job_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("job")
}

/// The `job` executor.
#[derive(Debug, Clone)]
pub struct JobExecutor {
    sandbox: Sandbox,
}

impl Default for JobExecutor {
    /// `bwrap` from `PATH`.
    fn default() -> Self {
        Self::new("bwrap")
    }
}

impl JobExecutor {
    /// An executor sandboxing steps with the bubblewrap binary at `bwrap` and the
    /// default network settings ([`sandbox::NetworkSettings::default`]).
    pub fn new(bwrap: impl Into<PathBuf>) -> Self {
        Self::sandboxed_by(Sandbox::new(bwrap))
    }

    /// An executor running steps in `sandbox`.
    pub fn sandboxed_by(sandbox: Sandbox) -> Self {
        Self { sandbox }
    }

    /// Checks that bubblewrap runs and can create the namespaces steps get (run a no-op
    /// in them), so that a machine that cannot sandbox fails with a clear reason.
    pub async fn check(&self) -> Result<(), JobError> {
        Ok(self.sandbox.check().await?)
    }

    /// The sandboxed command for one step.
    async fn sandboxed(
        &self,
        step: &JobStep,
        dir: &Path,
        network: bool,
        ctx: &StepContext,
    ) -> Result<Sandboxed, JobError> {
        let mut sandboxed = self
            .sandbox
            .command(Some(dir), network, &[], &step.argv)
            .await?;
        let command = &mut sandboxed.command;
        command
            .env("PATH", SANDBOX_PATH)
            .env("HOME", dir)
            .env("OUTPOST_WORK_DIR", dir);
        for (name, value) in &step.env {
            command.env(name, secret_ref::resolve(value, &ctx.env)?);
        }
        // The role's credentials; the Plan's secrets only through the step's own env.
        command.envs(
            ctx.env
                .iter()
                .filter(|(name, _)| !name.starts_with(crate::secrets::ENV_PREFIX)),
        );
        // The runner's AWS endpoint on the host's loopback (an emulator, a local egress
        // proxy) is, from the step's own network namespace, the relay's gateway — and
        // reachable only when the customer lets steps reach the host's loopback.
        if network && self.sandbox.network().host_loopback {
            for (name, value) in &ctx.env {
                if name.starts_with("AWS_ENDPOINT_URL")
                    && let Some(seen) = loopback_as_seen_from_a_step(value)
                {
                    command.env(name, seen);
                }
            }
        }
        Ok(sandboxed)
    }

    async fn apply_run(&self, ctx: &StepContext, diff: &Diff) -> Result<Applied, JobError> {
        let run = JobRun::of(ctx)?;
        let timeout = run.timeout.map_or(ctx.timeout, |t| t.min(ctx.timeout));
        let deadline = Instant::now() + timeout;
        let document = run.document(ctx);
        if document != diff.document {
            return Err(JobError::DiffMismatch);
        }
        if run.steps.is_empty() {
            return Ok(Applied {
                outputs: BTreeMap::from([("steps".to_owned(), json!([]))]),
                log: String::new(),
                last_applied: document,
                audit: Default::default(),
            });
        }
        self.check().await?;
        let dir = job_dir(&ctx.work_dir);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|source| JobError::WorkDir {
                path: dir.clone(),
                source,
            })?;
        let masker = Masker::of_env(&ctx.env);
        let mut log = String::new();
        let mut results = Vec::new();
        for step in &run.steps {
            let sandboxed = self.sandboxed(step, &dir, run.network, ctx).await?;
            let started = Instant::now();
            let remaining = deadline.saturating_duration_since(started);
            let done = sandboxed
                .run(remaining.max(Duration::from_millis(1)), OUTPUT_LIMIT, false)
                .await
                .map_err(|source| match source {
                    ChildError::TimedOut { output, .. } => JobError::TimedOut {
                        step: step.name.clone(),
                        after: timeout,
                        output: masker.mask(&output),
                    },
                    source => JobError::Child {
                        step: step.name.clone(),
                        source,
                    },
                })?;
            let code = done.exit_code();
            // The whole output at once: a value split across reads is masked too.
            let output = masker.mask(&done.output);
            log.push_str(&format!("== step {} ==\n{}", step.name, output));
            if !output.is_empty() && !output.ends_with('\n') {
                log.push('\n');
            }
            log.push_str(&format!(
                "== step {} exited with code {code} ==\n",
                step.name
            ));
            if code != 0 {
                return Err(JobError::StepFailed {
                    step: step.name.clone(),
                    code,
                    tail: tail(&output, ERROR_TAIL),
                });
            }
            results.push(json!({
                "name": step.name,
                "exitCode": code,
                "durationMs": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "outputTruncated": done.truncated,
            }));
        }
        Ok(Applied {
            outputs: BTreeMap::from([("steps".to_owned(), Value::Array(results))]),
            log,
            last_applied: document,
            audit: Default::default(),
        })
    }
}

/// The last `limit` bytes of `text`, on a character boundary.
fn tail(text: &str, limit: usize) -> String {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

impl Executor for JobExecutor {
    /// The steps that would run; always a change (a job runs each time it is applied),
    /// except a teardown, which runs nothing.
    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move {
            let run = JobRun::of(ctx)?;
            let n = run.steps.len();
            Ok(Diff {
                input: PolicyInput::Plan,
                document: run.document(ctx),
                summary: format!("{n} step{} to run", if n == 1 { "" } else { "s" }),
                changes: n > 0,
                resources: None,
                basis: Value::Null,
            })
        })
    }

    fn apply<'a>(
        &'a self,
        ctx: &'a StepContext,
        diff: &'a Diff,
    ) -> BoxFuture<'a, Result<Applied, ExecutorError>> {
        typed(async move { Ok(self.apply_run(ctx, diff).await?) })
    }

    /// Jobs leave no live state to read back: what was applied is what is observed, so
    /// a job never drifts.
    fn observe<'a>(
        &'a self,
        _ctx: &'a StepContext,
        last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(async move { Ok(last_applied.clone()) })
    }
}

/// `url` (`http(s)://127.0.0.1…`, `localhost` or `[::1]`) with the host's loopback as a
/// step in its own network namespace reaches it: the relay's gateway
/// ([`sandbox::network::GATEWAY`]). Other URLs: `None`.
pub(super) fn loopback_as_seen_from_a_step(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    ["127.0.0.1", "localhost", "[::1]"].iter().find_map(|host| {
        let after = rest.strip_prefix(host)?;
        (after.is_empty() || after.starts_with([':', '/']))
            .then(|| format!("{scheme}://{}{after}", sandbox::network::GATEWAY))
    })
}

#[cfg(test)]
mod loopback_tests {
    use super::loopback_as_seen_from_a_step as seen;

    #[test]
    fn loopback_endpoints_are_the_relays_gateway_from_a_step() {
        assert_eq!(
            seen("http://127.0.0.1:5000").as_deref(),
            Some("http://10.0.2.2:5000")
        );
        assert_eq!(
            seen("https://localhost/x").as_deref(),
            Some("https://10.0.2.2/x")
        );
        assert_eq!(seen("http://[::1]:9").as_deref(), Some("http://10.0.2.2:9"));
        assert_eq!(seen("http://127.0.0.10:5000"), None);
        assert_eq!(seen("https://sts.amazonaws.com"), None);
        assert_eq!(seen("localhost:5000"), None);
    }
}
