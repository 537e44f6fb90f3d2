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
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_iam::config::{Credentials, SharedCredentialsProvider};
use base64::Engine as _;
use kube_client::api::{Api, DeleteParams, ListParams};
use outpost_api::{
    AuditEvent, AuditEventType, InstallPhase, InstallStack, Operation, Plan, PlanPhase, Runner,
};
use outpost_e2e::{
    Backend, ControlPlane, Moto, Process, RecordingProxy, Registry, eventually,
    example_with_registries, on_path, outpost_binary,
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

/// The customer's account: moto, the admin's SDK configuration.
struct Customer {
    moto: Moto,
    admin: SdkConfig,
    /// The admin's access key id and secret, for calls the test signs with curl.
    admin_key: (String, String),
    vpc: String,
    subnet: String,
}

impl Customer {
    /// Starts moto and spends the unauthenticated calls on the default subnet and an
    /// admin user with an access key; from then on IAM is enforced.
    async fn start() -> Customer {
        Customer::start_on(start_moto(), true).await
    }

    /// [`Customer::start`] on `moto`, which enforces IAM when `enforced` (checked).
    async fn start_on(moto: Moto, enforced: bool) -> Customer {
        let (vpc, subnet) = moto.default_subnet();
        let bootstrap = aws_sdk_iam::Client::new(&moto.sdk("bootstrap", "bootstrap", None));
        bootstrap
            .create_user()
            .user_name("customer-admin")
            .send()
            .await
            .expect("CreateUser");
        bootstrap
            .put_user_policy()
            .user_name("customer-admin")
            .policy_name("administrator")
            .policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#,
            )
            .send()
            .await
            .expect("PutUserPolicy");
        let key = bootstrap
            .create_access_key()
            .user_name("customer-admin")
            .send()
            .await
            .expect("CreateAccessKey");
        let key = key.access_key().expect("an access key");
        let admin = moto.sdk(key.access_key_id(), key.secret_access_key(), None);
        if enforced {
            // IAM is enforced now: unknown credentials are refused.
            let stranger = aws_sdk_iam::Client::new(&moto.sdk("AKIASTRANGER", "nope", None));
            let refused = stranger.list_roles().send().await.unwrap_err();
            assert_eq!(
                refused.raw_response().map(|r| r.status().as_u16()),
                Some(403),
                "moto enforces IAM: {refused:?}"
            );
        }
        Customer {
            moto,
            admin,
            admin_key: (
                key.access_key_id().to_owned(),
                key.secret_access_key().to_owned(),
            ),
            vpc,
            subnet,
        }
    }

    fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.admin)
    }

    /// An EKS call as the admin (`curl --aws-sigv4`, as the example's actions call
    /// AWS): `path` with the JSON `body` (POST) or none (GET); the status and the
    /// answer.
    fn eks(&self, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut curl = self.signed_curl(
            "eks",
            (self.admin_key.0.as_str(), self.admin_key.1.as_str()),
        );
        curl.args(["-H", "content-type: application/json", "--data"]);
        match body {
            Some(body) => curl.arg(body.to_string()),
            // moto takes a request with neither body nor query for one whose form is
            // its headers and fails its signature: GET with an empty JSON object.
            None => curl.args(["{}", "-X", "GET"]),
        };
        let (status, answer) = self.answer(curl, path);
        (
            status,
            serde_json::from_str(&answer).unwrap_or(Value::String(answer)),
        )
    }

    /// An S3 call as the admin (path-style): `method` on `path` (`/BUCKET?versioning=`)
    /// with an XML `body`; the status and the answer.
    fn s3(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let admin = (self.admin_key.0.as_str(), self.admin_key.1.as_str(), None);
        self.s3_as(admin, method, path, body)
    }

    /// [`Self::s3`] with the credentials `(key id, secret, session token)`.
    fn s3_as(
        &self,
        credentials: (&str, &str, Option<&str>),
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut curl = self.signed_curl("s3", (credentials.0, credentials.1));
        // moto checks S3 signatures over a payload hash header, and subresources as
        // `?name=` (what curl signs).
        curl.args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]);
        if let Some(token) = credentials.2 {
            curl.args(["-H", &format!("x-amz-security-token: {token}")]);
        }
        curl.args(["-X", method]);
        if let Some(body) = body {
            curl.args(["-H", "content-type: application/xml", "--data", body]);
        }
        self.answer(curl, path)
    }

    /// `curl` signing with the access key `key` for `service` (`--aws-sigv4`),
    /// printing the status after the answer.
    fn signed_curl(&self, service: &str, key: (&str, &str)) -> Command {
        let mut curl = Command::new("curl");
        curl.args(["-sS", "-w", "\\n%{http_code}", "--aws-sigv4"])
            .arg(format!("aws:amz:{REGION}:{service}"))
            .arg("--user")
            .arg(format!("{}:{}", key.0, key.1));
        curl
    }

    /// Runs `curl` on the emulator's `path`: the status and the answer.
    fn answer(&self, mut curl: Command, path: &str) -> (u16, String) {
        let output = curl
            .arg(format!("{}{path}", self.moto.endpoint()))
            .output()
            .expect("curl runs");
        let text = String::from_utf8(output.stdout).unwrap();
        let (answer, status) = text.rsplit_once('\n').expect("curl printed the status");
        (status.parse().expect("an HTTP status"), answer.to_owned())
    }

    /// Creates the install stack from `template` with the customer's parameters, the
    /// runner token `token`, the `secrets` the App declares beyond `api_key` (stack
    /// parameter, value) and `inputs` (the App's customer inputs); waits for it and
    /// returns its outputs.
    async fn create_stack(
        &self,
        template: &str,
        token: &str,
        secrets: &[(&str, &str)],
        inputs: &std::collections::BTreeMap<String, Value>,
    ) -> std::collections::BTreeMap<String, String> {
        use aws_sdk_cloudformation::types::{Capability, Parameter};
        let config = aws_sdk_cloudformation::config::Builder::from(&self.admin)
            .interceptor(FormEncodedLikePython)
            .build();
        let cfn = aws_sdk_cloudformation::Client::from_conf(config);
        let parameter = |key: &str, value: &str| {
            Parameter::builder()
                .parameter_key(key)
                .parameter_value(value)
                .build()
        };
        let mut create = cfn
            .create_stack()
            .stack_name(STACK)
            .template_body(template)
            .capabilities(Capability::CapabilityNamedIam)
            .parameters(parameter("RunnerToken", token))
            .parameters(parameter("RunnerAmiId", "ami-0123456789abcdef0"))
            .parameters(parameter("VpcId", &self.vpc))
            .parameters(parameter("RunnerSubnetId", &self.subnet))
            .parameters(parameter("SecretApiKeyValue", API_KEY));
        for (key, value) in secrets {
            create = create.parameters(parameter(key, value));
        }
        for (name, value) in inputs {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().expect("a list input of strings"))
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            create = create.parameters(parameter(
                &outpost_api::customer_input::stack_parameter(name),
                &text,
            ));
        }
        create.send().await.expect("CreateStack");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let described = cfn
                .describe_stacks()
                .stack_name(STACK)
                .send()
                .await
                .expect("DescribeStacks");
            let stack = &described.stacks()[0];
            let status = stack.stack_status().unwrap().as_str().to_owned();
            if !status.ends_with("_IN_PROGRESS") {
                assert_eq!(status, "CREATE_COMPLETE", "{stack:?}\n{}", self.moto.log());
                return stack
                    .outputs()
                    .iter()
                    .map(|o| {
                        (
                            o.output_key().unwrap().to_owned(),
                            o.output_value().unwrap().to_owned(),
                        )
                    })
                    .collect();
            }
            assert!(Instant::now() < deadline, "stack stuck in {status}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates the install's secrets where moto skipped them; returns the database
    /// password.
    async fn create_secrets(&self) -> String {
        let secrets = aws_sdk_secretsmanager::Client::new(&self.admin);
        let name = |secret: &str| format!("outpost/default/{INSTALL}/{secret}");
        let skipped = secrets
            .describe_secret()
            .secret_id(name("db_password"))
            .send()
            .await
            .is_err();
        assert!(
            skipped,
            "moto created the stack's secret; drop this workaround"
        );
        let password = format!("pw{}", uuid_like());
        for (secret, value) in [("db_password", password.as_str()), ("api_key", API_KEY)] {
            secrets
                .create_secret()
                .name(name(secret))
                .secret_string(value)
                .send()
                .await
                .expect("CreateSecret");
        }
        password
    }

    /// Creates the runner token's secret where moto skipped it, as the template declares
    /// it (the `RunnerToken` parameter's value under the template's name); returns its
    /// ARN, what `${RunnerTokenSecret}` stands for in the user data.
    async fn create_token_secret(&self, template: &Value, token: &str) -> String {
        let properties = &template["Resources"]["RunnerTokenSecret"]["Properties"];
        assert_eq!(
            properties["SecretString"],
            serde_json::json!({"Ref": "RunnerToken"})
        );
        let created = aws_sdk_secretsmanager::Client::new(&self.admin)
            .create_secret()
            .name(properties["Name"].as_str().expect("the secret has a name"))
            .secret_string(token)
            .send()
            .await
            .expect("CreateSecret");
        created.arn().expect("an ARN").to_owned()
    }

    /// Sets the stack parameter `key` to `value`, keeping the others (CloudFormation
    /// UpdateStack with the previous template).
    async fn update_parameter(&self, key: &str, value: &str) {
        use aws_sdk_cloudformation::types::{Capability, Parameter};
        let config = aws_sdk_cloudformation::config::Builder::from(&self.admin)
            .interceptor(FormEncodedLikePython)
            .build();
        let cfn = aws_sdk_cloudformation::Client::from_conf(config);
        let described = cfn
            .describe_stacks()
            .stack_name(STACK)
            .send()
            .await
            .unwrap();
        let mut update = cfn
            .update_stack()
            .stack_name(STACK)
            .use_previous_template(true)
            .capabilities(Capability::CapabilityNamedIam);
        // The values given at creation are kept with UsePreviousValue (the NoEcho ones
        // cannot be read back); moto keeps no previous value of a defaulted parameter,
        // so those are passed as read.
        let given = [
            "RunnerToken",
            "RunnerAmiId",
            "VpcId",
            "RunnerSubnetId",
            "SecretApiKeyValue",
        ];
        for parameter in described.stacks()[0].parameters() {
            let name = parameter.parameter_key().unwrap();
            let builder = Parameter::builder().parameter_key(name);
            update = update.parameters(if name == key {
                builder.parameter_value(value).build()
            } else if given.contains(&name) {
                builder.use_previous_value(true).build()
            } else {
                builder
                    .parameter_value(parameter.parameter_value().unwrap_or_default())
                    .build()
            });
        }
        update
            .send()
            .await
            .unwrap_or_else(|e| panic!("UpdateStack: {e:?}\n{}", self.moto.log()));
        eventually(120, "the stack update", async || {
            let described = cfn.describe_stacks().stack_name(STACK).send().await.ok()?;
            let stack = &described.stacks()[0];
            let status = stack.stack_status()?.as_str().to_owned();
            assert!(
                !status.contains("FAILED") && !status.contains("ROLLBACK"),
                "{status}"
            );
            let set = stack
                .parameters()
                .iter()
                .any(|p| p.parameter_key() == Some(key) && p.parameter_value() == Some(value));
            (!status.ends_with("_IN_PROGRESS") && set).then_some(())
        })
        .await;
    }

    /// The trust policy of `role`, decoded.
    async fn trust(&self, role: &str) -> Value {
        let found = self
            .iam()
            .get_role()
            .role_name(role)
            .send()
            .await
            .expect("GetRole");
        let document = found.role().unwrap().assume_role_policy_document().unwrap();
        let decoded = percent_decode(document);
        serde_json::from_str(&decoded).expect("a trust policy is JSON")
    }

    /// Puts every inline policy of `role` again, as it is: moto keeps the ones
    /// CloudFormation created as objects, which its IAM enforcement cannot read (500).
    async fn reput_inline_policies(&self, role: &str) {
        let iam = self.iam();
        let names = iam
            .list_role_policies()
            .role_name(role)
            .send()
            .await
            .expect("ListRolePolicies");
        for name in names.policy_names() {
            let policy = iam
                .get_role_policy()
                .role_name(role)
                .policy_name(name)
                .send()
                .await
                .expect("GetRolePolicy");
            // moto answers with the object's Python repr; the declared policies have
            // no quotes of their own, so it reads as JSON with `'` as `"`, and `None`
            // (a reference to a secret moto skipped) as `null`.
            let document = percent_decode(policy.policy_document())
                .replace('\'', "\"")
                .replace("None", "null");
            let mut document: Value = serde_json::from_str(&document)
                .unwrap_or_else(|e| panic!("{role}/{name} is JSON: {e}: {document}"));
            // moto cannot match `null` resources (500): drop them, and statements (the
            // runner's read of its token) and policies left with none (their grant is the `emulator-resource-star`
            // policy's).
            if let Some(statements) = document["Statement"].as_array_mut() {
                for statement in statements.iter_mut() {
                    if let Some(resources) = statement["Resource"].as_array_mut() {
                        resources.retain(|r| !r.is_null());
                    }
                }
                statements.retain(|s| match &s["Resource"] {
                    Value::Null => false,
                    Value::Array(resources) => !resources.is_empty(),
                    _ => true,
                });
                if statements.is_empty() {
                    iam.delete_role_policy()
                        .role_name(role)
                        .policy_name(name)
                        .send()
                        .await
                        .expect("DeleteRolePolicy");
                    continue;
                }
            }
            iam.put_role_policy()
                .role_name(role)
                .policy_name(name)
                .policy_document(document.to_string())
                .send()
                .await
                .expect("PutRolePolicy");
        }
    }

    /// Grants `role` `actions` on `Resource: "*"` (policy `emulator-resource-star`): what
    /// the stack grants on its stack and secrets, which moto cannot match.
    async fn resource_star(&self, role: &str, actions: &[&str]) {
        let document = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        });
        self.iam()
            .put_role_policy()
            .role_name(role)
            .policy_name("emulator-resource-star")
            .policy_document(document.to_string())
            .send()
            .await
            .expect("PutRolePolicy");
    }

    async fn set_trust(&self, role: &str, policy: &Value) {
        self.iam()
            .update_assume_role_policy()
            .role_name(role)
            .policy_document(policy.to_string())
            .send()
            .await
            .expect("UpdateAssumeRolePolicy");
    }
}

