//! The example App's install stack against real tools: `cfn-lint` finds no
//! error in it, and the AWS emulator (`moto_server`) creates it, with the
//! roles the customer's parameters enable and no others.
//!
//! The tools come from `OUTPOST_CFN_LINT` and `OUTPOST_MOTO_SERVER` (set by
//! `./x test`), else from the repository's `.venv/` (made by `./x deps`).

use outpost_api::{App, Install, InstallStackSpec};
use outpost_controllers::install_stack::{StackOptions, render_install_stack};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use outpost_testing::wait_for_blocking;

/// moto's fixed account id.
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tool `name`: `$env_var` if set, else `.venv/bin/<name>` in the repository.
fn tool(env_var: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .filter(|v| !v.is_empty())
        .map_or_else(|| repo_root().join(".venv/bin").join(name), PathBuf::from);
    assert!(
        path.is_file(),
        "{} not found (set {env_var} or run `./x deps`)",
        path.display()
    );
    path
}

fn example_app() -> App {
    let text = std::fs::read_to_string(repo_root().join("manifests/app.yaml"))
        .expect("manifests/app.yaml is readable");
    serde_saphyr::from_str(&text).expect("manifests/app.yaml is an App")
}

fn install(name: &str) -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "app": "shopfront",
            "cloud": {"provider": "aws", "accountId": ACCOUNT, "region": REGION},
        },
    }))
    .expect("a valid Install")
}

/// The example App's stack for install `name`; `{{ install.id }}` and
/// `{{ install.name }}` render to the install's name.
fn render(name: &str) -> InstallStackSpec {
    let install = install(name);
    let render = |text: &str| -> Result<String, String> {
        let out = text
            .replace("{{ install.id }}", name)
            .replace("{{ install.name }}", name);
        if out.contains("{{") {
            Err(format!("cannot render {text}"))
        } else {
            Ok(out)
        }
    };
    // Two replicas' URLs: cfn-lint checks the default against the parameter's pattern.
    let options = StackOptions {
        server_urls: vec![
            "https://outpost-0.example.com".into(),
            "https://outpost-1.example.com:6443".into(),
        ],
    };
    render_install_stack(&example_app(), &install, &options, &render).expect("the example renders")
}

#[test]
fn cfn_lint_finds_no_error() {
    let cfn_lint = tool("OUTPOST_CFN_LINT", "cfn-lint");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("install-stack.json");
    let stack = render("acme");
    let text = serde_json::to_string_pretty(&stack.template).expect("templates serialise");
    std::fs::write(&path, text).expect("the template is written");
    let output = Command::new(&cfn_lint)
        .arg("--regions")
        .arg(REGION)
        .arg("--")
        .arg(&path)
        .current_dir(dir.path())
        .output()
        .expect("cfn-lint runs");
    let report = String::from_utf8_lossy(&output.stdout);
    // cfn-lint's exit code is a bit set: 2 errors, 4 warnings, 8 informational;
    // anything else means it failed to run.
    let code = output.status.code().expect("cfn-lint exits");
    assert!(
        code & !(4 | 8) == 0,
        "cfn-lint exited {code}:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        code == 0,
        "cfn-lint warnings (none are expected):\n{report}"
    );
}

/// The emulator (`outpost_testing::Moto`) and the raw query API calls this test makes
/// to it.
struct Moto(outpost_testing::Moto);

impl Moto {
    /// Starts moto and waits until it answers an STS call.
    fn start() -> Moto {
        let moto = Moto(outpost_testing::Moto::start());
        outpost_testing::eventually_blocking(60, "moto_server to answer", || {
            moto.request_raw(
                "sts",
                &[("Action", "GetCallerIdentity"), ("Version", "2011-06-15")],
            )
            .ok()
        });
        moto
    }

    /// Resource types moto said it skipped because it does not implement them.
    fn skipped_types(&self) -> std::collections::BTreeSet<String> {
        self.log()
            .lines()
            .filter_map(|line| line.split("Tried to parse ").nth(1))
            .filter_map(|rest| rest.split(" but it's not supported").next())
            .map(str::to_owned)
            .collect()
    }

    fn log(&self) -> String {
        self.0.log()
    }

