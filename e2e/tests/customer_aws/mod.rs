//! The example install in a customer's AWS account, emulated by `moto_server` with IAM
//! enforcement on, every part real: the control plane and controllers, the customer
//! creating the install stack the control plane rendered (`outpost stack`) with the
//! CloudFormation SDK, and `outpost runner` started with the command line of the stack's
//! user data (`--token-secret ARN`, `--stack`, `--aws-region`, plus `--aws-endpoint`,
//! `--sandbox-host-loopback` (steps reach the emulator on the host's loopback) and the
//! test's cluster for the emulator) under the stack's runner instance role.
//!
//! * The runner token reaches the runner only through the customer's Secrets Manager: it
//!   is nowhere in the template the vendor hands over, the runner's command line and
//!   environment hold only the secret's ARN, and the runner reads the token at boot with
//!   its instance role. Once it has, the customer revokes that read, and the runner keeps
//!   working from memory. A principal without the grant is refused (403) and its runner
//!   stops before it creates anything.
//! * The install reaches Active with every Plan run under its resolved role: the
//!   assumed-role identity (`assumed-role/ROLE/PLAN-UID`) is in the signed audit log, and
//!   the stack's enabled roles are on the `Runner` and the `InstallStack`.
//! * The customer revoking the maintenance role's trust makes the next deploy Plan fail
//!   closed; restoring it makes a retry succeed.
//! * Break-glass: the disabled-by-default EKS role is absent, so `outpost trigger
//!   eks-audit-logs --role R` fails closed, and under the maintenance role the step's
//!   UpdateClusterConfig is denied (403); the customer enables the role (stack
//!   parameter), the trigger runs under it and succeeds, and the customer's
//!   DescribeCluster shows the cluster's audit logs on; the customer disables it
//!   again, and the next trigger fails closed. Every step is in the signed audit log
//!   with the role used.
//! * The database password lives in the customer's Secrets Manager: the migrate action
//!   provably gets it, the runner writes it into the Kubernetes Secret the App names in
//!   the customer's cluster (web reads it from there), and it is in no object of the
//!   control plane's store (both backends), no API answer, no Plan log, no DriftReport
//!   and no audit event. A second step prints it and the role's `$AWS_SESSION_TOKEN`
//!   (plain, base64, to stdout and stderr): the Plan's log shows `***` in their place,
//!   and the recording proxy, the store and etcd hold neither.
//! * Drift checks run under the component's deploy role (`assumed-role/ROLE/drift-NAME`):
//!   the database's, which needs its password, reports in sync.
//!
//! What moto does differently from AWS, and how the test bridges it as the customer:
//! * IAM enforcement starts after `INITIAL_NO_AUTH_ACTION_COUNT` unauthenticated calls;
//!   the test spends them on reading the default subnet and creating the customer's
//!   admin user and access key.
//! * moto 5.2.5 skips `AWS::SecretsManager::Secret` and `AWS::SecretsManager::ResourcePolicy`
//!   in CloudFormation, so the customer creates the install's secrets and the runner
//!   token's secret (from the `RunnerToken` parameter's value) with the names the template
//!   gives them, and the user data's `${RunnerTokenSecret}` is that secret's ARN. moto
//!   does not evaluate resource policies: that only the runner's role may read the token
//!   is checked on the rendered template (`outpost-controllers` unit tests).
//! * moto matches a trust policy's principal to the caller's ARN literally, where IAM
//!   matches a role's sessions (`assumed-role/R/S`) to the role's ARN: the customer adds
//!   the runner's session ARN next to the runner role's ARN in each role's trust.
//! * moto authorizes CloudFormation and Secrets Manager calls against `Resource: "*"`
//!   only, so the stack's statements scoped to the stack and its secrets never match
//!   (and its references to the secrets it skipped are `null`): the customer grants
//!   the runner role `DescribeStacks` and the install's roles `GetSecretValue` on `*`
//!   in an extra policy. The runner role may read secrets only until it has read its
//!   token (its `Runner` is registered), so the Plans' secrets provably come through
//!   the Plans' roles.
//! * The runner's instance role is emulated: the customer's admin assumes it (session
//!   name the instance id, as EC2 does) and hands the credentials to the runner process
//!   in `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`. moto fails (500)
//!   on a trust policy with a `Service` principal only, so the admin is added to the
//!   instance role's trust as the stand-in for EC2.
//! * moto keeps the inline policies CloudFormation created as objects its IAM
//!   enforcement cannot read (500 on every call of the role): the customer puts each
//!   again, unchanged.
//! * On a stack update moto creates a role whose condition turned true, but keeps one
//!   whose condition turned false: the customer deletes it as CloudFormation would.
//! * moto 5.2.5 implements no EKS UpdateClusterVersion (404), so the example's
//!   `eks-upgrade` action succeeds against real AWS only; break-glass runs
//!   `eks-audit-logs` (UpdateClusterConfig), which moto implements. The example's
//!   sandbox only stands in for the EKS cluster, so the customer creates the cluster
//!   it names (`cluster_name`) in moto.
//! * moto's query-protocol signature check re-encodes the form body the Python way; see
//!   [`FormEncodedLikePython`].
//!
//! `moto_server` comes from `OUTPOST_MOTO_SERVER`, else the repository's `.venv/`.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_iam::config::{Credentials, SharedCredentialsProvider};
use base64::Engine as _;
use kube_client::api::{Api, DeleteParams, ListParams};
use outpost_api::{
    AuditEvent, AuditEventType, InstallPhase, InstallStack, Operation, Plan, PlanPhase, Runner,
};
use outpost_e2e::PushTestImage as _;
use outpost_testing::job_plans::drift_report_in_sync;
use outpost_testing::phase;
use outpost_testing::{
    Backend, ControlPlane, Moto, Process, RecordingProxy, Registry, eventually,
    example_with_registries, on_path, outpost_binary, wait_for,
};
use serde_json::Value;