/// moto checks a query-protocol call's signature over the form body as Python's
/// `urlencode` writes it (spaces as `+`, everything but `A-Za-z0-9_.-~` escaped), not over
/// the bytes received; the SDK escapes spaces as `%20`. For calls whose values have
/// spaces (a template), the body is written the Python way before it is signed: the same
/// form to AWS, the same bytes to moto.
#[derive(Debug)]
struct FormEncodedLikePython;

impl aws_sdk_cloudformation::config::Intercept for FormEncodedLikePython {
    fn name(&self) -> &'static str {
        "FormEncodedLikePython"
    }

    fn modify_before_signing(
        &self,
        context: &mut aws_sdk_cloudformation::config::interceptors::BeforeTransmitInterceptorContextMut<'_>,
        _: &aws_sdk_cloudformation::config::RuntimeComponents,
        _: &mut aws_sdk_cloudformation::config::ConfigBag,
    ) -> Result<(), aws_sdk_cloudformation::error::BoxError> {
        let request = context.request_mut();
        let Some(body) = request.body().bytes() else {
            return Ok(());
        };
        let body = std::str::from_utf8(body)?;
        let encode = |text: &str| -> String {
            percent_decode(text)
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                        (b as char).to_string()
                    }
                    b' ' => "+".to_owned(),
                    b => format!("%{b:02X}"),
                })
                .collect()
        };
        let rewritten: Vec<String> = body
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) => format!("{}={}", encode(key), encode(value)),
                None => encode(pair),
            })
            .collect();
        let rewritten = rewritten.join("&");
        request
            .headers_mut()
            .insert("content-length", rewritten.len().to_string());
        *request.body_mut() = rewritten.into();
        Ok(())
    }
}

/// The `api_key` secret's value, a parameter of the stack.
const API_KEY: &str = "key-from-the-customer-7d1c";

/// A random hex string (the database password the customer generates).
fn uuid_like() -> String {
    (0..4)
        .map(|_| format!("{:08x}", rand::random::<u32>()))
        .collect()
}

/// The `outpost runner` command of the install stack's user data (the unit's
/// `ExecStart`), with each word of `substitutions` replaced: the substitutions
/// CloudFormation makes, and the test's binary and state dir. Every `${…}` must be one.
fn user_data_command(template: &Value, substitutions: &[(&str, &str)]) -> Command {
    let script =
        template["Resources"]["RunnerInstance"]["Properties"]["UserData"]["Fn::Base64"]["Fn::Sub"]
            .as_str()
            .expect("the user data is an Fn::Sub string");
    let line = script
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart=/usr/bin/env "))
        .unwrap_or_else(|| panic!("no ExecStart in the user data:\n{script}"));
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|word| {
            let substituted = substitutions
                .iter()
                .find_map(|(from, to)| (*from == word).then_some(*to));
            assert!(
                substituted.is_some() || !word.contains("${"),
                "{word} in the user data is not substituted"
            );
            substituted.unwrap_or(word)
        })
        .collect();
    let mut command = Command::new(words[0]);
    command.args(&words[1..]);
    command
}

/// IAM returns policy documents URL-encoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8")
}

/// Everything one run starts, stopped when dropped.
struct Flow {
    cp: ControlPlane,
    /// Every API request and response of the run, when recorded.
    proxy: Option<RecordingProxy>,
    customer: Customer,
    cluster: ControlPlane,
    _controllers: Process,
    runner: Process,
    /// How the runner was started, to start it again.
    launch: RunnerLaunch,
    /// The runner role's name.
    runner_role: String,
    plans: Api<Plan>,
    /// The install's uid: the roles are `<uid>-provision` and so on.
    uid: String,
    /// The database password in the customer's Secrets Manager.
    password: String,
    /// The trust policy the install's roles have, with the emulator's bridge.
    role_trust: Value,
    state: PathBuf,
    _dir: tempfile::TempDir,
    _registries: (Registry, Registry, tempfile::TempDir),
}

/// What starts the install's runner as the VM's unit does: the user data's command line
/// with CloudFormation's substitutions, plus the emulator's endpoint and the test's
/// cluster, under the runner's instance role. Kept so a test can start it again.
struct RunnerLaunch {
    template: Value,
    server_url: String,
    ca: PathBuf,
    token_secret: String,
    state_bucket: String,
    /// The audit anchor's SSM parameters (the stack's outputs).
    key_parameter: String,
    checkpoint_parameter: String,
    moto_endpoint: String,
    /// The stand-in cluster's admin kubeconfig; `None`: each Plan reaches the cluster
    /// its `cluster` block names with an EKS token of its role.
    kubeconfig: Option<PathBuf>,
    /// `--helm` (the tests' `helm template` engine) and the `--module-root` local
    /// charts lie under, for `helm_chart` components.
    helm: Option<(PathBuf, PathBuf)>,
    /// The instance role's access key id, secret and session token.
    credentials: (String, String, String),
    state: PathBuf,
}

impl RunnerLaunch {
    /// The stack's `TerraformProviders` default, which the customer kept.
    fn providers(&self) -> &str {
        self.template["Parameters"]["TerraformProviders"]["Default"]
            .as_str()
            .expect("the provider allow-list has a default")
    }