    /// One AWS query API call (form-encoded POST). moto checks no signature;
    /// it reads the service and region from the credential scope.
    fn request_raw(
        &self,
        service: &str,
        params: &[(&str, &str)],
    ) -> std::io::Result<(u16, String)> {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.0.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(
            stream,
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded; charset=utf-8\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential=testing/20240101/{REGION}/{service}/aws4_request, SignedHeaders=host, Signature=0\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.0.port,
            body.len()
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no end of headers"))?;
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "moto answered chunked; this client reads plain bodies only"
        );
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("no status code"))?;
        Ok((status, body.to_owned()))
    }

    fn request(&self, service: &str, params: &[(&str, &str)]) -> (u16, String) {
        self.request_raw(service, params)
            .unwrap_or_else(|e| panic!("{service} {params:?}: {e}\n{}", self.log()))
    }

    fn ok(&self, service: &str, params: &[(&str, &str)]) -> String {
        let (status, body) = self.request(service, params);
        assert_eq!(status, 200, "{service} {params:?}: {body}");
        body
    }

    /// Creates a stack and waits for it to leave `CREATE_IN_PROGRESS`; returns
    /// its final status and outputs.
    fn create_stack(
        &self,
        name: &str,
        stack: &InstallStackSpec,
        parameters: &[(&str, &str)],
    ) -> (String, BTreeMap<String, String>) {
        let template = serde_json::to_string(&stack.template).expect("templates serialise");
        let keys: Vec<(String, String)> = parameters
            .iter()
            .enumerate()
            .flat_map(|(i, (key, value))| {
                [
                    (
                        format!("Parameters.member.{}.ParameterKey", i + 1),
                        (*key).to_owned(),
                    ),
                    (
                        format!("Parameters.member.{}.ParameterValue", i + 1),
                        (*value).to_owned(),
                    ),
                ]
            })
            .collect();
        let mut params = vec![
            ("Action", "CreateStack"),
            ("Version", "2010-05-15"),
            ("StackName", name),
            ("TemplateBody", template.as_str()),
            ("Capabilities.member.1", "CAPABILITY_NAMED_IAM"),
        ];
        params.extend(keys.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        self.ok("cloudformation", &params);

        let mut status = String::new();
        let body = wait_for_blocking(Duration::from_secs(120), || {
            let body = self.ok(
                "cloudformation",
                &[
                    ("Action", "DescribeStacks"),
                    ("Version", "2010-05-15"),
                    ("StackName", name),
                ],
            );
            status = first_tag(&body, "StackStatus").expect("DescribeStacks has a status");
            (!status.ends_with("_IN_PROGRESS")).then_some(body)
        })
        .unwrap_or_else(|| panic!("stack {name} stuck in {status}"));
        let keys = all_tags(&body, "OutputKey");
        let values = all_tags(&body, "OutputValue");
        assert_eq!(keys.len(), values.len(), "{body}");
        (status, keys.into_iter().zip(values).collect())
    }

    /// EC2 ids of moto's default VPC and one of its subnets.
    fn default_subnet(&self) -> (String, String) {
        let body = self.ok(
            "ec2",
            &[
                ("Action", "DescribeSubnets"),
                ("Version", "2016-11-15"),
                ("Filter.1.Name", "default-for-az"),
                ("Filter.1.Value.1", "true"),
            ],
        );
        let vpc = first_tag(&body, "vpcId").expect("moto has a default VPC");
        let subnet = first_tag(&body, "subnetId").expect("moto has default subnets");
        (vpc, subnet)
    }
}

/// The text of every `<tag>...</tag>` in `xml`, in order.
fn all_tags(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(unescape(&after[..end]));
        rest = &after[end + close.len()..];
    }
    found
}

