//! The install's terraform state bucket: an encrypted, versioned S3 bucket in the
//! customer's account whose objects only the install's lifecycle roles may read or
//! write. The runner keeps each terraform entity's state there (`--state-bucket`),
//! locked with S3-native lock files (terraform ≥ 1.10 `use_lockfile`), under the Plan's
//! role; a runner whose disk is lost finds it again.

use super::render::{StackContext, StackError};
use super::stack_template::StackTemplate;
use serde_json::{Value, json};

/// The bucket's logical id; `${StateBucket}` (its name) is what the user data passes to
/// `outpost runner --state-bucket`.
pub(super) const STATE_BUCKET: &str = "StateBucket";
/// The inline policy that lets a role use the state bucket.
const STATE_POLICY: &str = "outpost-terraform-state";
/// What reads or changes a state object (or its older versions, or a lock file).
const OBJECT_ACTIONS: [&str; 5] = [
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
];

/// The bucket's objects, for a policy's `Resource`.
fn objects() -> Value {
    json!({"Fn::Sub": format!("${{{STATE_BUCKET}.Arn}}/*")})
}

/// The inline policy every declared role gets: terraform's S3 backend lists the bucket,
/// reads and writes the state objects and creates and deletes their lock files.
pub(super) fn role_policy() -> Value {
    json!({
        "PolicyName": STATE_POLICY,
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": {"Fn::GetAtt": [STATE_BUCKET, "Arn"]},
                },
                {
                    "Effect": "Allow",
                    "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                    "Resource": objects(),
                },
            ],
        },
    })
}

/// Adds the bucket, its policy and its name output. `role_names` are the rendered names
/// of the declared roles: the only principals the bucket policy lets touch its objects.
pub(super) fn add_state_bucket(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
    role_names: &[String],
) -> Result<(), StackError> {
    let owner = "the terraform state bucket";
    // Retained when the stack is deleted or the bucket replaced: it holds the only
    // record of what terraform created in the account.
    stack.resource(
        STATE_BUCKET,
        owner,
        json!({
            "Type": "AWS::S3::Bucket",
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "VersioningConfiguration": {"Status": "Enabled"},
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [{
                        "ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
                    }],
                },
                "PublicAccessBlockConfiguration": {
                    "BlockPublicAcls": true,
                    "BlockPublicPolicy": true,
                    "IgnorePublicAcls": true,
                    "RestrictPublicBuckets": true,
                },
                "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
                "Tags": context.tags(&[]),
            },
        }),
    )?;
    // By name, not `Fn::GetAtt`: a disabled role does not exist, and naming it grants
    // nothing. The customer's administrators keep `s3:PutBucketPolicy`: they can read
    // their state after changing this policy, which is theirs.
    let roles: Vec<Value> = role_names
        .iter()
        .map(|name| {
            json!({"Fn::Sub": format!("arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:role/{name}")})
        })
        .collect();
    let mut only_roles = json!({
        "Sid": "OnlyLifecycleRolesTouchState",
        "Effect": "Deny",
        "Principal": "*",
        "Action": OBJECT_ACTIONS,
        "Resource": objects(),
    });
    // An App without roles: nobody may.
    if !roles.is_empty() {
        only_roles["Condition"] = json!({"ArnNotEquals": {"aws:PrincipalArn": roles}});
    }
    let bucket_arn = json!({"Fn::GetAtt": [STATE_BUCKET, "Arn"]});
    stack.resource(
        "StateBucketPolicy",
        owner,
        json!({
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {
                "Bucket": {"Ref": STATE_BUCKET},
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        only_roles,
                        {
                            "Sid": "OnlyTls",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": [bucket_arn, objects()],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        },
                    ],
                },
            },
        }),
    )?;
    stack.output(
        "StateBucketName",
        owner,
        json!({
            "Description": "The S3 bucket holding the install's terraform state (components/NAME/terraform.tfstate, sandbox/terraform.tfstate); only the install's roles can read it",
            "Value": {"Ref": STATE_BUCKET},
        }),
    )
}