    fn spawn(&self) -> Child {
        let mut command = user_data_command(
            &self.template,
            &[
                ("outpost", outpost_binary().to_str().unwrap()),
                ("${ServerUrl}", &self.server_url),
                // The customer keeps the default provider allow-list.
                ("${TerraformProviders}", self.providers()),
                ("${RunnerTokenSecret}", &self.token_secret),
                ("${StateBucket}", &self.state_bucket),
                ("${RunnerPublicKeyParameter}", &self.key_parameter),
                ("${AuditCheckpointParameter}", &self.checkpoint_parameter),
                ("${AWS::StackName}", STACK),
                ("${AWS::Region}", REGION),
                ("/var/lib/outpost", self.state.to_str().unwrap()),
            ],
        );
        command
            .arg("--certificate-authority")
            .arg(&self.ca)
            .arg("--aws-endpoint")
            .arg(&self.moto_endpoint)
            // The emulator is on the host's loopback: job steps (in network namespaces
            // of their own) reach it through the relay's gateway only when allowed to.
            .arg("--sandbox-host-loopback")
            .args(["--stack-refresh-seconds", "2"])
            .args(
                self.kubeconfig
                    .iter()
                    .flat_map(|k| [std::ffi::OsStr::new("--kubeconfig"), k.as_os_str()]),
            )
            .args(self.helm.iter().flat_map(|(helm, root)| {
                [
                    std::ffi::OsStr::new("--helm"),
                    helm.as_os_str(),
                    std::ffi::OsStr::new("--module-root"),
                    root.as_os_str(),
                ]
            }))
            .arg("--terraform")
            .arg(on_path("terraform"))
            .arg("--bwrap")
            .arg(on_path("bwrap"))
            .args(["--heartbeat-seconds", "1"])
            .env_remove("OUTPOST_RUNNER_TOKEN")
            .env("AWS_ACCESS_KEY_ID", &self.credentials.0)
            .env("AWS_SECRET_ACCESS_KEY", &self.credentials.1)
            .env("AWS_SESSION_TOKEN", &self.credentials.2)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("outpost runner starts")
    }
}

fn outpost(args: &[&str], cp: &ControlPlane) -> String {
    let output = Command::new(outpost_binary())
        .args(args)
        .arg("--kubeconfig")
        .arg(cp.kubeconfig(&cp.admin_token))
        .output()
        .expect("outpost runs");
    assert!(
        output.status.success(),
        "outpost {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The customer's side from the install stack to a running runner.
async fn start(backend: Backend) -> Flow {
    start_with(backend, false).await
}

/// [`start`], with every client of the control plane (the runner, the controllers,
/// kubectl, `outpost`, the test's own) going through a [`RecordingProxy`] when `record`.
/// The leak test's migrate action gains a step that prints what a careless (or
/// curious) vendor step would: the database password and the role's session token,
/// plain and base64. It keeps the session token in its work dir (on the customer's VM,
/// never sent) so the test can search for it.
fn with_a_leaky_step(example: &std::path::Path) {
    let actions = example.join("actions.yaml");
    let text = std::fs::read_to_string(&actions).unwrap();
    let migrate =
        "        DATABASE_PASSWORD: \"{{ secrets.db_password }}\"\n  timeoutSeconds: 900\n";
    assert!(text.contains(migrate), "actions.yaml's migrate step");
    let leaky = "        DATABASE_PASSWORD: \"{{ secrets.db_password }}\"\n    - name: leaky\n      script: |\n        test -n \"$AWS_SESSION_TOKEN\" || { echo \"no role credentials\" >&2; exit 1; }\n        printf '%s' \"$AWS_SESSION_TOKEN\" > \"$OUTPOST_WORK_DIR/session-token\"\n        echo \"password: $DATABASE_PASSWORD\"\n        echo \"session: $AWS_SESSION_TOKEN\"\n        echo \"password, base64: $(printf '%s' \"$DATABASE_PASSWORD\" | base64 -w0)\"\n        echo \"to stderr: $DATABASE_PASSWORD\" >&2\n      env:\n        DATABASE_PASSWORD: \"{{ secrets.db_password }}\"\n  timeoutSeconds: 900\n";
    std::fs::write(&actions, text.replace(migrate, leaky)).unwrap();
}

async fn start_with(backend: Backend, record: bool) -> Flow {
    start_flow(backend, record, ClusterAccess::Kubeconfig).await
}

/// How the runner reaches the install's cluster (the stand-in).
#[derive(Clone, Copy, PartialEq)]
enum ClusterAccess {
    /// With the stand-in's admin kubeconfig (`--kubeconfig`).
    Kubeconfig,
    /// Without a kubeconfig: with EKS tokens of each Plan's role, which the stand-in
    /// checks with moto's STS. moto then cannot enforce IAM: it would check the
    /// signature of the STS call the stand-in makes, which restates the token's
    /// presigned credential as a header (see `apiserver/src/auth/eks_token.rs`).
    EksTokens,
}

/// The cluster's name: the sandbox's `cluster_name` output in the EKS flow.
const EKS_CLUSTER: &str = "globex-eks";
/// The App secret holding the kubeconfig of the customer's own cluster (EKS flow).
const OWN_KUBECONFIG: &str = "cluster_kubeconfig";

/// The test's copy of the example for [`ClusterAccess::EksTokens`]: the sandbox outputs
/// the cluster's name (as an `aws_eks_cluster` would), every kubernetes_manifest names
/// its cluster by it alone (the runner reads the endpoint and CA from EKS, where the
/// test created the cluster at the stand-in's address), and `cache` deploys with the
/// provision role (web keeps the maintenance role). Two `helm_chart` components of a
/// chart under `charts` (the runner's `--module-root`) name the cluster the same way:
/// `chart` deploys with the provision role, `chart-readonly` with the maintenance role.
/// `own-cluster` is a manifest for a cluster the customer brings: named by a kubeconfig
/// the customer keeps in Secrets Manager (App secret `cluster_kubeconfig`).
fn with_eks_cluster(example: &Path, charts: &Path) {
    let app = example.join("app.yaml");
    let text = std::fs::read_to_string(&app).unwrap();
    let secrets = "  secrets:\n";
    assert!(text.contains(secrets), "app.yaml's secrets");
    let text = text.replacen(
        secrets,
        &format!(
            "{secrets}    - name: {OWN_KUBECONFIG}\n      description: Kubeconfig of the customer's own cluster.\n"
        ),
        1,
    );
    let output = "        output \"cluster_name\" {\n          value = terraform_data.cluster.output.name\n        }\n";
    assert!(text.contains(output), "app.yaml's cluster_name output");
    let named = format!(
        "        output \"cluster_name\" {{\n          value = \"{EKS_CLUSTER}\"\n        }}\n"
    );
    std::fs::write(&app, text.replace(output, &named)).unwrap();
    let components = example.join("components.yaml");
    let text = std::fs::read_to_string(&components).unwrap();
    let manifest = "  type: kubernetes_manifest\n";
    assert!(text.contains(manifest), "components.yaml's manifests");
    let text = text.replace(
        manifest,
        "  type: kubernetes_manifest\n  cluster:\n    name: \"{{ sandbox.outputs.cluster_name }}\"\n",
    );
    let cache = "  name: cache\nspec:\n  app: shopfront\n";
    assert!(text.contains(cache), "components.yaml's cache");
    let text = text.replace(
        cache,
        &format!("{cache}  operationRoles:\n    deploy: \"{{{{ install.id }}}}-provision\"\n"),
    );
    let chart = charts.join("hello");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: hello\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n\
         data:\n  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n",
    )
    .unwrap();
    let chart_component = |name: &str, roles: &str| {
        format!(
            "---\napiVersion: outpost.dev/v1alpha1\nkind: Component\nmetadata:\n  name: {name}\n\
             spec:\n  app: shopfront\n  type: helm_chart\n  cluster:\n    name: \"{{{{ sandbox.outputs.cluster_name }}}}\"\n\
             \x20 helm:\n    chart: {}\n    namespace: shopfront\n{roles}",
            chart.display()
        )
    };
    let own_cluster = format!(
        "---\napiVersion: outpost.dev/v1alpha1\nkind: Component\nmetadata:\n  name: own-cluster\n\
         spec:\n  app: shopfront\n  type: kubernetes_manifest\n  cluster:\n    kubeconfig: \"{{{{ secrets.{OWN_KUBECONFIG} }}}}\"\n\
         \x20 manifest:\n    namespace: shopfront\n    content: |\n      apiVersion: v1\n      kind: ConfigMap\n\
         \x20     metadata:\n        name: own-cluster\n      data:\n        reached: by the customer's kubeconfig\n"
    );
    let text = format!(
        "{text}{own_cluster}{}{}",
        chart_component(
            "chart",
            "  operationRoles:\n    deploy: \"{{ install.id }}-provision\"\n"
        ),
        chart_component("chart-readonly", "")
    );
    std::fs::write(&components, text).unwrap();
}

/// The cluster's RBAC in the EKS flow: the provision role's group may do anything,
/// the maintenance role's may only read.
const EKS_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: provisioner}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: provision}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: provisioner}
subjects: [{kind: Group, name: "outpost:provision"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: maintenance}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: Group, name: "outpost:maintenance"}]
"#;

