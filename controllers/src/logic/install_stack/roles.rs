//! The declared roles: per role an `Enable<K>` parameter, a condition, the
//! `AWS::IAM::Role` (and its boundary policy) and an ARN output.

use super::logical_id::pascal_case;
use super::render::{RenderRoleName, StackContext, StackError};
use super::runner::RUNNER_ROLE;
use super::stack_template::StackTemplate;
use outpost_api::role::validate_role_name;
use outpost_api::template::with_placeholder;
use outpost_api::{RoleSpec, RoleType};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const GROUP: &str = "Roles the vendor's runner may assume";

/// Adds every role of `roles`; returns their rendered names in order. Every role gets
/// the inline policies `shared` after its own: the runner reads a Plan's secrets and
/// keeps its terraform state under the Plan's role, whichever role that is.
pub(super) fn add_roles(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
    roles: &[RoleSpec],
    shared: &[Value],
    render: RenderRoleName<'_>,
) -> Result<Vec<String>, StackError> {
    let mut rendered_names = Vec::with_capacity(roles.len());
    let mut templates_by_name: BTreeMap<String, &str> = BTreeMap::new();
    for role in roles {
        let rendered = render_name(role, render)?;
        if let Some(first) = templates_by_name.insert(rendered.clone(), &role.name) {
            return Err(StackError::DuplicateRoleName {
                rendered,
                first: first.to_owned(),
                second: role.name.clone(),
            });
        }
        add_role(stack, context, role, &rendered, shared)?;
        rendered_names.push(rendered);
    }
    Ok(rendered_names)
}

fn render_name(role: &RoleSpec, render: RenderRoleName<'_>) -> Result<String, StackError> {
    let rendered = render(&role.name).map_err(|reason| StackError::RenderRoleName {
        template: role.name.clone(),
        reason,
    })?;
    let invalid = |reason: String| StackError::InvalidRoleName {
        template: role.name.clone(),
        rendered: rendered.clone(),
        reason,
    };
    if rendered.contains("{{") || rendered.contains("}}") {
        return Err(invalid("a template expression was left unrendered".into()));
    }
    // With no expression left, this checks the real characters and length.
    if let Some(error) = validate_role_name("name", &rendered) {
        return Err(invalid(error.message));
    }
    Ok(rendered)
}

fn type_name(type_: RoleType) -> &'static str {
    match type_ {
        RoleType::Provision => "provision",
        RoleType::Maintenance => "maintenance",
        RoleType::Deprovision => "deprovision",
        RoleType::BreakGlass => "break_glass",
        RoleType::Custom => "custom",
    }
}

fn add_role(
    stack: &mut StackTemplate,
    context: &StackContext<'_>,
    role: &RoleSpec,
    rendered: &str,
    shared: &[Value],
) -> Result<(), StackError> {
    // `validate_role_name` accepted the rendered name, so the template parses.
    let literal = with_placeholder(&role.name, "-").unwrap_or_default();
    let key = pascal_case(&literal);
    if key.is_empty() {
        return Err(StackError::RoleLogicalId {
            template: role.name.clone(),
        });
    }
    let owner = format!("role {:?}", role.name);
    let type_ = type_name(role.type_);
    let parameter = format!("Enable{key}");
    let condition = format!("Role{key}Enabled");
    let resource = format!("Role{key}");

    let mut description = format!("Create the {type_} role {rendered}");
    if let Some(text) = &role.description {
        description.push_str(": ");
        description.push_str(text);
    }
    let default = if role.enabled_by_default() {
        "true"
    } else {
        "false"
    };
    stack.parameter(
        GROUP,
        &parameter,
        &owner,
        json!({
            "Type": "String",
            "AllowedValues": ["true", "false"],
            "Default": default,
            "Description": description,
        }),
    )?;
    stack.condition(
        &condition,
        &owner,
        json!({"Fn::Equals": [{"Ref": parameter}, "true"]}),
    )?;

    let mut properties = serde_json::Map::new();
    properties.insert("RoleName".into(), json!(rendered));
    properties.insert(
        "AssumeRolePolicyDocument".into(),
        trust_policy(&context.external_id),
    );
    if let Some(text) = &role.description {
        properties.insert("Description".into(), json!(text));
    }
    let mut policies: Vec<Value> = role
        .policies
        .iter()
        .map(|p| json!({"PolicyName": p.name, "PolicyDocument": p.document}))
        .collect();
    policies.extend(shared.iter().cloned());
    if !policies.is_empty() {
        properties.insert("Policies".into(), Value::Array(policies));
    }
    if !role.managed_policy_arns.is_empty() {
        properties.insert("ManagedPolicyArns".into(), json!(role.managed_policy_arns));
    }
    if let Some(boundary) = &role.permissions_boundary {
        let reference = match (&boundary.arn, &boundary.document) {
            (Some(arn), _) => Some(json!(arn)),
            (None, Some(document)) => {
                let boundary_id = format!("{resource}Boundary");
                stack.resource(
                    &boundary_id,
                    &owner,
                    json!({
                        "Type": "AWS::IAM::ManagedPolicy",
                        "Condition": condition,
                        "Properties": {
                            "Description": format!("Permissions boundary of role {rendered}"),
                            "PolicyDocument": document,
                        },
                    }),
                )?;
                Some(json!({"Ref": boundary_id}))
            }
            // Validation rejects a boundary with neither; it bounds nothing.
            (None, None) => None,
        };
        if let Some(reference) = reference {
            properties.insert("PermissionsBoundary".into(), reference);
        }
    }
    properties.insert(
        "Tags".into(),
        context.tags(&[("outpost.dev/role-type", type_)]),
    );
    stack.resource(
        &resource,
        &owner,
        json!({
            "Type": "AWS::IAM::Role",
            "Condition": condition,
            "Properties": properties,
        }),
    )?;
    stack.output(
        &format!("{resource}Arn"),
        &owner,
        json!({
            "Condition": condition,
            "Description": format!("ARN of the {type_} role {rendered}"),
            "Value": {"Fn::GetAtt": [resource, "Arn"]},
        }),
    )?;
    // Unconditional: the runner learns every declared role's name from the stack and
    // whether it is enabled from `parameter`, also for a role the stack did not create.
    stack.output(
        &format!("{resource}Name"),
        &owner,
        json!({
            "Description": format!("Name of the {type_} role, enabled by parameter {parameter}"),
            "Value": rendered,
        }),
    )
}

/// Only the runner's instance role may assume a declared role, and only with
/// the install's external id.
fn trust_policy(external_id: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"AWS": {"Fn::GetAtt": [RUNNER_ROLE, "Arn"]}},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
        }],
    })
}
