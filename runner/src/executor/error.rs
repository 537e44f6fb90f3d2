//! What an executor's failure was, typed at the [`Executor`](super::Executor) interface.
//!
//! Inside, executors keep their own small error types (`TerraformError`,
//! `CloudFormationError`, `JobError`, `ChildError`...) and add context as they go; at the
//! interface the error is sorted by what failed, so the runner (and a reader) can tell
//! a refusal from a tool's failure or a cluster call's without matching on messages.
//! The message is the executor's, unchanged: every variant but [`ExecutorError::Moved`]
//! displays the error it carries, with its chain under `{:#}`, as before, so Plan logs
//! and audit events read the same.

use super::Moved;
use super::child::ChildError;
use super::cloudformation::CloudFormationError;
use super::job::JobError;
use super::terraform::{NotAllowed, TerraformError};

/// Why an executor call failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// Live state moved since the diff was computed: nothing was applied; the runner
    /// plans again and asks again.
    #[error(transparent)]
    Moved(#[from] Moved),
    /// Refused by the customer's configuration before any vendor code ran (a terraform
    /// provider not on the allow-list).
    #[error(transparent)]
    Refused(anyhow::Error),
    /// The tool the executor runs (terraform, a job's step, bubblewrap) ran past the
    /// step's timeout and was killed.
    #[error(transparent)]
    TimedOut(anyhow::Error),
    /// The tool the executor runs could not be started or exited non-zero.
    #[error(transparent)]
    Tool(anyhow::Error),
    /// A call to the Kubernetes cluster failed.
    #[error(transparent)]
    Cluster(anyhow::Error),
    /// A call to the cloud's API (CloudFormation) failed.
    #[error(transparent)]
    Cloud(anyhow::Error),
    /// Anything else: the desired state does not describe what the executor runs, a
    /// registry failed, the work dir could not be written.
    #[error(transparent)]
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for ExecutorError {
    /// Sorts an executor's error by the first typed cause in its chain.
    fn from(error: anyhow::Error) -> Self {
        let error = match error.downcast::<ExecutorError>() {
            Ok(typed) => return typed,
            Err(error) => error,
        };
        let error = match error.downcast::<Moved>() {
            Ok(moved) => return ExecutorError::Moved(moved),
            Err(error) => error,
        };
        for cause in error.chain() {
            if cause.is::<NotAllowed>() {
                return ExecutorError::Refused(error);
            }
            if let Some(terraform) = cause.downcast_ref::<TerraformError>() {
                match terraform {
                    TerraformError::NotAllowed(_) => return ExecutorError::Refused(error),
                    TerraformError::TimedOut { .. } => return ExecutorError::TimedOut(error),
                    TerraformError::Failed { .. } => return ExecutorError::Tool(error),
                    TerraformError::Child(ChildError::TimedOut { .. }) => {
                        return ExecutorError::TimedOut(error);
                    }
                    TerraformError::Child(_) => return ExecutorError::Tool(error),
                    _ => {}
                }
            }
            if let Some(job) = cause.downcast_ref::<JobError>() {
                match job {
                    JobError::TimedOut { .. } => return ExecutorError::TimedOut(error),
                    JobError::StepFailed { .. } => return ExecutorError::Tool(error),
                    _ => {}
                }
            }
            if let Some(CloudFormationError::Call { .. }) =
                cause.downcast_ref::<CloudFormationError>()
            {
                return ExecutorError::Cloud(error);
            }
            if let Some(child) = cause.downcast_ref::<ChildError>() {
                return match child {
                    ChildError::TimedOut { .. } => ExecutorError::TimedOut(error),
                    _ => ExecutorError::Tool(error),
                };
            }
            if cause.is::<kube_client::Error>() {
                return ExecutorError::Cluster(error);
            }
        }
        ExecutorError::Failed(error)
    }
}

/// An executor's future of `anyhow::Result` as the interface returns it: typed.
pub fn typed<'a, T>(
    work: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'a,
) -> futures::future::BoxFuture<'a, Result<T, ExecutorError>> {
    Box::pin(async move { work.await.map_err(ExecutorError::from) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_message_is_the_executors_unchanged() {
        let error = anyhow::anyhow!("no such table").context("reading state");
        let before = (format!("{error}"), format!("{error:#}"));
        let typed = ExecutorError::from(error);
        assert!(matches!(typed, ExecutorError::Failed(_)));
        assert_eq!((format!("{typed}"), format!("{typed:#}")), before);
        assert_eq!(before.1, "reading state: no such table");
    }

    #[test]
    fn moved_and_refusals_are_told_apart() {
        let moved = anyhow::Error::new(Moved("web changed".into()));
        let typed = ExecutorError::from(moved);
        assert!(matches!(&typed, ExecutorError::Moved(Moved(what)) if what == "web changed"));
        assert_eq!(
            typed.to_string(),
            "live state moved since planning: web changed"
        );

        let not_allowed = NotAllowed {
            denied: vec!["registry.terraform.io/evil/corp".into()],
            allowed: vec![],
        };
        let refused = Err::<(), _>(TerraformError::from(not_allowed))
            .context("laying out the module")
            .expect_err("an error");
        assert!(matches!(
            ExecutorError::from(refused),
            ExecutorError::Refused(_)
        ));
    }

    #[test]
    fn a_killed_tool_is_a_timeout_and_a_failed_one_a_tool_failure() {
        let killed = anyhow::Error::new(ChildError::TimedOut {
            program: "terraform".into(),
            after: std::time::Duration::from_secs(1),
            output: String::new(),
        });
        assert!(matches!(
            ExecutorError::from(killed),
            ExecutorError::TimedOut(_)
        ));
        let spawn = anyhow::Error::new(ChildError::Spawn {
            program: "bwrap".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        let typed = ExecutorError::from(spawn);
        assert!(matches!(typed, ExecutorError::Tool(_)));
        assert_eq!(typed.to_string(), "cannot start bwrap");
    }

    #[test]
    fn an_already_typed_error_keeps_its_kind() {
        let inner = ExecutorError::Refused(anyhow::anyhow!("no"));
        let wrapped = anyhow::Error::new(inner);
        assert!(matches!(
            ExecutorError::from(wrapped),
            ExecutorError::Refused(_)
        ));
    }
}