async fn start_flow(backend: Backend, record: bool, access: ClusterAccess) -> Flow {
    let eks = access == ClusterAccess::EksTokens;
    let customer = if eks {
        Customer::start_on(Moto::start_with_eks_endpoints(&[]), false).await
    } else {
        Customer::start().await
    };
    // The vendor's registry with the shop's image, and the install's registry it is
    // copied into (web-image).
    let vendor = Registry::start().await;
    let registry = Registry::start().await;
    vendor
        .push_test_image("acme/shopfront", "1.8.2", "1.8.2")
        .await;
    let mut cp = ControlPlane::start(backend).await;
    let proxy = if record {
        let proxy = RecordingProxy::start(&cp.url, &cp.tls).await;
        cp.route_clients_through(&proxy.url);
        Some(proxy)
    } else {
        None
    };
    let cluster = if eks {
        let sts = customer.moto.endpoint();
        ControlPlane::start_standin_cluster_with(&[
            "--eks-cluster-name",
            EKS_CLUSTER,
            "--eks-sts-endpoint",
            &sts,
        ])
        .await
    } else {
        ControlPlane::start_standin_cluster().await
    };
    let controllers = cp.start_controllers("customer-aws");
    let kubectl = cp.kubectl();
    let example_dir = tempfile::tempdir().unwrap();
    let (example, customer_inputs) =
        example_with_registries(example_dir.path(), &vendor, &registry);
    if record {
        with_a_leaky_step(&example);
    }
    let charts = example_dir.path().join("charts");
    if eks {
        with_eks_cluster(&example, &charts);
        // The customer's EKS cluster is where the stand-in listens.
        let ca = base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(&cluster.tls.ca).unwrap());
        customer
            .moto
            .create_eks_cluster(REGION, EKS_CLUSTER, &cluster.url, &ca)
            .await;
    }
    kubectl.ok(&["apply", "-f", example.to_str().unwrap()]);
    let client = cp.client().await;
    let stacks: Api<InstallStack> = Api::namespaced(client.clone(), "default");
    eventually(60, "the install stack to be rendered", async || {
        stacks.get_opt(INSTALL).await.ok().flatten()
    })
    .await;
    let installs: Api<outpost_api::Install> = Api::namespaced(client.clone(), "default");
    let uid = installs.get(INSTALL).await.unwrap().metadata.uid.unwrap();
    if eks {
        // The customer maps each lifecycle role to its own identity in the cluster.
        let rbac = example_dir.path().join("cluster-rbac.yaml");
        let roles =
            ["provision", "maintenance"].map(|r| (format!("{uid}-{r}"), r, format!("outpost:{r}")));
        let roles: Vec<(&str, &str, &str)> = roles
            .iter()
            .map(|(a, b, c)| (a.as_str(), *b, c.as_str()))
            .collect();
        std::fs::write(
            &rbac,
            format!("{}---\n{EKS_RBAC}", crate::eks_cluster::aws_auth(&roles)),
        )
        .unwrap();
        cluster
            .kubectl()
            .ok(&["apply", "-f", rbac.to_str().unwrap()]);
    }

    // The vendor hands the customer the template and a runner token.
    let template = outpost(&["stack", &format!("default/{INSTALL}")], &cp);
    let token = outpost(&["token", &format!("default/{INSTALL}")], &cp)
        .trim()
        .to_owned();

    // The template the vendor hands over carries no token: not this one, nor anything
    // that looks like one.
    assert!(!template.contains(&token), "the token is in the template");
    assert!(!template.contains("opr_"), "a token is in the template");
    let template_json: Value = serde_json::from_str(&template).expect("the stack is JSON");

    // The customer creates the stack.
    // The customer's own cluster's kubeconfig (EKS flow), a secret of the App's like
    // the API key: a stack parameter, and the secret moto skips creating (below).
    let own_kubeconfig = if eks {
        std::fs::read_to_string(cluster.kubeconfig(&cluster.admin_token)).unwrap()
    } else {
        String::new()
    };
    let own_secret = [("SecretClusterKubeconfigValue", own_kubeconfig.as_str())];
    let secrets: &[(&str, &str)] = if eks { &own_secret } else { &[] };
    let outputs = customer
        .create_stack(&template, &token, secrets, &customer_inputs)
        .await;
    let state_bucket = outputs["StateBucketName"].clone();
    // moto creates the bucket without its versioning (CloudFormation's
    // `VersioningConfiguration`): the customer turns it on as the template says.
    let versioning = |status: &str| {
        format!(
            "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Status>{status}</Status></VersioningConfiguration>"
        )
    };
    let (code, answer) = customer.s3("GET", &format!("/{state_bucket}?versioning="), None);
    assert_eq!(code, 200, "{answer}");
    assert!(
        !answer.contains("<Status>Enabled</Status>"),
        "moto turned versioning on; drop this workaround"
    );
    assert_eq!(
        template_json["Resources"]["StateBucket"]["Properties"]["VersioningConfiguration"],
        serde_json::json!({"Status": "Enabled"})
    );
    let (code, answer) = customer.s3(
        "PUT",
        &format!("/{state_bucket}?versioning="),
        Some(&versioning("Enabled")),
    );
    assert_eq!(code, 200, "{answer}");
    let password = customer.create_secrets().await;
    if eks {
        aws_sdk_secretsmanager::Client::new(&customer.admin)
            .create_secret()
            .name(format!("outpost/default/{INSTALL}/{OWN_KUBECONFIG}"))
            .secret_string(&own_kubeconfig)
            .send()
            .await
            .expect("CreateSecret");
    }
    let token_secret = customer.create_token_secret(&template_json, &token).await;
    let runner_role = outputs["RunnerRoleArn"].clone();
    let instance = outputs["RunnerInstanceId"].clone();
    let runner_session = format!(
        "arn:aws:sts::{ACCOUNT}:assumed-role/{}/{instance}",
        runner_role.rsplit('/').next().unwrap()
    );
    // Emulator bridges (see the module documentation).
    let mut role_trust = Value::Null;
    for role in ["provision", "maintenance", "deprovision"] {
        let role = format!("{uid}-{role}");
        let mut trust = customer.trust(&role).await;
        trust["Statement"][0]["Principal"]["AWS"] =
            serde_json::json!([runner_role, runner_session]);
        customer.set_trust(&role, &trust).await;
        role_trust = trust;
    }
    for role in ["provision", "maintenance", "deprovision"]
        .map(|r| format!("{uid}-{r}"))
        .iter()
        .chain([runner_role.rsplit('/').next().unwrap().to_owned()].iter())
    {
        customer.reput_inline_policies(role).await;
    }
    // The runner role reads its token (the stack's `ReadRunnerToken`) until it has.
    customer
        .resource_star(
            runner_role.rsplit('/').next().unwrap(),
            &[
                "cloudformation:DescribeStacks",
                "secretsmanager:GetSecretValue",
                "ssm:GetParameter",
                "ssm:PutParameter",
            ],
        )
        .await;
    // Not the runner role's secret reads: Plans and drift checks read their secrets
    // under their role, which the next policies bridge.
    for role in ["provision", "maintenance", "deprovision"] {
        customer
            .resource_star(&format!("{uid}-{role}"), &["secretsmanager:GetSecretValue"])
            .await;
    }

    let runner_trust = customer
        .trust(runner_role.rsplit('/').next().unwrap())
        .await;
    let mut stand_in = runner_trust.clone();
    stand_in["Statement"][0]["Principal"]["AWS"] =
        serde_json::json!(format!("arn:aws:iam::{ACCOUNT}:user/customer-admin"));
    customer
        .set_trust(runner_role.rsplit('/').next().unwrap(), &stand_in)
        .await;

    // The instance role, as the VM would get it from its instance profile.
    let assumed = aws_sdk_sts::Client::new(&customer.admin)
        .assume_role()
        .role_arn(&runner_role)
        .role_session_name(&instance)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the admin assumes the runner's instance role: {e:?}\n{}",
                customer.moto.log()
            )
        });
    let credentials = assumed.credentials().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let launch = RunnerLaunch {
        template: template_json.clone(),
        server_url: cp.clients_url().to_owned(),
        ca: cp.tls.ca.clone(),
        token_secret: token_secret.clone(),
        state_bucket: state_bucket.clone(),
        key_parameter: outputs["RunnerPublicKeyParameter"].clone(),
        checkpoint_parameter: outputs["AuditCheckpointParameter"].clone(),
        moto_endpoint: customer.moto.endpoint(),
        kubeconfig: (!eks).then(|| cluster.kubeconfig(&cluster.admin_token)),
        helm: eks.then(|| {
            let helm = outpost_e2e::helm::Helm::find().template_binary(example_dir.path());
            (helm, charts.clone())
        }),
        credentials: (
            credentials.access_key_id().to_owned(),
            credentials.secret_access_key().to_owned(),
            credentials.session_token().to_owned(),
        ),
        state: state.clone(),
    };
    let child = launch.spawn();
    // What `ps` and the process's environment show: the secret's ARN, not the token.
    // The kernel fills them in while it loads the binary, possibly after spawn returned.
    let cmdline = eventually(10, "the runner's command line", async || {
        let shown = std::fs::read(format!("/proc/{}/cmdline", child.id())).ok()?;
        (!shown.is_empty()).then(|| String::from_utf8_lossy(&shown).into_owned())
    })
    .await;
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    assert!(cmdline.contains(&token_secret), "{cmdline}");
    assert!(
        !cmdline.contains(&token),
        "the token is on the runner's command line"
    );
    assert!(
        !String::from_utf8_lossy(&environ).contains(&token),
        "the token is in the runner's environment"
    );
    let runner = Process::new(child);
    // The runner registers with the token it read from Secrets Manager; the customer
    // then revokes its read, which it no longer needs.
    let runners: Api<Runner> = Api::namespaced(client.clone(), "default");
    eventually(
        120,
        "the runner to register with the token from Secrets Manager",
        async || runners.get_opt(INSTALL).await.ok().flatten(),
    )
    .await;
    customer
        .resource_star(
            runner_role.rsplit('/').next().unwrap(),
            &[
                "cloudformation:DescribeStacks",
                "ssm:GetParameter",
                "ssm:PutParameter",
            ],
        )
        .await;
    // From now on the runner's credentials cannot read the token; what it has is in its
    // memory (the install reaches Active in the tests that follow).
    let runner_credentials = customer.moto.sdk(
        credentials.access_key_id(),
        credentials.secret_access_key(),
        Some(credentials.session_token()),
    );
    if !eks {
        let refused = aws_sdk_secretsmanager::Client::new(&runner_credentials)
            .get_secret_value()
            .secret_id(&token_secret)
            .send()
            .await
            .expect_err("the revoked runner role reads the token");
        assert_eq!(
            refused.raw_response().map(|r| r.status().as_u16()),
            Some(403),
            "{refused:?}"
        );
    }
    Flow {
        plans: Api::namespaced(client, "default"),
        proxy,
        cp,
        customer,
        cluster,
        _controllers: controllers,
        runner,
        launch,
        runner_role: runner_role.rsplit('/').next().unwrap().to_owned(),
        uid,
        password,
        role_trust,
        state,
        _dir: dir,
        _registries: (vendor, registry, example_dir),
    }
}

fn phase(plan: &Plan) -> Option<PlanPhase> {
    plan.status.as_ref().and_then(|s| s.phase)
}

impl Flow {
    async fn all_plans(&self) -> Vec<Plan> {
        self.plans
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items
    }