/// The install: `globex`, approval mode `approve-all`.
const INSTALL: &str = "globex";
/// The stack's name in the customer's account.
const STACK: &str = "outpost-globex";
/// moto's account.
const ACCOUNT: &str = "123456789012";
/// The install's region.
pub(crate) const REGION: &str = "us-east-2";
/// Unauthenticated calls moto allows before it enforces IAM: the default subnet
/// lookup, CreateUser, PutUserPolicy, CreateAccessKey.
const NO_AUTH_CALLS: usize = 4;

/// What the test asks of the emulator beyond [`Moto`]'s own: SDK configurations and
/// the one unauthenticated EC2 call.
pub(crate) trait Emulator {
    fn sdk(&self, key: &str, secret: &str, token: Option<&str>) -> SdkConfig;
    fn default_subnet(&self) -> (String, String);
}

/// moto with IAM enforcement after [`NO_AUTH_CALLS`] calls.
fn start_moto() -> Moto {
    Moto::start_with_env(&[("INITIAL_NO_AUTH_ACTION_COUNT", &NO_AUTH_CALLS.to_string())])
}

impl Emulator for Moto {
    /// SDK configuration for the emulator with static credentials.
    fn sdk(&self, key: &str, secret: &str, token: Option<&str>) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(self.endpoint())
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                key,
                secret,
                token.map(str::to_owned),
                None,
                "customer-aws-test",
            )))
            .http_client(outpost_runner::aws::http_client())
            .build()
    }

    /// One unauthenticated EC2 query call (the first of the free ones): the default
    /// VPC and one of its subnets.
    fn default_subnet(&self) -> (String, String) {
        let body = "Action=DescribeSubnets&Version=2016-11-15&Filter.1.Name=default-for-az&Filter.1.Value.1=true";
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).unwrap();
        write!(
            stream,
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded; charset=utf-8\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential=testing/20240101/{REGION}/ec2/aws4_request, SignedHeaders=host, Signature=0\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let tag = |name: &str| {
            let open = format!("<{name}>");
            let start = response.find(&open).expect("a tag") + open.len();
            let end = response[start..].find('<').expect("a closing tag") + start;
            response[start..end].to_owned()
        };
        (tag("vpcId"), tag("subnetId"))
    }
}

mod account;
mod break_glass;
mod checks;
mod eks;
mod flow;
mod roles;
mod secrets;
mod state_bucket;
mod token;

use account::*;
use checks::*;
use flow::*;
