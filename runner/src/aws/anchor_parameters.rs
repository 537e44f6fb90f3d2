//! The audit anchor in the customer's AWS account: the install stack's SSM parameters
//! for the runner's public key and its newest signed checkpoint
//! ([`outpost_api::audit_anchor::KEY_PARAMETER`], [`outpost_api::audit_anchor::CHECKPOINT_PARAMETER`]).
//! The runner writes them with its own credentials (the instance role, the only
//! principal the stack lets write them); `outpost audit verify --stack` reads them, the
//! key parameter with its whole version history.

use anyhow::Context as _;
use aws_config::SdkConfig;
use aws_sdk_ssm::types::ParameterType;
use outpost_api::audit_anchor::{
    CHECKPOINT_PARAMETER, Checkpoint, KEY_PARAMETER, PublishedKey, UNPUBLISHED,
};

/// The runner's writer of the anchor parameters (`--publish-key-parameter`,
/// `--publish-checkpoint-parameter`).
pub struct AnchorParameters {
    client: aws_sdk_ssm::Client,
    key: Option<String>,
    checkpoint: Option<String>,
}

impl AnchorParameters {
    /// Writes the parameters named `key` and `checkpoint` (either may be absent).
    pub fn new(config: &SdkConfig, key: Option<String>, checkpoint: Option<String>) -> Self {
        Self {
            client: aws_sdk_ssm::Client::new(config),
            key,
            checkpoint,
        }
    }

    /// Writes `public_key` to the key parameter unless it holds it already (a write
    /// adds a version to the parameter's history, which verification reads). Returns
    /// whether it wrote.
    pub async fn publish_key(&self, public_key: &str) -> anyhow::Result<bool> {
        let Some(name) = &self.key else {
            return Ok(false);
        };
        let current = self
            .client
            .get_parameter()
            .name(name)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", super::describe(&e)))
            .with_context(|| format!("ssm:GetParameter {name}"))?;
        if current.parameter().and_then(|p| p.value()) == Some(public_key) {
            return Ok(false);
        }
        self.put(name, public_key).await?;
        Ok(true)
    }

    /// Replaces the checkpoint parameter's value with `checkpoint` (JSON).
    pub async fn write_checkpoint(&self, checkpoint: &Checkpoint) -> anyhow::Result<()> {
        match &self.checkpoint {
            Some(name) => self.put(name, &serde_json::to_string(checkpoint)?).await,
            None => Ok(()),
        }
    }

    async fn put(&self, name: &str, value: &str) -> anyhow::Result<()> {
        self.client
            .put_parameter()
            .name(name)
            .value(value)
            .r#type(ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", super::describe(&e)))
            .with_context(|| format!("ssm:PutParameter {name}"))?;
        Ok(())
    }
}

/// What the customer's account holds for the audit log.
#[derive(Clone, Debug)]
pub struct PublishedAnchor {
    /// The key parameter's name.
    pub key_parameter: String,
    /// Every value the key parameter held, oldest first (the stack's initial
    /// [`UNPUBLISHED`] left out).
    pub keys: Vec<PublishedKey>,
    /// The newest checkpoint, once the runner wrote one.
    pub checkpoint: Option<Checkpoint>,
}

/// Reads install stack `stack`'s outputs, the key parameter's version history
/// (`ssm:GetParameterHistory`) and the checkpoint parameter (`ssm:GetParameter`).
pub async fn read_published(config: &SdkConfig, stack: &str) -> anyhow::Result<PublishedAnchor> {
    let info = super::stack::describe(config, stack).await?;
    let output = |id: &str| {
        info.outputs.get(id).cloned().with_context(|| {
            format!("stack {stack} has no output {id}: update it to a template that publishes the audit anchor")
        })
    };
    let key_parameter = output(KEY_PARAMETER)?;
    let checkpoint_parameter = output(CHECKPOINT_PARAMETER)?;
    let client = aws_sdk_ssm::Client::new(config);
    let mut keys = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page = client
            .get_parameter_history()
            .name(&key_parameter)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", super::describe(&e)))
            .with_context(|| format!("ssm:GetParameterHistory {key_parameter}"))?;
        for version in page.parameters() {
            let Some(value) = version.value().filter(|v| *v != UNPUBLISHED) else {
                continue;
            };
            keys.push(PublishedKey {
                version: version.version(),
                value: value.to_owned(),
                modified: version
                    .last_modified_date()
                    .map(|d| d.to_string())
                    .unwrap_or_default(),
                by: version.last_modified_user().unwrap_or_default().to_owned(),
            });
        }
        match page.next_token() {
            Some(token) => next = Some(token.to_owned()),
            None => break,
        }
    }
    keys.sort_by_key(|k| k.version);
    let checkpoint = client
        .get_parameter()
        .name(&checkpoint_parameter)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", super::describe(&e)))
        .with_context(|| format!("ssm:GetParameter {checkpoint_parameter}"))?;
    let checkpoint =
        match checkpoint.parameter().and_then(|p| p.value()) {
            None | Some(UNPUBLISHED) => None,
            Some(json) => Some(serde_json::from_str(json).with_context(|| {
                format!("the value of {checkpoint_parameter} is not a checkpoint")
            })?),
        };
    Ok(PublishedAnchor {
        key_parameter,
        keys,
        checkpoint,
    })
}