    async fn install_reaches(&self, phase: InstallPhase, secs: u64) {
        let installs: Api<outpost_api::Install> =
            Api::namespaced(self.cp.client().await, "default");
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let install = installs.get(INSTALL).await.unwrap();
            if install.status.as_ref().and_then(|s| s.phase) == Some(phase) {
                return;
            }
            if Instant::now() > deadline {
                let plans: Vec<String> = self
                    .all_plans()
                    .await
                    .iter()
                    .map(|p| {
                        let status = p.status.clone().unwrap_or_default();
                        format!(
                            "{} {:?} {}",
                            p.metadata.name.clone().unwrap_or_default(),
                            status.phase,
                            status.message.unwrap_or_default()
                        )
                    })
                    .collect();
                panic!(
                    "install {INSTALL} never reached {phase:?}: {:?}\nplans:\n{}\nmoto:\n{}",
                    install.status,
                    plans.join("\n"),
                    self.customer.moto.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The local audit log, in order.
    fn local_audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.state.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit lines are JSON"))
            .collect()
    }

    /// Waits until every local audit event is shipped and `outpost audit verify` passes.
    async fn audit_verifies(&self) -> Vec<AuditEvent> {
        eventually(60, "the audit log to be shipped and verify", async || {
            let expected = self.local_audit().len();
            let output = Command::new(outpost_binary())
                .args([
                    "audit",
                    "verify",
                    &format!("default/{INSTALL}"),
                    "--kubeconfig",
                ])
                .arg(self.cp.kubeconfig(&self.cp.admin_token))
                .arg("--trust-control-plane")
                .output()
                .expect("outpost audit verify runs");
            let out = String::from_utf8_lossy(&output.stdout);
            (output.status.success() && out.trim() == format!("{expected} events verified"))
                .then_some(())
        })
        .await;
        let events: Api<AuditEvent> = Api::namespaced(self.cp.client().await, "default");
        let mut events = events
            .list(&ListParams::default().labels(&format!("outpost.dev/install={INSTALL}")))
            .await
            .unwrap()
            .items;
        events.sort_by_key(|e| e.spec.sequence);
        events
    }

    /// Waits until `outpost audit verify --stack` (the customer's admin credentials)
    /// verifies the log against the key and checkpoint the runner published.
    async fn audit_verifies_with_stack(&self) {
        let (key, secret) = &self.customer.admin_key;
        let mut said = String::new();
        eventually(
            60,
            "the audit log to verify against the stack",
            async || {
                let output = Command::new(outpost_binary())
                    .args([
                        "audit",
                        "verify",
                        &format!("default/{INSTALL}"),
                        "--stack",
                        STACK,
                    ])
                    .args([
                        "--region",
                        REGION,
                        "--aws-endpoint",
                        &self.customer.moto.endpoint(),
                    ])
                    .arg("--kubeconfig")
                    .arg(self.cp.kubeconfig(&self.cp.admin_token))
                    .env("AWS_ACCESS_KEY_ID", key)
                    .env("AWS_SECRET_ACCESS_KEY", secret)
                    .env("AWS_EC2_METADATA_DISABLED", "true")
                    .output()
                    .expect("outpost audit verify runs");
                said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                (output.status.success() && said.contains(" events verified\n")).then_some(())
            },
        )
        .await;
        assert!(said.contains("the runner's first key"), "{said}");
    }

    /// Triggers `action` as an operator does (`outpost trigger ACTION --install I
    /// [--role R]`: the Install controller renders the Plan), with an optional runtime
    /// role override; returns the Plan's name.
    async fn trigger(&self, action: &str, role: Option<&str>) -> String {
        let mut args = vec!["trigger", action, "--install", INSTALL];
        if let Some(role) = role {
            args.extend(["--role", role]);
        }
        let printed = outpost(&args, &self.cp);
        printed
            .trim()
            .strip_prefix("plan/")
            .unwrap_or_else(|| panic!("outpost trigger prints the Plan: {printed}"))
            .to_owned()
    }

    /// The Plan a cron trigger of `action` makes (`outpost trigger` runs only actions
    /// with a manual trigger), with its spec rendered for the install (the example's
    /// templates: `install.id`, `sandbox.outputs.cluster_name`, `inputs.eks_version`);
    /// returns the Plan's name.
    async fn scheduled(&self, action: &str) -> String {
        let client = self.cp.client().await;
        let actions: Api<outpost_api::Action> = Api::namespaced(client, "default");
        let spec = serde_json::to_string(&actions.get(action).await.unwrap().spec).unwrap();
        let rendered = spec
            .replace("{{ install.id }}", &self.uid)
            .replace(
                "{{ sandbox.outputs.cluster_name }}",
                &format!("{}-eks", self.uid),
            )
            .replace("{{ inputs.eks_version }}", "1.30");
        let desired: Value = serde_json::from_str(&rendered).unwrap();
        let name = format!("{INSTALL}-cron-{action}-{:08x}", rand::random::<u32>());
        let spec = serde_json::json!({
            "install": INSTALL,
            "operation": "trigger",
            "entity": {"kind": "action", "name": action},
            "reason": "cron",
            "desiredState": desired,
            "contentHash": outpost_api::content_hash(&desired),
        });
        let plan: Plan = serde_json::from_value(serde_json::json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Plan",
            "metadata": {"name": name, "labels": {"outpost.dev/install": INSTALL}},
            "spec": spec,
        }))
        .unwrap();
        self.plans
            .create(&Default::default(), &plan)
            .await
            .expect("the trigger Plan is created");
        name
    }

    /// Plan `name` once it finished.
    async fn finished(&self, name: &str) -> Plan {
        eventually(120, &format!("Plan {name} to finish"), async || {
            let plan = self.plans.get(name).await.ok()?;
            phase(&plan)
                .is_some_and(PlanPhase::is_terminal)
                .then_some(plan)
        })
        .await
    }

    /// The `role` audit events of Plan `plan`.
    fn role_events(events: &[AuditEvent], plan: &str) -> Vec<Value> {
        events
            .iter()
            .filter(|e| {
                e.spec.plan.as_deref() == Some(plan) && e.spec.type_ == AuditEventType::Role
            })
            .filter_map(|e| e.spec.details.clone())
            .collect()
    }
}

