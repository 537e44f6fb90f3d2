//! The runner token reaches the runner only through the customer's Secrets Manager.

use super::*;

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
