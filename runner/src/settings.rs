//! The runner's command-line settings (`outpost runner ...`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Uri;

/// How a runner is started: which control plane, which install, where it keeps state.
#[derive(clap::Args, Clone, Debug)]
pub struct RunnerArgs {
    /// URL of the Outpost API server (the runner dials out; it listens on no port).
    ///
    /// Several URLs, the flag repeated or comma-separated, name replicas of one control
    /// plane: the runner uses one at a time (each runner starts at a place in the list
    /// of its own, so a fleet spreads over the replicas) and moves to the next, round
    /// robin after its usual backoff, when a call cannot connect, a server answers 503
    /// or its watch breaks. A load balancer in front of the replicas is one URL.
    #[arg(long, required = true, value_delimiter = ',', value_parser = server_url)]
    pub server: Vec<Uri>,
    /// ARN or name of the AWS Secrets Manager secret that holds the runner's token (the
    /// install stack's `RunnerTokenSecretArn`), read once at start with the default
    /// credential chain (on the VM: the instance role, the only principal the stack lets
    /// read it). Without it the token comes from the `OUTPOST_RUNNER_TOKEN` environment
    /// variable. The token itself is never taken on the command line, where `ps` shows it.
    #[arg(long, value_name = "ARN")]
    pub token_secret: Option<String>,
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
    /// Directory of the entities' work dirs (terraform modules and state when kept
    /// locally, saved plans, job steps' directories), created mode 0711: steps and
    /// terraform run as `--sandbox-uid`, which must reach their own work dirs (and not
    /// the state dir). `STATE-DIR-work`, next to the state dir, when omitted; a
    /// `work` directory left inside the state dir by an older runner is moved there.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Kubeconfig of the install's cluster (`kubernetes_manifest` and `helm_chart`
    /// components).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Directory of the customer's local Rego policies, evaluated on every real diff.
    #[arg(long)]
    pub policies: Option<PathBuf>,
    /// The terraform binary (`terraform_module` components and the sandbox).
    #[arg(long, default_value = "terraform")]
    pub terraform: PathBuf,
    /// The helm binary that renders `helm_chart` components (`helm template`; it never
    /// installs anything: the runner applies what it renders).
    #[arg(long, default_value = "helm")]
    pub helm: PathBuf,
    /// A directory under which `terraform_module` sources may name local module
    /// directories (repeat the flag for several). None by default: only inline modules
    /// (`terraform.files`) are accepted, so a Plan cannot copy an arbitrary directory
    /// of this machine into a module.
    #[arg(long = "module-root", value_delimiter = ',')]
    pub module_roots: Vec<PathBuf>,
    /// Terraform providers modules may use, comma-separated source addresses
    /// (`hashicorp/aws`, `registry.example.com/acme/db`, `acme/*` for a namespace); the
    /// customer's allow-list. A module needing any other is refused before `terraform
    /// init`, and terraform's own provider installation is limited to these. The
    /// built-in `terraform` provider (`terraform_data`) is always allowed; none other
    /// when omitted.
    #[arg(long, value_delimiter = ',')]
    pub terraform_providers: Vec<String>,
    /// A directory terraform installs the allowed providers from (a filesystem mirror:
    /// `HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/` or the packed zip layout), read-only to
    /// terraform; repeatable. Without any, allowed providers are downloaded from their
    /// registries.
    #[arg(long)]
    pub terraform_provider_mirror: Vec<PathBuf>,
    /// The bubblewrap binary that sandboxes `job` components, action steps and
    /// terraform.
    #[arg(long, default_value = "bwrap")]
    pub bwrap: PathBuf,
    /// The slirp4netns binary: the outbound relay of job steps that declare
    /// `network: true` (each such step has a network namespace of its own).
    #[arg(long, default_value = "slirp4netns")]
    pub slirp4netns: PathBuf,
    /// What job steps with network must not reach, refused by the kernel in the step's
    /// network namespace: an address, a range (`10.0.0.0/8`), either with one port
    /// (`10.0.2.2:8080`, `[fd00::1]:80`). The flag repeated or comma-separated replaces
    /// the default, the instance metadata service (IPv4 and IPv6), whose instance-role
    /// credentials can assume every enabled role: keep it in any list you give.
    #[arg(
        long = "sandbox-blocked-address",
        value_delimiter = ',',
        default_values_t = crate::executor::job::sandbox::network::metadata()
    )]
    pub sandbox_blocked: Vec<crate::executor::job::sandbox::BlockedAddress>,
    /// Let job steps with network reach this host's 127.0.0.1 as 10.0.2.2 (a local
    /// egress proxy). Off: services on the host's loopback are out of steps' reach.
    #[arg(long)]
    pub sandbox_host_loopback: bool,
    /// The host uid (and gid) job steps and terraform run as, with no supplementary
    /// group, when the runner runs as root: what a step writes belongs to it, and the
    /// runner's files stay unreadable to it. A runner that is not root cannot switch:
    /// its steps keep its uid on the host (65534 inside their user namespace).
    #[arg(long, default_value_t = crate::executor::job::sandbox::SANDBOX_ID)]
    pub sandbox_uid: u32,
    /// Directory of secrets, one file per secret named like the secret
    /// (`${outpost-secret:NAME}` reads `DIR/NAME`).
    #[arg(long)]
    pub secrets_dir: Option<PathBuf>,
    /// YAML (or JSON) map of the customer's inputs (`source: customer`), name to value,
    /// for a runner without `--stack`; with `--stack` they are the install stack's
    /// `Input<Name>` parameters. `${outpost-input:NAME}` in a Plan reads it.
    #[arg(long, value_name = "FILE")]
    pub customer_inputs: Option<PathBuf>,
    /// Name of the install's CloudFormation stack in the customer's AWS account. With
    /// it, the runner reads the stack's roles and assumes the Plan's role for each Plan
    /// (a role it cannot assume fails the Plan), and reads secrets from AWS Secrets
    /// Manager unless `--secrets-dir` is given. Credentials come from the default chain
    /// (on the VM: the instance role).
    #[arg(long)]
    pub stack: Option<String>,
    /// The install stack's terraform state bucket (its `StateBucketName`). With it, every
    /// `terraform_module` entity keeps its state there, as `components/NAME/terraform.tfstate`
    /// or `sandbox/terraform.tfstate`, read and written under the Plan's role and locked
    /// with S3 lock files; a runner whose state dir is lost finds its state again. Without
    /// it, state stays in the work dirs (`--work-dir`). Needs `--stack` (the roles).
    #[arg(long, value_name = "BUCKET", requires = "stack")]
    pub state_bucket: Option<String>,
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
    /// The customer's trust anchor for the audit log: a directory the customer controls
    /// and the vendor cannot write, outside the state dir. The runner appends its public
    /// key to `DIR/public-keys` (what `outpost audit verify --key` reads) and keeps its
    /// newest signed checkpoint in `DIR/checkpoint.json`.
    #[arg(long)]
    pub anchor_dir: Option<PathBuf>,
    /// Name of the SSM parameter in the customer's AWS account the runner publishes its
    /// public key to (the install stack's `RunnerPublicKeyParameter` output): written at
    /// boot when it holds another value, with the runner's own credentials (on the VM:
    /// the instance role, the only principal the stack lets write it). Its version
    /// history is every key the runner signed with; `outpost audit verify --stack` reads
    /// it. `--aws-region` and `--aws-endpoint` apply.
    #[arg(long, value_name = "NAME")]
    pub publish_key_parameter: Option<String>,
    /// Name of the SSM parameter the runner writes its newest signed audit checkpoint to
    /// (the install stack's `AuditCheckpointParameter` output), whenever it writes one.
    #[arg(long, value_name = "NAME")]
    pub publish_checkpoint_parameter: Option<String>,
    /// Replace the signing key at this start: the runner makes a new key, records a
    /// `key-rotation` event naming it, signed by the old key (so verification accepts
    /// the chain across it, unflagged), publishes the new key and forgets the old one.
    /// Needs the state dir's key and audit log; give it for one start.
    #[arg(long)]
    pub rotate_key: bool,
    /// Seconds between audit checkpoints when no event is recorded (one is also written
    /// after every event).
    #[arg(long, default_value_t = 60)]
    pub checkpoint_seconds: u64,
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

    /// The sandbox job steps (and whatever else runs vendor code) run in.
    pub fn sandbox(&self) -> crate::executor::job::sandbox::Sandbox {
        use crate::executor::job::sandbox::{NetworkSettings, Sandbox};
        Sandbox::new(&self.bwrap)
            .with_network(NetworkSettings {
                slirp4netns: self.slirp4netns.clone(),
                blocked: self.sandbox_blocked.clone(),
                host_loopback: self.sandbox_host_loopback,
            })
            .with_host_uid(self.sandbox_uid)
    }

    /// The directory of the entities' work dirs: `--work-dir`, or [`default_work_dir`]
    /// of the state dir.
    pub fn work_root(&self) -> PathBuf {
        self.work_dir
            .clone()
            .unwrap_or_else(|| default_work_dir(&self.state_dir))
    }
}