/// `outpost runner --token-secret SECRET` as the user data starts it, with the access
/// key `key` of the customer's account: its exit code and stderr. It must not get as far
/// as creating its state dir.
fn runner_reading_its_token(customer: &Customer, key: (&str, &str), secret: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let output = Command::new(outpost_binary())
        .args(["runner", "--server", "https://127.0.0.1:1", "--install"])
        .arg(format!("default/{INSTALL}"))
        .arg("--state-dir")
        .arg(&state)
        .args([
            "--token-secret",
            secret,
            "--aws-region",
            REGION,
            "--aws-endpoint",
        ])
        .arg(customer.moto.endpoint())
        .env_remove("OUTPOST_RUNNER_TOKEN")
        .env("AWS_ACCESS_KEY_ID", key.0)
        .env("AWS_SECRET_ACCESS_KEY", key.1)
        .env_remove("AWS_SESSION_TOKEN")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("outpost runner runs");
    assert!(!state.exists(), "the runner started without its token");
    (
        output.status.code().expect("the runner exits"),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_without_the_grant_cannot_read_the_token_and_no_runner_starts() {
    let customer = Customer::start().await;
    let token = "opr_default_globex_0123456789abcdef0123456789abcdef";
    let secret = aws_sdk_secretsmanager::Client::new(&customer.admin)
        .create_secret()
        .name(format!("outpost-runner-token/default/{INSTALL}"))
        .secret_string(token)
        .send()
        .await
        .expect("CreateSecret");
    let arn = secret.arn().unwrap();
    // Another principal of the account, with no grant on the secret.
    let iam = customer.iam();
    iam.create_user()
        .user_name("someone-else")
        .send()
        .await
        .expect("CreateUser");
    let key = iam
        .create_access_key()
        .user_name("someone-else")
        .send()
        .await
        .expect("CreateAccessKey");
    let key = key.access_key().unwrap();
    let (code, stderr) = runner_reading_its_token(
        &customer,
        (key.access_key_id(), key.secret_access_key()),
        arn,
    );
    assert_eq!(code, 1, "{stderr}");
    let refused = stderr
        .lines()
        .find_map(|line| {
            line.split(&format!(
                "Error: cannot read the runner token from AWS Secrets Manager secret {arn}: "
            ))
            .nth(1)
        })
        .unwrap_or_else(|| panic!("no refusal in:\n{stderr}"));
    assert!(
        refused.contains("AccessDenied") && refused.contains("user/someone-else"),
        "{refused}"
    );
    assert!(!stderr.contains(token), "{stderr}");
    // A secret that does not exist is named as such.
    let (code, stderr) = runner_reading_its_token(
        &customer,
        (&customer.admin_key.0, &customer.admin_key.1),
        "outpost-runner-token/default/nobody",
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("secret outpost-runner-token/default/nobody: ResourceNotFoundException"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_runs_each_plan_under_its_role_in_the_customer_account() {
    let flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;

    // Every Plan ran under its resolved role, assumed for it alone: the signed audit
    // log names the assumed-role identity, whose session is the Plan's uid.
    let events = flow.audit_verifies().await;
    // The runner booted from the stack's user data published its key and checkpoints
    // into the stack's SSM parameters: the customer verifies against them.
    flow.audit_verifies_with_stack().await;
    let plans = flow.all_plans().await;
    assert!(plans.len() >= 5, "{plans:?}");
    for plan in &plans {
        let name = plan.metadata.name.clone().unwrap();
        assert_eq!(
            phase(plan),
            Some(PlanPhase::Succeeded),
            "{name}: {:?}",
            plan.status
        );
        let role = plan.status.clone().unwrap().role.unwrap().name;
        let roles = Flow::role_events(&events, &name);
        assert_eq!(roles.len(), 1, "one role event of {name}: {roles:?}");
        assert_eq!(
            roles[0]["assumedRole"],
            format!(
                "arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{}",
                plan.metadata.uid.clone().unwrap()
            ),
            "{name}"
        );
        assert_eq!(
            roles[0]["roleArn"],
            format!("arn:aws:iam::{ACCOUNT}:role/{role}")
        );
        let text = roles[0].to_string();
        assert!(
            !text.contains("ASIA") && !text.contains("SecretAccessKey"),
            "no credentials in the audit log: {text}"
        );
    }
    // The database is deployed with the provision role (matrix rule), web with the
    // maintenance role (default).
    let role_of = |entity: &str| {
        plans
            .iter()
            .find(|p| p.spec.entity.name == entity && p.spec.operation == Operation::Deploy)
            .and_then(|p| p.status.clone()?.role)
            .map(|r| r.name)
            .unwrap_or_default()
    };
    assert_eq!(role_of("database"), format!("{}-provision", flow.uid));
    assert_eq!(role_of("web"), format!("{}-maintenance", flow.uid));

    // The migrate action got the database password from the customer's Secrets Manager.
    let migrate = plans
        .iter()
        .find(|p| p.spec.entity.name == "migrate")
        .expect("a migrate Plan");
    assert_eq!(
        migrate.status.clone().unwrap().outputs["steps"][0]["exitCode"],
        0,
        "{:?}",
        migrate.status
    );

    // The enabled roles of the stack are reported on the Runner and the InstallStack.
    let client = flow.cp.client().await;
    let enabled: Vec<String> = ["deprovision", "maintenance", "provision"]
        .iter()
        .map(|r| format!("{}-{r}", flow.uid))
        .collect();
    let runners: Api<Runner> = Api::namespaced(client.clone(), "default");
    let stacks: Api<InstallStack> = Api::namespaced(client, "default");
    eventually(30, "the enabled roles to be reported", async || {
        let runner = runners.get(INSTALL).await.ok()?.status?.enabled_roles;
        let stack = stacks.get(INSTALL).await.ok()?.status?.enabled_roles;
        (runner == enabled && stack == enabled).then_some(())
    })
    .await;
    let table = flow.cp.kubectl().ok(&["get", "installstacks"]);
    assert!(
        table.contains("ENABLED ROLES") && table.contains(&enabled[0]),
        "{table}"
    );

    // A maintenance action whose role lacks a permission: backup-check may describe
    // snapshots but not take one, and the emulator says so with a 403.
    let name = flow.scheduled("backup-check").await;
    let plan = flow.finished(&name).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(
        status.role.clone().unwrap().name,
        format!("{}-maintenance", flow.uid)
    );
    assert_eq!(phase(&plan), Some(PlanPhase::Failed), "{status:?}");
    // A failed step's last output is in the Plan's message.
    let log = status.message.clone().unwrap_or_default();
    assert!(
        log.starts_with("apply failed: step check failed with exit code 1")
            && log.contains("rds DescribeDBSnapshots: HTTP 200")
            && log.contains("rds CreateDBSnapshot: HTTP 403")
            && log.contains("<Code>AccessDenied</Code>")
            && log.contains(&format!(
                "assumed-role/{}-maintenance/{}",
                flow.uid,
                plan.metadata.uid.clone().unwrap()
            ))
            && log.contains("rds:CreateDBSnapshot"),
        "the step got the emulator's 403 under the maintenance role: {log}\n{:?}",
        plan.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_the_customer_revokes_fails_the_plan_closed_until_restored() {
    let flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    let maintenance = format!("{}-maintenance", flow.uid);

    // The customer revokes the maintenance role's trust of the runner.
    let trusted = flow.customer.trust(&maintenance).await;
    let mut revoked = trusted.clone();
    revoked["Statement"][0]["Principal"]["AWS"] =
        serde_json::json!(format!("arn:aws:iam::{ACCOUNT}:root"));
    flow.customer.set_trust(&maintenance, &revoked).await;

    // The next deploy of web (maintenance role) fails closed.
    let before: Vec<String> = flow
        .all_plans()
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    flow.cp.kubectl().ok(&[
        "patch",
        "install",
        INSTALL,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"inputs":{"domain":"shop.globex.example"}}}"#,
    ]);
    let failed = eventually(120, "a new maintenance Plan to fail", async || {
        flow.all_plans().await.into_iter().find(|p| {
            !before.contains(p.metadata.name.as_ref().unwrap())
                && phase(p) == Some(PlanPhase::Failed)
        })
    })
    .await;
    let status = failed.status.clone().unwrap();
    assert_eq!(status.role.clone().unwrap().name, maintenance);
    assert_eq!(
        status.message.as_deref(),
        Some(
            format!("role {maintenance} is disabled or not assumable in the customer account")
                .as_str()
        ),
        "{status:?}"
    );
    // Nothing ran: no plan or apply of it, and the refusal names the role.
    let name = failed.metadata.name.clone().unwrap();
    let events = flow.audit_verifies().await;
    let of_plan: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.spec.plan.as_deref() == Some(name.as_str()))
        .collect();
    assert!(
        of_plan
            .iter()
            .all(|e| !matches!(e.spec.type_, AuditEventType::Plan | AuditEventType::Apply)),
        "{of_plan:?}"
    );
    let roles = Flow::role_events(&events, &name);
    assert_eq!(roles.len(), 1, "{roles:?}");
    assert_eq!(roles[0]["assumable"], false);
    assert!(
        roles[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("does not trust")),
        "{roles:?}"
    );

    // The customer restores the trust; the operator retries the Plan (deleting it lets
    // the controller make it again) and it succeeds.
    flow.customer.set_trust(&maintenance, &trusted).await;
    flow.plans
        .delete(&name, &DeleteParams::default())
        .await
        .expect("the failed Plan can be deleted");
    let entity = failed.spec.entity.name.clone();
    let operation = failed.spec.operation;
    eventually(180, "the retried Plan to succeed", async || {
        flow.all_plans().await.into_iter().find(|p| {
            p.spec.entity.name == entity
                && p.spec.operation == operation
                && !before.contains(p.metadata.name.as_ref().unwrap())
                && phase(p) == Some(PlanPhase::Succeeded)
        })
    })
    .await;
    flow.install_reaches(InstallPhase::Active, 300).await;
}

/// Every object the control plane serves, as JSON text, one entry per resource type:
/// discovery's every listable type, listed across namespaces by the admin.
fn every_object(cp: &ControlPlane) -> Vec<(String, String)> {
    let kubectl = cp.kubectl();
    let types = kubectl.ok(&["api-resources", "--verbs=list", "-o", "name"]);
    types
        .lines()
        .filter(|t| !t.is_empty())
        .map(|t| {
            let listed = kubectl.ok(&["get", t, "-A", "-o", "json"]);
            (t.to_owned(), listed)
        })
        .collect()
}

/// Every file under `dir`, as bytes, with its path.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                found.push((path, bytes));
            }
        }
    }
    found
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

async fn the_secret_never_reaches_the_control_plane(backend: Backend) {
    let flow = start_with(backend, true).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    let password = flow.password.clone();
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&password)
    };

    // The executor got it: the migrate step recorded the digest of what it received.
    let digest = std::fs::read_to_string(
        outpost_e2e::work_dirs(&flow.state).join("action-migrate/job/password.sha256"),
    )
    .expect("the migrate step recorded the password's digest");
    let expected = {
        let output = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(password.as_bytes())?;
                child.wait_with_output()
            })
            .expect("sha256sum runs");
        String::from_utf8(output.stdout).unwrap()[..64].to_owned()
    };
    assert_eq!(
        digest.trim(),
        expected,
        "the step received the customer's password"
    );

    // The runner wrote it into the Secret the App's db_password names, in the customer's
    // cluster (the stand-in), which web's Deployment reads by secretKeyRef.
    let cluster = flow.cluster.kubectl();
    let secret: Value = serde_json::from_str(&cluster.ok(&[
        "get",
        "secret",
        "database",
        "-n",
        "shopfront",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(secret["data"]["password"], encoded.as_str(), "{secret}");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "outpost"
    );
    let web: Value = serde_json::from_str(&cluster.ok(&[
        "get",
        "deployment",
        "web",
        "-n",
        "shopfront",
        "-o",
        "json",
    ]))
    .unwrap();
    let reads = web["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| {
            e["valueFrom"]["secretKeyRef"]
                == serde_json::json!({"name": "database", "key": "password"})
        });
    assert!(reads, "{web}");

    // Drift checks run under each component's deploy role: the database's (the
    // provision role), which reads the password under it, reports in sync.
    let client = flow.cp.client().await;
    let reports: Api<outpost_api::DriftReport> = Api::namespaced(client, "default");
    for component in ["database", "web"] {
        let name = format!("{INSTALL}-{component}");
        eventually(
            60,
            &format!("the DriftReport {name}, in sync"),
            async || {
                reports
                    .get_opt(&name)
                    .await
                    .ok()??
                    .spec
                    .in_sync
                    .then_some(())
            },
        )
        .await;
    }

    // A step printed the password and the role's session token: the Plan's log shows
    // `***` in their place.
    let session_token = std::fs::read_to_string(
        outpost_e2e::work_dirs(&flow.state).join("action-migrate/job/session-token"),
    )
    .expect("the leaky step kept the session token");
    assert!(session_token.len() > 16, "{session_token:?}");
    let session_encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&session_token)
    };
    let plans: Api<outpost_api::Plan> = Api::namespaced(flow.cp.client().await, "default");
    let migrate = plans
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.entity.name == "migrate")
        .expect("a migrate Plan");
    let log = migrate.status.unwrap().log.unwrap_or_default();
    for line in [
        "password: ***",
        "session: ***",
        "password, base64: ***",
        "to stderr: ***",
    ] {
        assert!(
            log.contains(line),
            "{line:?} is not in the Plan's log:\n{log}"
        );
    }

    // No object the control plane serves holds it, plain or base64: every kind (Plans
    // with their logs and outputs, AuditEvents, DriftReports, InstallStacks, Runners).
    let events = flow.audit_verifies().await;
    assert!(!events.is_empty());
    let drift_role = events
        .iter()
        .filter(|e| e.spec.type_ == AuditEventType::Role)
        .filter_map(|e| e.spec.details.clone())
        .find(|d| d["drift"] == true && d["role"] == format!("{}-provision", flow.uid))
        .expect("the database's drift check assumed the provision role");
    assert_eq!(
        drift_role["assumedRole"],
        format!(
            "arn:aws:sts::{ACCOUNT}:assumed-role/{}-provision/drift-database",
            flow.uid
        ),
        "{drift_role}"
    );
    // The Secret is audited by digest.
    let written = events
        .iter()
        .filter(|e| e.spec.type_ == AuditEventType::Apply)
        .filter_map(|e| e.spec.details.clone())
        .find_map(|d| d.get("kubernetesSecrets").cloned())
        .expect("web's apply audits the Secret it wrote");
    assert_eq!(
        written[0]["sha256"],
        format!("sha256:{expected}"),
        "{written}"
    );
    assert_eq!(written[0]["name"], "database");
    let objects = every_object(&flow.cp);
    assert!(
        objects.iter().any(|(t, _)| t.starts_with("plans")),
        "{objects:?}"
    );
    assert!(
        objects
            .iter()
            .any(|(t, listed)| t.starts_with("auditevents") && listed.contains("assumedRole")),
        "the audit events were listed"
    );
    for (type_, listed) in &objects {
        assert!(
            !listed.contains(&password) && !listed.contains(&encoded),
            "the password is in the {type_} the control plane serves"
        );
        assert!(
            !listed.contains(&session_token) && !listed.contains(&session_encoded),
            "the session token is in the {type_} the control plane serves"
        );
    }
    // Nor is it anywhere in the store's files (embedded) or in etcd.
    match flow.cp.etcd_endpoint() {
        None => {
            let stored = files(flow.cp.scratch());
            assert!(!stored.is_empty());
            for (path, bytes) in stored {
                assert!(
                    !contains(&bytes, &password) && !contains(&bytes, &encoded),
                    "the password is in {}",
                    path.display()
                );
                assert!(
                    !contains(&bytes, &session_token),
                    "the session token is in {}",
                    path.display()
                );
            }
        }
        Some(endpoint) => {
            let output = Command::new("etcdctl")
                .args(["--endpoints", endpoint, "get", "--prefix", ""])
                .output()
                .expect("etcdctl runs");
            assert!(output.status.success());
            assert!(output.stdout.len() > 1000, "etcd holds the objects");
            assert!(
                !contains(&output.stdout, &password) && !contains(&output.stdout, &encoded),
                "the password is in etcd"
            );
            assert!(
                !contains(&output.stdout, &session_token),
                "the session token is in etcd"
            );
        }
    }
    // Nor in any API response of the run: every client (the runner, the controllers,
    // kubectl, `outpost`, this test) went through the recording proxy, which saw the
    // runner's Plan status updates and watches.
    let proxy = flow.proxy.as_ref().expect("the run is recorded");
    let requests = String::from_utf8_lossy(&proxy.requests()).into_owned();
    assert!(
        requests
            .lines()
            .any(|l| l.contains("/plans/") && l.contains("/status")),
        "the proxy saw the runner's Plan status updates"
    );
    assert!(
        requests.contains("watch=true") || requests.contains("watch=1"),
        "the proxy saw watches"
    );
    let responses = proxy.responses();
    // A watch event is one line `{"object":{...},"type":"MODIFIED"}` (either key order).
    let watched = ["ADDED", "MODIFIED"].iter().any(|t| {
        contains(&responses, &format!("\"type\":\"{t}\"}}\n"))
            || contains(&responses, &format!("{{\"type\":\"{t}\",\"object\":"))
    });
    assert!(watched, "the proxy recorded watch events");
    assert!(
        contains(&responses, "\"assumedRole\"") && contains(&responses, "\"phase\":\"Succeeded\""),
        "the proxy recorded the answers ({} connections)",
        proxy.connections()
    );
    let escaped = serde_json::to_string(&password).unwrap();
    for form in [
        password.as_str(),
        encoded.as_str(),
        escaped.trim_matches('"'),
    ] {
        assert!(
            !contains(&responses, form),
            "the password ({form}) is in an API response"
        );
    }
    let session_escaped = serde_json::to_string(&session_token).unwrap();
    for form in [
        session_token.as_str(),
        session_encoded.as_str(),
        session_escaped.trim_matches('"'),
    ] {
        assert!(
            !contains(&responses, form),
            "the session token ({form}) is in an API response"
        );
    }
    let requests = requests.into_bytes();
    assert!(
        !contains(&requests, &password) && !contains(&requests, &session_token),
        "the password or the session token is in an API request"
    );

    // Nor in the runner's signed audit log or its journal in the state dir.
    // (The work dirs, where the steps wrote, are not in it.)
    for (path, bytes) in files(&flow.state) {
        assert!(
            !contains(&bytes, &password) && !contains(&bytes, &session_token),
            "the password or the session token is in the runner's {}",
            path.display()
        );
    }
}

