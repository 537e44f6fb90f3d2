//! One run of the flow: the control plane, the customer's stack, the stand-in cluster
//! and the runner started from the stack's user data ([`start_flow`]).

use super::*;

/// Everything one run starts, stopped when dropped.
pub(crate) struct Flow {
    pub(crate) cp: ControlPlane,
    /// Every API request and response of the run, when recorded.
    pub(crate) proxy: Option<RecordingProxy>,
    pub(crate) customer: Customer,
    pub(crate) cluster: ControlPlane,
    pub(crate) _controllers: Process,
    pub(crate) runner: Process,
    /// How the runner was started, to start it again.
    pub(crate) launch: RunnerLaunch,
    /// The runner role's name.
    pub(crate) runner_role: String,
    pub(crate) plans: Api<Plan>,
    /// The install's uid: the roles are `<uid>-provision` and so on.
    pub(crate) uid: String,
    /// The database password in the customer's Secrets Manager.
    pub(crate) password: String,
    /// The trust policy the install's roles have, with the emulator's bridge.
    pub(crate) role_trust: Value,
    pub(crate) state: PathBuf,
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) _registries: (Registry, Registry, tempfile::TempDir),
}

/// What starts the install's runner as the VM's unit does: the user data's command line
/// with CloudFormation's substitutions, plus the emulator's endpoint and the test's
/// cluster, under the runner's instance role. Kept so a test can start it again.
pub(crate) struct RunnerLaunch {
    pub(crate) template: Value,
    pub(crate) server_url: String,
    pub(crate) ca: PathBuf,
    pub(crate) token_secret: String,
    pub(crate) state_bucket: String,
    /// The audit anchor's SSM parameters (the stack's outputs).
    pub(crate) key_parameter: String,
    pub(crate) checkpoint_parameter: String,
    pub(crate) moto_endpoint: String,
    /// The stand-in cluster's admin kubeconfig; `None`: each Plan reaches the cluster
    /// its `cluster` block names with an EKS token of its role.
    pub(crate) kubeconfig: Option<PathBuf>,
    /// `--helm` (the tests' `helm template` engine) and the `--module-root` local
    /// charts lie under, for `helm_chart` components.
    pub(crate) helm: Option<(PathBuf, PathBuf)>,
    /// The instance role's access key id, secret and session token.
    pub(crate) credentials: (String, String, String),
    pub(crate) state: PathBuf,
}

impl RunnerLaunch {
    /// The stack's `TerraformProviders` default, which the customer kept.
    pub(crate) fn providers(&self) -> &str {
        self.template["Parameters"]["TerraformProviders"]["Default"]
            .as_str()
            .expect("the provider allow-list has a default")
    }

    pub(crate) fn spawn(&self) -> Child {
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

pub(crate) fn outpost(args: &[&str], cp: &ControlPlane) -> String {
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
pub(crate) async fn start(backend: Backend) -> Flow {
    start_with(backend, false).await
}

/// [`start`], with every client of the control plane (the runner, the controllers,
/// kubectl, `outpost`, the test's own) going through a [`RecordingProxy`] when `record`.
/// The leak test's migrate action gains a step that prints what a careless (or
/// curious) vendor step would: the database password and the role's session token,
/// plain and base64. It keeps the session token in its work dir (on the customer's VM,
/// never sent) so the test can search for it.
pub(crate) fn with_a_leaky_step(example: &std::path::Path) {
    let actions = example.join("actions.yaml");
    let text = std::fs::read_to_string(&actions).unwrap();
    let migrate =
        "        DATABASE_PASSWORD: \"{{ secrets.db_password }}\"\n  timeoutSeconds: 900\n";
    assert!(text.contains(migrate), "actions.yaml's migrate step");
    let leaky = "        DATABASE_PASSWORD: \"{{ secrets.db_password }}\"\n    - name: leaky\n      script: |\n        test -n \"$AWS_SESSION_TOKEN\" || { echo \"no role credentials\" >&2; exit 1; }\n        printf '%s' \"$AWS_SESSION_TOKEN\" > \"$OUTPOST_WORK_DIR/session-token\"\n        echo \"password: $DATABASE_PASSWORD\"\n        echo \"session: $AWS_SESSION_TOKEN\"\n        echo \"password, base64: $(printf '%s' \"$DATABASE_PASSWORD\" | base64 -w0)\"\n        echo \"to stderr: $DATABASE_PASSWORD\" >&2\n      env:\n        DATABASE_PASSWORD: \"{{ secrets.db_password }}\"\n  timeoutSeconds: 900\n";
    std::fs::write(&actions, text.replace(migrate, leaky)).unwrap();
}

pub(crate) async fn start_with(backend: Backend, record: bool) -> Flow {
    start_flow(backend, record, ClusterAccess::Kubeconfig).await
}

/// How the runner reaches the install's cluster (the stand-in).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum ClusterAccess {
    /// With the stand-in's admin kubeconfig (`--kubeconfig`).
    Kubeconfig,
    /// Without a kubeconfig: with EKS tokens of each Plan's role, which the stand-in
    /// checks with moto's STS. moto then cannot enforce IAM: it would check the
    /// signature of the STS call the stand-in makes, which restates the token's
    /// presigned credential as a header (see `apiserver/src/auth/eks_token.rs`).
    EksTokens,
}

/// The cluster's name: the sandbox's `cluster_name` output in the EKS flow.
pub(crate) const EKS_CLUSTER: &str = "globex-eks";
/// The App secret holding the kubeconfig of the customer's own cluster (EKS flow).
pub(crate) const OWN_KUBECONFIG: &str = "cluster_kubeconfig";

/// The test's copy of the example for [`ClusterAccess::EksTokens`]: the sandbox outputs
/// the cluster's name (as an `aws_eks_cluster` would), every kubernetes_manifest names
/// its cluster by it alone (the runner reads the endpoint and CA from EKS, where the
/// test created the cluster at the stand-in's address), and `cache` deploys with the
/// provision role (web keeps the maintenance role). Two `helm_chart` components of a
/// chart under `charts` (the runner's `--module-root`) name the cluster the same way:
/// `chart` deploys with the provision role, `chart-readonly` with the maintenance role.
/// `own-cluster` is a manifest for a cluster the customer brings: named by a kubeconfig
/// the customer keeps in Secrets Manager (App secret `cluster_kubeconfig`).
pub(crate) fn with_eks_cluster(example: &Path, charts: &Path) {
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
pub(crate) const EKS_RBAC: &str = r#"
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

pub(crate) async fn start_flow(backend: Backend, record: bool, access: ClusterAccess) -> Flow {
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
            let helm = outpost_testing::helm::Helm::find().template_binary(example_dir.path());
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
