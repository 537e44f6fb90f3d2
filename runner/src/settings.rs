//! The runner's command-line settings (`outpost runner ...`).

use std::path::PathBuf;
use std::time::Duration;

/// How a runner is started: which control plane, which install, where it keeps state.
#[derive(clap::Args, Clone, Debug)]
pub struct RunnerArgs {
    /// URL of the Outpost API server (the runner dials out; it listens on no port).
    #[arg(long)]
    pub server: String,
    /// The runner's bearer token.
    #[arg(long, env = "OUTPOST_RUNNER_TOKEN", hide_env_values = true)]
    pub token: String,
    /// PEM CA certificate of the API server.
    #[arg(long)]
    pub certificate_authority: Option<PathBuf>,
    /// The install this runner serves, as NAMESPACE/NAME.
    #[arg(long)]
    pub install: String,
    /// Name of the `Runner` object and of `claimedBy`; the install's name when omitted.
    /// Two runner processes must never share a name.
    #[arg(long)]
    pub name: Option<String>,
    /// Directory for the signing key, the journal and the audit log (created, 0700).
    #[arg(long)]
    pub state_dir: PathBuf,
    /// Kubeconfig of the install's cluster (`kubernetes_manifest` components).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Directory of the customer's local Rego policies, evaluated on every real diff.
    #[arg(long)]
    pub policies: Option<PathBuf>,
    /// The terraform binary (`terraform_module` components and the sandbox).
    #[arg(long, default_value = "terraform")]
    pub terraform: PathBuf,
    /// The bubblewrap binary that sandboxes `job` components and action steps.
    #[arg(long, default_value = "bwrap")]
    pub bwrap: PathBuf,
    /// Directory of secrets, one file per secret named like the secret
    /// (`${outpost-secret:NAME}` reads `DIR/NAME`).
    #[arg(long)]
    pub secrets_dir: Option<PathBuf>,
    /// Name of the install's CloudFormation stack in the customer's AWS account. With
    /// it, the runner reads the stack's roles and assumes the Plan's role for each Plan
    /// (a role it cannot assume fails the Plan), and reads secrets from AWS Secrets
    /// Manager unless `--secrets-dir` is given. Credentials come from the default chain
    /// (on the VM: the instance role).
    #[arg(long)]
    pub stack: Option<String>,
    /// AWS region of the stack; the default chain's region when omitted.
    #[arg(long)]
    pub aws_region: Option<String>,
    /// Endpoint of every AWS API the runner and its executors call, for an emulator
    /// (`http://127.0.0.1:5000`); the real regional endpoints when omitted.
    #[arg(long)]
    pub aws_endpoint: Option<String>,
    /// Seconds between reads of the install stack (enabled roles, outputs).
    #[arg(long, default_value_t = 60)]
    pub stack_refresh_seconds: u64,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_seconds: u64,
}

impl RunnerArgs {
    /// The install's namespace and name.
    pub fn install_ref(&self) -> (&str, &str) {
        self.install
            .split_once('/')
            .unwrap_or(("default", self.install.as_str()))
    }

    /// The runner's name: `--name`, or the install's name.
    pub fn runner_name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.install_ref().1)
    }

    /// Time between heartbeats.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_seconds.max(1))
    }
}
