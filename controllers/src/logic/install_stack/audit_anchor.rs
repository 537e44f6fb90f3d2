//! The audit log's trust anchor in the customer's account: two SSM parameters the
//! runner writes, its public key and its newest signed checkpoint, which only the
//! runner's instance role may write and the vendor's control plane never touches.
//! `outpost audit verify --stack` reads them, the key parameter with its version
//! history, so every key the parameter ever held must be accounted for by the log.

use super::render::{StackContext, StackError};
use super::stack_template::StackTemplate;
use serde_json::{Value, json};

use outpost_api::audit_anchor::{CHECKPOINT_PARAMETER, KEY_PARAMETER, UNPUBLISHED};

/// The SSM names of install `NS/NAME`'s parameters: `/outpost/NS/NAME/runner-public-key`
/// and `/outpost/NS/NAME/audit-checkpoint`.
fn names(context: &StackContext<'_>) -> [String; 2] {
    let base = format!("/outpost/{}/{}", context.namespace, context.name);
    [
        format!("{base}/runner-public-key"),
        format!("{base}/audit-checkpoint"),
    ]
}

/// Adds the two parameters and their outputs; returns the statement that lets the
/// runner's instance role (and no other principal of the stack) read and write them.
pub(super) fn add_parameters(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
) -> Result<Value, StackError> {
    let owner = "the audit anchor";
    let [key_name, checkpoint_name] = names(context);
    let install = context.install_ref();
    for (id, name, description, output) in [
        (
            KEY_PARAMETER,
            &key_name,
            format!(
                "Public key of install {install}'s Outpost runner (base64 ed25519), written by the runner; its version history is every key it signed with"
            ),
            "Name of the SSM parameter holding the runner's public key: `outpost audit verify --stack` reads it and its history",
        ),
        (
            CHECKPOINT_PARAMETER,
            &checkpoint_name,
            format!(
                "Newest signed checkpoint of install {install}'s audit log (JSON), written by the runner at least every minute"
            ),
            "Name of the SSM parameter holding the runner's newest signed audit checkpoint",
        ),
    ] {
        stack.resource(
            id,
            owner,
            json!({
                "Type": "AWS::SSM::Parameter",
                "Properties": {
                    "Name": name,
                    "Type": "String",
                    "Value": UNPUBLISHED,
                    // No `Tags`: CloudFormation gives them as a map, which moto (5.2.5)
                    // reads as a list and fails the whole stack on; the parameter's
                    // path names the install.
                    "Description": description,
                },
            }),
        )?;
        stack.output(
            id,
            owner,
            json!({"Description": output, "Value": {"Ref": id}}),
        )?;
    }
    let arns: Vec<Value> = [key_name, checkpoint_name]
        .iter()
        .map(|name| {
            json!({"Fn::Sub": format!("arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{name}")})
        })
        .collect();
    Ok(json!({
        "Sid": "PublishAuditAnchor",
        "Effect": "Allow",
        "Action": ["ssm:GetParameter", "ssm:PutParameter"],
        "Resource": arns,
    }))
}