/// The work dirs' directory of a runner whose state dir is `state_dir` and that is given
/// no `--work-dir`: its sibling `STATE-DIR-work` (`/var/lib/outpost-work` for
/// `/var/lib/outpost`).
pub fn default_work_dir(state_dir: &Path) -> PathBuf {
    let mut name = state_dir
        .file_name()
        .map(std::ffi::OsStr::to_owned)
        .unwrap_or_default();
    name.push("-work");
    state_dir.with_file_name(name)
}

/// Parses one `--server` URL: `https://HOST[:PORT][/PATH]`, or `http://` to a loopback
/// host only (`127.0.0.0/8`, `::1`, `localhost`: tests and a local proxy). Anywhere else
/// plain HTTP would carry the runner's token, and the Plans it executes, across a
/// network anyone on the path can read and rewrite.
fn server_url(value: &str) -> Result<Uri, String> {
    let url: Uri = value
        .trim()
        .parse()
        .map_err(|e| format!("{value:?} is not a URL: {e}"))?;
    match (url.scheme_str(), url.host()) {
        (Some("https"), Some(_)) => Ok(url),
        (Some("http"), Some(host)) if is_loopback(host) => Ok(url),
        (Some("http"), Some(_)) => Err(format!(
            "{value:?} is plain http:// to a host that is not loopback: the runner's token \
             and its Plans would cross the network unencrypted; use https:// (http:// is \
             accepted only for 127.0.0.0/8, ::1 and localhost)"
        )),
        _ => Err(format!("{value:?} is not an https:// URL of an API server")),
    }
}

