//! `outpost runner` with a test executor registered for the `job` and
//! `terraform_module` types, for the runner core's end-to-end tests (the real
//! executors are tested in their own suites).
//!
//! The test executor writes each entity's desired state to `$OUTPOST_TEST_OUTPUT/<entity>.json`
//! and appends `<plan> <runner>` to `$OUTPOST_TEST_OUTPUT/applies.log` for every apply
//! that changes something, so a test can count applies. `OUTPOST_TEST_APPLY_MS` makes
//! each apply take that long between the two writes (a window to kill the runner in).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::future::BoxFuture;
use outpost_api::PolicyInput;
use outpost_runner::executor::{Applied, Diff, Executor, ExecutorError, StepContext, typed};
use outpost_runner::{Executors, RunnerArgs};
use serde_json::{Value, json};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    runner: RunnerArgs,
}

/// Files as the "live state": one per entity.
struct FileExecutor {
    out: PathBuf,
    runner: String,
    apply_delay: Duration,
}

impl FileExecutor {
    fn target(&self, ctx: &StepContext) -> PathBuf {
        self.out.join(format!("{}.json", ctx.entity))
    }
}

impl Executor for FileExecutor {
    fn plan<'a>(&'a self, ctx: &'a StepContext) -> BoxFuture<'a, Result<Diff, ExecutorError>> {
        typed(async move {
            let wanted = serde_json::to_string(&ctx.desired)?;
            let live = std::fs::read_to_string(self.target(ctx)).ok();
            let changes = live.as_deref() != Some(wanted.as_str());
            Ok(Diff {
                input: PolicyInput::Plan,
                document: json!({"entity": ctx.entity, "desired": ctx.desired}),
                summary: if changes { "1 to write" } else { "no changes" }.into(),
                changes,
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
        typed(async move {
            let target = self.target(ctx);
            if diff.changes {
                let mut log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.out.join("applies.log"))?;
                log.write_all(format!("{} {}\n", ctx.plan, self.runner).as_bytes())?;
                log.sync_all()?;
                tokio::time::sleep(self.apply_delay).await;
                let tmp = target.with_extension("tmp");
                std::fs::write(&tmp, serde_json::to_string(&ctx.desired)?)?;
                std::fs::rename(&tmp, &target)?;
            }
            let secrets: Vec<&String> = ctx.env.keys().collect();
            Ok(Applied {
                outputs: BTreeMap::from([
                    ("file".to_owned(), json!(target.display().to_string())),
                    ("secretsSeen".to_owned(), json!(secrets)),
                ]),
                log: String::new(),
                last_applied: ctx.desired.clone(),
                audit: Default::default(),
            })
        })
    }

    fn observe<'a>(
        &'a self,
        ctx: &'a StepContext,
        _last_applied: &'a Value,
    ) -> BoxFuture<'a, Result<Value, ExecutorError>> {
        typed(async move {
            let text = std::fs::read_to_string(self.target(ctx))?;
            Ok(serde_json::from_str(&text)?)
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Cli::parse().runner;
    let out: PathBuf = std::env::var_os("OUTPOST_TEST_OUTPUT")
        .map(Into::into)
        .unwrap_or_else(|| args.state_dir.join("out"));
    std::fs::create_dir_all(&out)?;
    let apply_delay = Duration::from_millis(
        std::env::var("OUTPOST_TEST_APPLY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let executor = Arc::new(FileExecutor {
        out,
        runner: args.runner_name().to_owned(),
        apply_delay,
    });
    let mut executors = Executors::new();
    executors.insert("job", executor.clone());
    executors.insert("terraform_module", executor);
    outpost_runner::run(args, executors).await
}