outpost_e2e::on_both_backends!(the_secret_never_reaches_the_control_plane);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_glass_runs_only_while_the_customer_enables_the_role() {
    let flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    // The cluster the sandbox names (`cluster_name`): the example's sandbox only stands
    // in for it, so the customer creates it in the emulator, logs off.
    let cluster = format!("{}-eks", flow.uid);
    let (status, created) = flow.customer.eks(
        "/clusters",
        Some(&serde_json::json!({
            "name": cluster,
            "version": "1.29",
            "roleArn": format!("arn:aws:iam::{ACCOUNT}:role/{}-provision", flow.uid),
            "resourcesVpcConfig": {"subnetIds": [flow.customer.subnet]},
        })),
    );
    assert_eq!(status, 200, "CreateCluster: {created}");
    let logging = |flow: &Flow| {
        let (status, described) = flow.customer.eks(&format!("/clusters/{cluster}"), None);
        assert_eq!(status, 200, "DescribeCluster: {described}");
        described["cluster"]["logging"]["clusterLogging"].clone()
    };
    let audit_logs_on = |logging: &Value| {
        logging.as_array().is_some_and(|groups| {
            groups.iter().any(|g| {
                g["enabled"] == true
                    && g["types"]
                        .as_array()
                        .is_some_and(|t| t.contains(&"audit".into()))
            })
        })
    };
    assert!(!audit_logs_on(&logging(&flow)), "{}", logging(&flow));

    let role = format!("{}-eks-upgrade-role", flow.uid);
    let refused = format!("role {role} is disabled or not assumable in the customer account");
    // Disabled by default: the role is absent, the operator's trigger fails closed.
    let first = flow.trigger("eks-audit-logs", Some(&role)).await;
    let plan = flow.finished(&first).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some(refused.as_str()),
        "{status:?}"
    );
    assert_eq!(status.role.unwrap().name, role);
    // The maintenance role may describe the cluster, not change it: moto says 403.
    let maintenance = format!("{}-maintenance", flow.uid);
    let denied = flow.trigger("eks-audit-logs", Some(&maintenance)).await;
    let plan = flow.finished(&denied).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Failed), "{status:?}");
    assert_eq!(status.role.unwrap().name, maintenance);
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("HTTP 403") && message.contains("eks:UpdateClusterConfig"),
        "{message}"
    );
    assert!(!audit_logs_on(&logging(&flow)));

    // The customer switches it on for the incident.
    flow.customer
        .update_parameter("EnableEksUpgradeRole", "true")
        .await;
    // moto re-evaluates the role's condition on update and creates it; it gets the
    // emulator bridges the stack's other roles got.
    let iam = flow.customer.iam();
    iam.get_role()
        .role_name(&role)
        .send()
        .await
        .expect("the stack update created the role");
    flow.customer.set_trust(&role, &flow.role_trust).await;
    flow.customer.reput_inline_policies(&role).await;
    flow.customer
        .resource_star(&role, &["secretsmanager:GetSecretValue"])
        .await;
    let second = flow.trigger("eks-audit-logs", Some(&role)).await;
    let plan = flow.finished(&second).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(phase(&plan), Some(PlanPhase::Succeeded), "{status:?}");
    assert_eq!(status.role.clone().unwrap().name, role);
    // The step ran as the break-glass role's session for this Plan, and the cluster's
    // configuration really changed: the customer sees the logs on.
    let log = status.log.clone().unwrap_or_default();
    assert!(
        log.contains(&format!(
            "changing the cluster as arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{}",
            plan.metadata.uid.clone().unwrap()
        )) && log.contains(&format!(
            "eks UpdateClusterConfig {cluster} (api, audit, authenticator logs on): HTTP 200"
        )),
        "{status:?}"
    );
    assert!(audit_logs_on(&logging(&flow)), "{}", logging(&flow));

    // The customer switches it off again; the next trigger fails closed.
    flow.customer
        .update_parameter("EnableEksUpgradeRole", "false")
        .await;
    // moto keeps a role whose condition the update switched off: the customer deletes
    // it as CloudFormation would.
    let names = iam
        .list_role_policies()
        .role_name(&role)
        .send()
        .await
        .unwrap();
    for name in names.policy_names() {
        iam.delete_role_policy()
            .role_name(&role)
            .policy_name(name)
            .send()
            .await
            .expect("DeleteRolePolicy");
    }
    iam.delete_role()
        .role_name(&role)
        .send()
        .await
        .expect("DeleteRole");
    let third = flow.trigger("eks-audit-logs", Some(&role)).await;
    let plan = flow.finished(&third).await;
    let status = plan.status.clone().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some(refused.as_str()),
        "{status:?}"
    );

    // Every step is in the signed audit log with the role it used (or could not).
    let events = flow.audit_verifies().await;
    let roles = |plan: &str| Flow::role_events(&events, plan);
    assert_eq!(roles(&first).len(), 1);
    assert_eq!(roles(&first)[0]["assumable"], false);
    assert!(
        roles(&first)[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not enabled")),
        "{:?}",
        roles(&first)
    );
    let used = roles(&second);
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0]["level"], "override");
    let uid = plan_uid(&flow, &second).await;
    assert_eq!(
        used[0]["assumedRole"],
        format!("arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{uid}")
    );
    let applied = events.iter().any(|e| {
        e.spec.plan.as_deref() == Some(second.as_str()) && e.spec.type_ == AuditEventType::Apply
    });
    assert!(applied, "the break-glass run is audited");
    assert_eq!(roles(&third)[0]["assumable"], false);
    for plan in [&first, &third] {
        assert!(
            events
                .iter()
                .any(|e| e.spec.plan.as_deref() == Some(plan.as_str())
                    && e.spec.type_ == AuditEventType::Refuse),
            "the refusal of {plan} is audited"
        );
    }
}