/// Whether `host` (as in a URL: IPv6 in brackets) is a loopback address or `localhost`.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        runner: RunnerArgs,
    }

    fn parse(args: &[&str]) -> Result<RunnerArgs, clap::Error> {
        let base = ["runner", "--install", "default/acme", "--state-dir", "s"];
        Cli::try_parse_from(base.iter().chain(args)).map(|cli| cli.runner)
    }

    fn servers(args: &[&str]) -> Vec<String> {
        let parsed = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        parsed.server.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn one_url_is_one_server() {
        assert_eq!(
            servers(&["--server", "https://outpost.example.com"]),
            ["https://outpost.example.com/"]
        );
    }

    #[test]
    fn several_urls_come_repeated_or_comma_separated_in_order() {
        assert_eq!(
            servers(&[
                "--server",
                "https://a.example.com:6443,https://b.example.com",
                "--server",
                "https://127.0.0.1:8443",
            ]),
            [
                "https://a.example.com:6443/",
                "https://b.example.com/",
                "https://127.0.0.1:8443/"
            ]
        );
    }

    #[test]
    fn a_missing_or_malformed_url_is_refused_by_name() {
        for (args, says) in [
            (
                &["--server", "https://a.example.com,"][..],
                "\"\" is not a URL",
            ),
            (&["--server", "a.example.com"], "not an https:// URL"),
            (&["--server", "ftp://a.example.com"], "not an https:// URL"),
            (&["--server", "https://a b"], "is not a URL"),
            (&[], "--server <SERVER>"),
        ] {
            let error = parse(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} parsed"));
            assert!(error.to_string().contains(says), "{args:?}: {error}");
        }
    }

    #[test]
    fn steps_are_kept_from_the_metadata_service_unless_told_otherwise() {
        let blocked = |args: &[&str]| -> Vec<String> {
            let parsed = parse(&[&["--server", "https://a.example.com"], args].concat())
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let network = parsed.sandbox().network().clone();
            network.blocked.iter().map(ToString::to_string).collect()
        };
        assert_eq!(blocked(&[]), ["169.254.169.254", "fd00:ec2::254"]);
        assert_eq!(
            blocked(&[
                "--sandbox-blocked-address",
                "169.254.169.254,fd00:ec2::254",
                "--sandbox-blocked-address",
                "10.0.2.2:8080"
            ]),
            ["169.254.169.254", "fd00:ec2::254", "10.0.2.2:8080"]
        );
        let error = parse(&[
            "--server",
            "https://a.example.com",
            "--sandbox-blocked-address",
            "metadata",
        ])
        .map(|_| ())
        .expect_err("a name is not an address");
        assert!(
            error
                .to_string()
                .contains("\"metadata\" is not an address to block"),
            "{error}"
        );
    }

    #[test]
    fn work_dirs_are_next_to_the_state_dir_unless_given() {
        let parsed = |args: &[&str]| {
            parse(&[&["--server", "https://a.example.com"], args].concat())
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        };
        assert_eq!(
            default_work_dir(Path::new("/var/lib/outpost")),
            Path::new("/var/lib/outpost-work")
        );
        assert_eq!(parsed(&[]).work_root(), Path::new("s-work"));
        let given = parsed(&["--work-dir", "/srv/work"]);
        assert_eq!(given.work_root(), Path::new("/srv/work"));
        assert_eq!(given.sandbox_uid, 65534);
        assert_eq!(parsed(&["--sandbox-uid", "4242"]).sandbox_uid, 4242);
    }

    #[test]
    fn plain_http_is_accepted_only_to_loopback() {
        for url in [
            "http://127.0.0.1:8844",
            "http://127.1.2.3",
            "http://[::1]:8844",
            "http://localhost:8844",
            "http://LOCALHOST.",
        ] {
            assert_eq!(servers(&["--server", url]).len(), 1, "{url}");
        }
        for url in [
            "http://outpost.example.com",
            "http://10.0.0.1:8844",
            "http://169.254.169.254",
            "http://[::2]",
            "http://localhost.example.com",
            "http://127.0.0.1.example.com",
            "https://a.example.com,http://b.example.com",
        ] {
            let error = parse(&["--server", url])
                .err()
                .unwrap_or_else(|| panic!("{url} parsed"));
            assert!(
                error
                    .to_string()
                    .contains("plain http:// to a host that is not loopback"),
                "{url}: {error}"
            );
        }
    }
}
