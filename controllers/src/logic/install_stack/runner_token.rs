//! The runner's token in the customer's AWS Secrets Manager: the NoEcho `RunnerToken`
//! parameter becomes the secret `RunnerTokenSecret`, which only the runner's instance
//! role may read. The runner is started with the secret's ARN and reads the token at
//! boot; the token itself is never in the user data, a command line or a unit file.

use super::render::{StackContext, StackError};
use super::stack_template::StackTemplate;
use serde_json::{Value, json};

/// `AllowedPattern` of the `RunnerToken` parameter: base64 and URL-safe characters. It
/// refuses a token pasted with spaces or a line break before the stack stores it.
pub const TOKEN_PATTERN: &str = "^[A-Za-z0-9._~+/=-]+$";

/// The NoEcho parameter the customer pastes the token into.
pub(super) const TOKEN_PARAMETER: &str = "RunnerToken";
/// The secret holding the token; `${RunnerTokenSecret}` (its ARN) is what the user data
/// passes to `outpost runner --token-secret`.
pub(super) const TOKEN_SECRET: &str = "RunnerTokenSecret";

/// The `RunnerToken` parameter.
pub(super) fn parameter() -> Value {
    json!({
        "Type": "String",
        "NoEcho": true,
        "MinLength": 16,
        "AllowedPattern": TOKEN_PATTERN,
        "Description": "The runner's token, given to you by the vendor. It is stored in the secret RunnerTokenSecret, which only the runner's instance role can read",
    })
}

/// The Secrets Manager name of the token of install `NS/NAME`:
/// `outpost-runner-token/NS/NAME`. It is outside `outpost/NS/NAME/`, where the
/// install's declared secrets live, so no `${outpost-secret:…}` of a Plan can name it.
fn secret_name(context: &StackContext<'_>) -> String {
    format!(
        "outpost-runner-token/{}/{}",
        context.namespace, context.name
    )
}

/// Adds the token's secret, its resource policy and its ARN output. `runner_role` is
/// the logical id of the runner's instance role, the only principal that may read it.
/// Returns the statement that lets the runner role read it.
pub(super) fn add_secret(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
    runner_role: &str,
) -> Result<Value, StackError> {
    let owner = "the runner token";
    stack.resource(
        TOKEN_SECRET,
        owner,
        json!({
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Name": secret_name(context),
                "Description": format!(
                    "The Outpost runner token of install {}; only the runner's instance role can read it",
                    context.install_ref()
                ),
                "SecretString": {"Ref": TOKEN_PARAMETER},
                "Tags": context.tags(&[]),
            },
        }),
    )?;
    // An explicit deny for every other principal: it holds even against a role whose
    // own policies allow `secretsmanager:GetSecretValue` on `*` (an install role with a
    // broad managed policy, under which vendor code runs). The customer's administrators
    // can still replace the value, and remove this policy.
    stack.resource(
        "RunnerTokenSecretPolicy",
        owner,
        json!({
            "Type": "AWS::SecretsManager::ResourcePolicy",
            "Properties": {
                "SecretId": {"Ref": TOKEN_SECRET},
                "BlockPublicPolicy": true,
                "ResourcePolicy": {
                    "Version": "2012-10-17",
                    "Statement": [{
                        "Sid": "OnlyTheRunnerReadsTheToken",
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "secretsmanager:GetSecretValue",
                        "Resource": "*",
                        "Condition": {
                            "ArnNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": [runner_role, "Arn"]}},
                        },
                    }],
                },
            },
        }),
    )?;
    stack.output(
        "RunnerTokenSecretArn",
        owner,
        json!({
            "Description": "ARN of the secret holding the runner's token (replace its value to rotate the token, then restart the runner)",
            "Value": {"Ref": TOKEN_SECRET},
        }),
    )?;
    Ok(json!({
        "Sid": "ReadRunnerToken",
        "Effect": "Allow",
        "Action": "secretsmanager:GetSecretValue",
        "Resource": {"Ref": TOKEN_SECRET},
    }))
}
