//! The customer's account in the emulator: its admin, the install stack it creates and
//! updates, its secrets, the trust and policies it bridges for moto.

use super::*;

/// The customer's account: moto, the admin's SDK configuration.
pub(crate) struct Customer {
    pub(crate) moto: Moto,
    pub(crate) admin: SdkConfig,
    /// The admin's access key id and secret, for calls the test signs with curl.
    pub(crate) admin_key: (String, String),
    pub(crate) vpc: String,
    pub(crate) subnet: String,
}

impl Customer {
    /// Starts moto and spends the unauthenticated calls on the default subnet and an
    /// admin user with an access key; from then on IAM is enforced.
    pub(crate) async fn start() -> Customer {
        Customer::start_on(start_moto(), true).await
    }

    /// [`Customer::start`] on `moto`, which enforces IAM when `enforced` (checked).
    pub(crate) async fn start_on(moto: Moto, enforced: bool) -> Customer {
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

    pub(crate) fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.admin)
    }

    /// An EKS call as the admin (`curl --aws-sigv4`, as the example's actions call
    /// AWS): `path` with the JSON `body` (POST) or none (GET); the status and the
    /// answer.
    pub(crate) fn eks(&self, path: &str, body: Option<&Value>) -> (u16, Value) {
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
    pub(crate) fn s3(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let admin = (self.admin_key.0.as_str(), self.admin_key.1.as_str(), None);
        self.s3_as(admin, method, path, body)
    }

    /// [`Self::s3`] with the credentials `(key id, secret, session token)`.
    pub(crate) fn s3_as(
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
    pub(crate) fn signed_curl(&self, service: &str, key: (&str, &str)) -> Command {
        let mut curl = Command::new("curl");
        curl.args(["-sS", "-w", "\\n%{http_code}", "--aws-sigv4"])
            .arg(format!("aws:amz:{REGION}:{service}"))
            .arg("--user")
            .arg(format!("{}:{}", key.0, key.1));
        curl
    }

    /// Runs `curl` on the emulator's `path`: the status and the answer.
    pub(crate) fn answer(&self, mut curl: Command, path: &str) -> (u16, String) {
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
    pub(crate) async fn create_stack(
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
        let mut status = String::new();
        let stack = wait_for(Duration::from_secs(120), async || {
            let described = cfn
                .describe_stacks()
                .stack_name(STACK)
                .send()
                .await
                .expect("DescribeStacks");
            let stack = described.stacks()[0].clone();
            status = stack.stack_status().unwrap().as_str().to_owned();
            (!status.ends_with("_IN_PROGRESS")).then_some(stack)
        })
        .await
        .unwrap_or_else(|| panic!("stack stuck in {status}"));
        assert_eq!(status, "CREATE_COMPLETE", "{stack:?}\n{}", self.moto.log());
        stack
            .outputs()
            .iter()
            .map(|o| {
                (
                    o.output_key().unwrap().to_owned(),
                    o.output_value().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Creates the install's secrets where moto skipped them; returns the database
    /// password.
    pub(crate) async fn create_secrets(&self) -> String {
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
    pub(crate) async fn create_token_secret(&self, template: &Value, token: &str) -> String {
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
    pub(crate) async fn update_parameter(&self, key: &str, value: &str) {
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
    pub(crate) async fn trust(&self, role: &str) -> Value {
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
    pub(crate) async fn reput_inline_policies(&self, role: &str) {
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
    pub(crate) async fn resource_star(&self, role: &str, actions: &[&str]) {
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

    pub(crate) async fn set_trust(&self, role: &str, policy: &Value) {
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
pub(crate) struct FormEncodedLikePython;

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
pub(crate) const API_KEY: &str = "key-from-the-customer-7d1c";

/// A random hex string (the database password the customer generates).
pub(crate) fn uuid_like() -> String {
    (0..4)
        .map(|_| format!("{:08x}", rand::random::<u32>()))
        .collect()
}

/// The `outpost runner` command of the install stack's user data (the unit's
/// `ExecStart`), with each word of `substitutions` replaced: the substitutions
/// CloudFormation makes, and the test's binary and state dir. Every `${…}` must be one.
pub(crate) fn user_data_command(template: &Value, substitutions: &[(&str, &str)]) -> Command {
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
pub(crate) fn percent_decode(text: &str) -> String {
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