fn first_tag(xml: &str, tag: &str) -> Option<String> {
    all_tags(xml, tag).into_iter().next()
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[test]
fn moto_creates_the_stack_with_the_enabled_roles_only() {
    let moto = Moto::start();
    let (vpc, subnet) = moto.default_subnet();
    let common = [
        ("RunnerToken", "rt-0123456789abcdef0123456789abcdef"),
        ("RunnerAmiId", "ami-0123456789abcdef0"),
        ("VpcId", vpc.as_str()),
        ("RunnerSubnetId", subnet.as_str()),
        ("SecretApiKeyValue", "key-from-the-customer"),
        // The one customer input without a default.
        (
            "InputImageRegistry",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com",
        ),
    ];

    // acme switches the custom role on.
    let mut parameters = common.to_vec();
    parameters.push(("EnableEksUpgradeRole", "true"));
    let (status, outputs) = moto.create_stack("outpost-acme", &render("acme"), &parameters);
    assert_eq!(
        status,
        "CREATE_COMPLETE",
        "outputs: {outputs:?}\n{}",
        moto.log()
    );
    for (key, role) in [
        ("RoleProvisionArn", "acme-provision"),
        ("RoleMaintenanceArn", "acme-maintenance"),
        ("RoleDeprovisionArn", "acme-deprovision"),
        ("RoleEksUpgradeRoleArn", "acme-eks-upgrade-role"),
    ] {
        assert_eq!(
            outputs.get(key).map(String::as_str),
            Some(format!("arn:aws:iam::{ACCOUNT}:role/{role}").as_str()),
            "{key} in {outputs:?}"
        );
    }
    assert!(!outputs.contains_key("RoleBreakGlassArn"), "{outputs:?}");
    assert!(outputs["RunnerInstanceId"].starts_with("i-"), "{outputs:?}");
    // The terraform state bucket exists, named by CloudFormation.
    let bucket = &outputs["StateBucketName"];
    assert!(!bucket.is_empty(), "{outputs:?}");
    assert!(outputs["RunnerRoleArn"].starts_with(&format!("arn:aws:iam::{ACCOUNT}:role/")));
    // moto skips resource types it does not implement, and outputs that refer
    // to them. Only Secrets Manager secrets and their resource policies, and the state
    // bucket's policy, may be skipped (moto 5 has no CloudFormation support for them);
    // the unit tests and cfn-lint cover them.
    let skipped = moto.skipped_types();
    assert!(
        skipped.iter().all(|t| [
            "AWS::SecretsManager::Secret",
            "AWS::SecretsManager::ResourcePolicy",
            "AWS::S3::BucketPolicy"
        ]
        .contains(&t.as_str())),
        "moto skipped {skipped:?}"
    );
    for key in [
        "SecretApiKeyArn",
        "SecretDbPasswordArn",
        "RunnerTokenSecretArn",
    ] {
        if skipped.is_empty() {
            assert!(
                outputs[key].starts_with("arn:aws:secretsmanager:"),
                "{key}: {outputs:?}"
            );
        } else {
            assert!(!outputs.contains_key(key), "{key}: {outputs:?}");
        }
    }

    // The roles exist in IAM and trust only the runner role, with the external id.
    let role = moto.ok(
        "iam",
        &[
            ("Action", "GetRole"),
            ("Version", "2010-05-08"),
            ("RoleName", "acme-eks-upgrade-role"),
        ],
    );
    let trust = first_tag(&role, "AssumeRolePolicyDocument").expect("GetRole has a trust policy");
    let trust = percent_decode(&trust);
    assert!(trust.contains(&outputs["RunnerRoleArn"]), "{trust}");
    assert!(trust.contains("outpost:shop/acme"), "{trust}");
    let (status, body) = moto.request(
        "iam",
        &[
            ("Action", "GetRole"),
            ("Version", "2010-05-08"),
            ("RoleName", "acme-break-glass"),
        ],
    );
    assert_eq!(
        status, 404,
        "the disabled break-glass role does not exist: {body}"
    );

    // globex leaves it off: no role, no output.
    let mut parameters = common.to_vec();
    parameters.push(("EnableEksUpgradeRole", "false"));
    let (status, outputs) = moto.create_stack("outpost-globex", &render("globex"), &parameters);
    assert_eq!(
        status,
        "CREATE_COMPLETE",
        "outputs: {outputs:?}\n{}",
        moto.log()
    );
    assert!(outputs.contains_key("RoleProvisionArn"), "{outputs:?}");
    assert!(
        !outputs.contains_key("RoleEksUpgradeRoleArn"),
        "{outputs:?}"
    );
    let (status, _) = moto.request(
        "iam",
        &[
            ("Action", "GetRole"),
            ("Version", "2010-05-08"),
            ("RoleName", "globex-eks-upgrade-role"),
        ],
    );
    assert_eq!(status, 404);
}

/// IAM returns policy documents URL-encoded.
fn percent_decode(text: &str) -> String {
    form_urlencoded::parse(format!("x={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}
