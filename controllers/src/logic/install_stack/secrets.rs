//! The declared secrets: one `AWS::SecretsManager::Secret` each, generated or
//! set from a NoEcho parameter, and an ARN output.

use super::logical_id::pascal_case;
use super::render::{StackContext, StackError};
use super::stack_template::StackTemplate;
use outpost_api::SecretSpec;
use serde_json::{Value, json};

const GROUP: &str = "Secrets";
/// The inline policy that lets a role read the install's secrets.
const SECRETS_POLICY: &str = "outpost-install-secrets";

/// The logical id of `secret`'s resource: `Secret<PascalCaseName>`.
pub(super) fn secret_id(secret: &SecretSpec) -> String {
    format!("Secret{}", pascal_case(&secret.name))
}

/// The inline policy that lets a role read the secrets of `secret_ids` (logical ids);
/// none when there are none.
pub(super) fn role_policy(secret_ids: &[String]) -> Option<Value> {
    if secret_ids.is_empty() {
        return None;
    }
    let arns: Vec<Value> = secret_ids.iter().map(|id| json!({"Ref": id})).collect();
    Some(json!({
        "PolicyName": SECRETS_POLICY,
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": arns,
            }],
        },
    }))
}

/// Adds every secret of `secrets`; returns their resources' logical ids.
pub(super) fn add_secrets(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
    secrets: &[SecretSpec],
) -> Result<Vec<String>, StackError> {
    let mut ids = Vec::with_capacity(secrets.len());
    for secret in secrets {
        let owner = format!("secret {:?}", secret.name);
        let resource = secret_id(secret);
        let mut properties = serde_json::Map::new();
        properties.insert(
            "Name".into(),
            json!(format!(
                "outpost/{}/{}/{}",
                context.namespace, context.name, secret.name
            )),
        );
        if let Some(text) = &secret.description {
            properties.insert("Description".into(), json!(text));
        }
        if secret.generate {
            let length = secret.length.unwrap_or(SecretSpec::DEFAULT_LENGTH);
            // Letters and digits only: generated values end up in connection
            // strings and Kubernetes Secrets, where punctuation needs quoting.
            properties.insert(
                "GenerateSecretString".into(),
                json!({"PasswordLength": length, "ExcludePunctuation": true}),
            );
        } else {
            let parameter = format!("{resource}Value");
            let mut description = format!("Value of the secret {}", secret.name);
            if let Some(text) = &secret.description {
                description.push_str(": ");
                description.push_str(text);
            }
            stack.parameter(
                GROUP,
                &parameter,
                &owner,
                json!({
                    "Type": "String",
                    "NoEcho": true,
                    "MinLength": 1,
                    "Description": description,
                }),
            )?;
            properties.insert("SecretString".into(), json!({"Ref": parameter}));
        }
        properties.insert("Tags".into(), context.tags(&[]));
        stack.resource(
            &resource,
            &owner,
            json!({"Type": "AWS::SecretsManager::Secret", "Properties": properties}),
        )?;
        stack.output(
            &format!("{resource}Arn"),
            &owner,
            json!({
                "Description": format!("ARN of the secret {}", secret.name),
                "Value": {"Ref": resource},
            }),
        )?;
        ids.push(resource);
    }
    Ok(ids)
}