async fn plan_uid(flow: &Flow, name: &str) -> String {
    flow.plans.get(name).await.unwrap().metadata.uid.unwrap()
}

/// Terraform state lives in the customer's bucket, not on the runner's disk: once the
/// install is Active the bucket holds one versioned state object per terraform entity
/// (whose lock files were taken and released), and the runner's own role cannot read
/// them. The runner is killed, its state dir and work dirs wiped and a new runner started from the
/// same user data: the next Plan of every terraform entity (the `database` component,
/// the sandbox) finds the state in the bucket and reports no changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_state_dir_is_wiped_finds_terraform_state_in_the_bucket() {
    let mut flow = start(Backend::Embedded).await;
    flow.install_reaches(InstallPhase::Active, 300).await;
    let bucket = flow.launch.state_bucket.clone();
    let keys = [
        "sandbox/terraform.tfstate",
        "components/database/terraform.tfstate",
    ];

    // The bucket is versioned and holds the two state objects and nothing else: the
    // lock files terraform took are deleted (delete markers of `.tflock` keys remain).
    let customer = &flow.customer;
    let (_, versioning) = customer.s3("GET", &format!("/{bucket}?versioning="), None);
    assert!(
        versioning.contains("<Status>Enabled</Status>"),
        "{versioning}"
    );
    let (code, listed) = customer.s3("GET", &format!("/{bucket}?list-type=2"), None);
    assert_eq!(code, 200, "{listed}");
    let current: Vec<&str> = listed
        .split("<Key>")
        .skip(1)
        .map(|rest| &rest[..rest.find("</Key>").unwrap()])
        .collect();
    assert_eq!(current.len(), 2, "{listed}");
    for key in keys {
        assert!(current.contains(&key), "{key} in {listed}");
    }
    let (_, versions) = customer.s3("GET", &format!("/{bucket}?versions="), None);
    for key in keys {
        assert!(
            versions.contains(&format!("<Key>{key}.tflock</Key>")),
            "{key} was locked: {versions}"
        );
    }
    let (code, state) = customer.s3("GET", &format!("/{bucket}/{}", keys[1]), None);
    assert_eq!(code, 200, "{state}");
    let state: Value = serde_json::from_str(&state).expect("the state object is JSON");
    assert_eq!(
        state["resources"][0]["type"], "terraform_data",
        "the database's state: {state}"
    );
    // Nothing of it on the runner's disk.
    let local =
        outpost_e2e::work_dirs(&flow.state).join("component-database/module/terraform.tfstate");
    assert!(!local.exists(), "{} exists", local.display());
    // The runner's own credentials (its instance role) cannot read the state: only the
    // install's lifecycle roles may (the emulator enforces the roles' identity policies;
    // the bucket policy denying every other principal is checked on the template).
    let (key, secret, token) = &flow.launch.credentials;
    let (code, answer) = customer.s3_as(
        (key.as_str(), secret.as_str(), Some(token.as_str())),
        "GET",
        &format!("/{bucket}/{}", keys[1]),
        None,
    );
    assert_eq!(code, 403, "the runner role read the state: {answer}");

    // The VM is lost: the runner is killed and its state dir wiped. A new one boots from
    // the same user data (it reads its token again, as a new VM's runner would).
    flow.runner.kill();
    std::fs::remove_dir_all(&flow.state).expect("the state dir is wiped");
    std::fs::remove_dir_all(outpost_e2e::work_dirs(&flow.state)).expect("the work dirs too");
    flow.customer
        .resource_star(
            &flow.runner_role,
            &[
                "cloudformation:DescribeStacks",
                "secretsmanager:GetSecretValue",
            ],
        )
        .await;
    flow.runner = Process::new(flow.launch.spawn());

    // The next Plan of the database component and of the sandbox: no changes.
    let printed = outpost(&["deploy", "database", "--install", INSTALL], &flow.cp);
    let deploy = printed
        .trim()
        .strip_prefix("plan/")
        .unwrap_or_else(|| panic!("outpost deploy prints the Plan: {printed}"))
        .to_owned();
    let provision = flow
        .all_plans()
        .await
        .into_iter()
        .find(|p| p.spec.entity.kind == outpost_api::EntityKind::Sandbox)
        .expect("the sandbox was provisioned");
    let mut spec = provision.spec.clone();
    spec.operation = Operation::Reprovision;
    spec.reason = Some("manual: after the runner's state dir was wiped".into());
    let reprovision = format!("{INSTALL}-reprovision-wiped");
    let plan: Plan = serde_json::from_value(serde_json::json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Plan",
        "metadata": {"name": reprovision, "labels": {"outpost.dev/install": INSTALL}},
        "spec": spec,
    }))
    .unwrap();
    flow.plans
        .create(&Default::default(), &plan)
        .await
        .expect("the reprovision Plan is created");
    for name in [&deploy, &reprovision] {
        let plan = flow.finished(name).await;
        let status = plan.status.clone().unwrap_or_default();
        assert_eq!(
            phase(&plan),
            Some(PlanPhase::Succeeded),
            "{name}: {status:?}"
        );
        assert_eq!(
            status.reason.as_deref(),
            Some("NoChanges"),
            "{name} found the state: {status:?}"
        );
        assert_eq!(status.claimed_by.as_deref(), Some(INSTALL));
    }
    // Still the bucket's state, not a new one on the new runner's disk.
    assert!(!local.exists(), "{} exists", local.display());
}

/// Issue 19, cluster access without a kubeconfig: the stack-booted runner, started
/// without `--kubeconfig`, reaches the install's cluster (the stand-in, named by the
/// sandbox's outputs) with an EKS token minted under each Plan's role. The cluster maps
/// each lifecycle role to its own group: `cache`, deployed with the provision role, is
/// applied; `web`, deployed with the maintenance role, which the cluster lets only
/// read, is refused by the cluster (403) and nothing of it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_kubeconfig_each_plan_reaches_the_cluster_with_an_eks_token_of_its_role() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let flow = start_flow(Backend::Embedded, false, ClusterAccess::EksTokens).await;
    let deploy_of = async |entity: &str, wanted: PlanPhase| {
        flow.all_plans().await.into_iter().find(|p| {
            p.spec.entity.name == entity
                && p.spec.operation == Operation::Deploy
                && phase(p) == Some(wanted)
        })
    };
    let cache = eventually(300, "cache's deploy Plan to succeed", async || {
        deploy_of("cache", PlanPhase::Succeeded).await
    })
    .await;
    assert_eq!(
        cache.status.unwrap().role.unwrap().name,
        format!("{}-provision", flow.uid)
    );
    let services: Api<Service> = Api::namespaced(flow.cluster.client().await, "shopfront");
    assert!(services.get_opt("cache").await.unwrap().is_some());

    let web = eventually(300, "web's deploy Plan to fail", async || {
        deploy_of("web", PlanPhase::Failed).await
    })
    .await;
    let status = web.status.unwrap();
    assert_eq!(
        status.role.unwrap().name,
        format!("{}-maintenance", flow.uid)
    );
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "User \"maintenance:{}\" cannot patch resource \"deployments\"",
            web.metadata.uid.clone().unwrap()
        )),
        "{message}"
    );
    let deployments: Api<Deployment> = Api::namespaced(flow.cluster.client().await, "shopfront");
    assert!(deployments.get_opt("web").await.unwrap().is_none());

    // A helm_chart takes the same path: rendered with the cluster's .Capabilities and
    // applied under the provision role; under the maintenance role the cluster refuses.
    let chart = eventually(300, "chart's deploy Plan to succeed", async || {
        deploy_of("chart", PlanPhase::Succeeded).await
    })
    .await;
    assert_eq!(
        chart.status.unwrap().role.unwrap().name,
        format!("{}-provision", flow.uid)
    );
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(flow.cluster.client().await, "shopfront");
    let rendered = configs.get("chart-config").await.unwrap().data.unwrap();
    assert!(rendered["kubeVersion"].starts_with("v1."), "{rendered:?}");
    let readonly = eventually(300, "chart-readonly's deploy Plan to fail", async || {
        deploy_of("chart-readonly", PlanPhase::Failed).await
    })
    .await;
    // The cluster refuses the chart's first write: its ConfigMap, or its namespace when
    // this Plan runs before another component has made it.
    let message = readonly.status.unwrap().message.unwrap_or_default();
    let refused = |resource: &str| {
        format!(
            "User \"maintenance:{}\" cannot patch resource \"{resource}\"",
            readonly.metadata.uid.clone().unwrap()
        )
    };
    assert!(
        message.contains(&refused("configmaps")) || message.contains(&refused("namespaces")),
        "{message}"
    );
    assert!(
        configs
            .get_opt("chart-readonly-config")
            .await
            .unwrap()
            .is_none()
    );

    // The customer's own cluster, by the kubeconfig in their Secrets Manager: reached,
    // and the kubeconfig (its token) is in no Plan and no audit event.
    eventually(300, "own-cluster's deploy Plan to succeed", async || {
        deploy_of("own-cluster", PlanPhase::Succeeded).await
    })
    .await;
    let reached = configs.get("own-cluster").await.unwrap().data.unwrap();
    assert_eq!(reached["reached"], "by the customer's kubeconfig");
    let token = &flow.cluster.admin_token;
    let plans = serde_json::to_string(&flow.all_plans().await).unwrap();
    assert!(
        !plans.contains(token.as_str()),
        "a Plan holds the kubeconfig's token"
    );
    let events: Api<AuditEvent> = Api::namespaced(flow.cp.client().await, "default");
    let events =
        serde_json::to_string(&events.list(&Default::default()).await.unwrap().items).unwrap();
    assert!(
        !events.contains(token.as_str()),
        "an audit event holds the kubeconfig's token"
    );
    assert!(
        plans.contains("${outpost-secret:cluster_kubeconfig}"),
        "the Plan names the secret"
    );
}
