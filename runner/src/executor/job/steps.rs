//! What a job Plan runs: the steps read out of its desired state, and the document
//! policies see.

use super::JobError;
use crate::executor::StepContext;
use outpost_api::{ActionSpec, JobSource, Operation};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// One step to run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStep {
    /// The step's name (the entity's for a job component).
    pub name: String,
    /// What runs inside the sandbox.
    pub argv: Vec<String>,
    /// Its declared environment, secret references unresolved.
    pub env: BTreeMap<String, String>,
    /// How the step is described to policies (`command`, `script` or `argv`).
    pub described: Value,
}

/// What a Plan runs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    /// `job` or `action`.
    pub kind: &'static str,
    /// A job's image (recorded, not pulled).
    pub image: Option<String>,
    /// The steps, in order.
    pub steps: Vec<JobStep>,
    /// Whether steps may reach the network.
    pub network: bool,
    /// The action's own timeout.
    pub timeout: Option<Duration>,
}

impl JobRun {
    /// Reads the steps out of a Plan's desired state: a rendered ComponentSpec with
    /// `job`, or a rendered ActionSpec. A teardown runs nothing.
    pub fn of(ctx: &StepContext) -> Result<Self, JobError> {
        let invalid = |e: serde_json::Error| JobError::InvalidDesiredState(e.to_string());
        let desired = &ctx.desired;
        if ctx.operation == Operation::Teardown {
            return Ok(Self {
                kind: "job",
                image: None,
                steps: Vec::new(),
                network: false,
                timeout: None,
            });
        }
        if let Some(job) = desired.get("job") {
            let job: JobSource = serde_json::from_value(job.clone()).map_err(invalid)?;
            if job.command.is_empty() {
                return Err(JobError::InvalidDesiredState(
                    "the job has no command (images are not run: there is no container \
                     runtime; the command runs on the host, sandboxed)"
                        .into(),
                ));
            }
            return Ok(Self {
                kind: "job",
                image: Some(job.image),
                steps: vec![JobStep {
                    name: ctx.entity.clone(),
                    described: json!({"argv": job.command}),
                    argv: job.command,
                    env: job.env,
                }],
                network: false,
                timeout: None,
            });
        }
        if desired.get("steps").is_some() {
            let action: ActionSpec = serde_json::from_value(desired.clone()).map_err(invalid)?;
            let steps = action
                .steps
                .iter()
                .map(|step| {
                    let (argv, described) = match (&step.command, &step.script) {
                        (Some(command), _) => (
                            vec!["/bin/sh".into(), "-c".into(), command.clone()],
                            json!({"command": command}),
                        ),
                        (None, Some(script)) => (
                            vec!["/bin/sh".into(), "-e".into(), "-c".into(), script.clone()],
                            json!({"script": script}),
                        ),
                        (None, None) => {
                            return Err(JobError::InvalidDesiredState(format!(
                                "step {} has neither command nor script",
                                step.name
                            )));
                        }
                    };
                    Ok(JobStep {
                        name: step.name.clone(),
                        argv,
                        env: step.env.clone(),
                        described,
                    })
                })
                .collect::<Result<_, _>>()?;
            return Ok(Self {
                kind: "action",
                image: None,
                steps,
                network: action.network,
                timeout: Some(action.timeout()),
            });
        }
        Err(JobError::InvalidDesiredState(
            "it has neither job nor steps".into(),
        ))
    }

    /// The document policies see (input `plan`-like): what runs, how.
    pub fn document(&self, ctx: &StepContext) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                let mut step = json!({"name": s.name, "env": s.env});
                if let (Some(step), Some(how)) = (step.as_object_mut(), s.described.as_object()) {
                    step.extend(how.clone());
                }
                step
            })
            .collect();
        let mut document = json!({
            "kind": self.kind,
            "operation": ctx.operation.as_str(),
            "entity": ctx.entity,
            "network": self.network,
            "steps": steps,
        });
        if let Some(image) = &self.image {
            document["image"] = json!(image);
        }
        document
    }
}
