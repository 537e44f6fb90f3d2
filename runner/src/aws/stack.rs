//! Reading the install stack: which roles it declares and enables, the external id its
//! roles require, its outputs.

use std::collections::BTreeMap;

use anyhow::Context as _;
use aws_config::SdkConfig;

/// What the runner knows of its install stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackInfo {
    /// The stack's status (`CREATE_COMPLETE`, `UPDATE_COMPLETE`, …).
    pub status: String,
    /// The `sts:ExternalId` every role of the stack requires (output `RoleExternalId`).
    pub external_id: String,
    /// The declared roles by rendered name.
    pub roles: BTreeMap<String, StackRole>,
    /// Every output of the stack.
    pub outputs: BTreeMap<String, String>,
    /// Every parameter of the stack (a NoEcho one reads `****`).
    pub parameters: BTreeMap<String, String>,
}

/// One declared role of the stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackRole {
    /// Its `Enable…` parameter is `true`.
    pub enabled: bool,
    /// Its ARN (output `Role…Arn`), when the stack created it.
    pub arn: Option<String>,
    /// Whether IAM has it: `None` when not asked or IAM did not answer.
    pub exists: Option<bool>,
}

impl StackInfo {
    /// The roles the runner can use: enabled in the stack and not known to be missing,
    /// sorted by name.
    pub fn enabled_roles(&self) -> Vec<String> {
        self.roles
            .iter()
            .filter(|(_, r)| r.enabled && r.exists != Some(false))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// `cloudformation:DescribeStacks` of `name`, read into a [`StackInfo`]. The stack
/// template names each role in an output `Role<Key>Name` and switches it with the
/// parameter `Enable<Key>`.
pub async fn describe(config: &SdkConfig, name: &str) -> anyhow::Result<StackInfo> {
    let client = aws_sdk_cloudformation::Client::new(config);
    let described = client
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", super::describe(&e)))
        .with_context(|| format!("cloudformation:DescribeStacks {name}"))?;
    let stack = described
        .stacks()
        .first()
        .with_context(|| format!("no stack {name}"))?;
    let outputs: BTreeMap<String, String> = stack
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
        .collect();
    let parameters: BTreeMap<&str, &str> = stack
        .parameters()
        .iter()
        .filter_map(|p| Some((p.parameter_key()?, p.parameter_value()?)))
        .collect();
    Ok(StackInfo {
        status: stack
            .stack_status()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        external_id: outputs
            .get("RoleExternalId")
            .cloned()
            .with_context(|| format!("stack {name} has no output RoleExternalId"))?,
        roles: roles(&outputs, &parameters),
        parameters: parameters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        outputs,
    })
}

/// The declared roles from the stack's outputs and parameters.
fn roles(
    outputs: &BTreeMap<String, String>,
    parameters: &BTreeMap<&str, &str>,
) -> BTreeMap<String, StackRole> {
    outputs
        .iter()
        .filter_map(|(key, value)| {
            let id = key.strip_prefix("Role")?.strip_suffix("Name")?;
            (!id.is_empty()).then_some((id, value))
        })
        .map(|(id, name)| {
            let enabled = parameters.get(format!("Enable{id}").as_str()) == Some(&"true");
            let role = StackRole {
                enabled,
                arn: outputs.get(&format!("Role{id}Arn")).cloned(),
                exists: None,
            };
            (name.clone(), role)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_come_from_name_outputs_and_enable_parameters() {
        let outputs: BTreeMap<String, String> = [
            ("RoleProvisionName", "acme-provision"),
            ("RoleProvisionArn", "arn:aws:iam::1:role/acme-provision"),
            ("RoleEksUpgradeRoleName", "acme-eks-upgrade-role"),
            ("RunnerRoleArn", "arn:aws:iam::1:role/runner"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let parameters = BTreeMap::from([
            ("EnableProvision", "true"),
            ("EnableEksUpgradeRole", "false"),
        ]);
        let roles = roles(&outputs, &parameters);
        assert_eq!(roles.len(), 2, "{roles:?}");
        assert!(roles["acme-provision"].enabled);
        assert_eq!(
            roles["acme-provision"].arn.as_deref(),
            Some("arn:aws:iam::1:role/acme-provision")
        );
        assert!(!roles["acme-eks-upgrade-role"].enabled);
        let mut info = StackInfo {
            roles,
            ..StackInfo::default()
        };
        assert_eq!(info.enabled_roles(), ["acme-provision"]);
        info.roles.get_mut("acme-provision").unwrap().exists = Some(false);
        assert!(info.enabled_roles().is_empty());
    }
}
