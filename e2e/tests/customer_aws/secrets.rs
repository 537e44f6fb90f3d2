//! The database password and the role's session token never reach the control plane.

use super::*;

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
    for component in ["database", "web"] {
        drift_report_in_sync(&flow.cp, &format!("{INSTALL}-{component}"), 60).await;
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

outpost_testing::on_both_backends!(the_secret_never_reaches_the_control_plane);
