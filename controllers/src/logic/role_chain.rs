//! The role precedence chain: which role a Plan runs with.
//!
//! The first of these that names a role chooses it:
//! 1. the runtime override, `Plan.spec.roleOverride`;
//! 2. an action's deprecated `breakGlassRole`;
//! 3. the entity's own role: a component's `operationRoles[op]`, an action's
//!    `role`, the sandbox's `operationRoles[op]`;
//! 4. a matrix rule: an `OperationRole` of the App whose principal covers the
//!    entity and whose operation is the Plan's. A rule naming the entity
//!    (`component:web`) beats `component:*`. Two matching rules of the same
//!    specificity that name different roles deny the Plan
//!    ([`RoleError::AmbiguousRules`]); if they name the same role, the first
//!    by name is recorded;
//! 5. the App's role of the operation's default type.
//!
//! The chosen name template is rendered and compared with the App's declared
//! role names rendered the same way. A role the App does not declare denies
//! the Plan; there is no fallback to a later step.

use crate::logic::app_objects::{AppObjects, name_of};
use crate::logic::template::{TemplateContext, TemplateError};
use outpost_api::{EntityKind, Operation, PlanSpec, Principal, ResolvedRole, RoleLevel, RoleType};

/// Why a Plan has no role; the Plan is denied with this as its reason.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// The chosen role renders to a name the App does not declare.
    #[error(
        "role {rendered:?} ({template:?}), chosen by {rule} at the {} level, is not declared by the app",
        level_name(*level)
    )]
    Undeclared {
        /// The step of the chain that chose the role.
        level: RoleLevel,
        /// What chose it.
        rule: String,
        /// The role name template.
        template: String,
        /// The rendered name.
        rendered: String,
    },
    /// The chosen role name does not render.
    #[error("role {template:?}, chosen by {rule} at the {} level, cannot be rendered", level_name(*level))]
    Render {
        /// The step of the chain that chose the role.
        level: RoleLevel,
        /// What chose it.
        rule: String,
        /// The role name template.
        template: String,
        /// Why.
        #[source]
        source: Box<TemplateError>,
    },
    /// Matrix rules of equal specificity name different roles.
    #[error("matrix rules {} match {operation} of {entity} equally and name different roles", rules.join(", "))]
    AmbiguousRules {
        /// The operation.
        operation: Operation,
        /// The entity, `Component/web`.
        entity: String,
        /// The tied rules, `OperationRole/<name>`, by name.
        rules: Vec<String>,
    },
    /// Nothing chose a role and the App declares none of the default type.
    #[error("no role chosen for {operation} and the app declares no {role_type:?} role")]
    NoDefault {
        /// The operation.
        operation: Operation,
        /// The default role type it needed.
        role_type: RoleType,
    },
    /// The Plan's entity is not part of the App.
    #[error("{entity} is not part of the app")]
    UnknownEntity {
        /// The entity, `Component/web`.
        entity: String,
    },
    /// The Plan's operation does not apply to its entity.
    #[error("operation {operation} does not apply to {entity}")]
    WrongEntityKind {
        /// The operation.
        operation: Operation,
        /// The entity, `Action/migrate`.
        entity: String,
    },
}

/// The name of a level as it appears on the wire (`break_glass`).
pub fn level_name(level: RoleLevel) -> &'static str {
    match level {
        RoleLevel::Override => "override",
        RoleLevel::BreakGlass => "break_glass",
        RoleLevel::Entity => "entity",
        RoleLevel::Matrix => "matrix",
        RoleLevel::Default => "default",
    }
}

/// Resolves the role of `plan` by the precedence chain (see the module docs),
/// rendering names against `context`, the Plan's install.
///
/// `rule` of the result says what chose the role: `roleOverride`,
/// `Action/migrate breakGlassRole`, `Action/migrate role`,
/// `Component/web operationRoles.deploy`, `App/shopfront sandbox.operationRoles.provision`,
/// `OperationRole/components-teardown`, or
/// `App/shopfront default maintenance role`.
pub fn resolve_role(
    plan: &PlanSpec,
    objects: &AppObjects<'_>,
    context: &TemplateContext,
) -> Result<ResolvedRole, RoleError> {
    let (level, rule, template) = choose(plan, objects)?;
    let rendered = context
        .render_str(&template)
        .map_err(|source| RoleError::Render {
            level,
            rule: rule.clone(),
            template: template.clone(),
            source: Box::new(source),
        })?;
    let declared = objects.app.spec.roles().iter().any(|role| {
        context
            .render_str(&role.name)
            .is_ok_and(|name| name == rendered)
    });
    if !declared {
        return Err(RoleError::Undeclared {
            level,
            rule,
            template,
            rendered,
        });
    }
    Ok(ResolvedRole {
        name: rendered,
        level,
        rule: Some(rule),
    })
}

/// The first step of the chain that names a role: its level, what chose it
/// and the raw name template.
fn choose(
    plan: &PlanSpec,
    objects: &AppObjects<'_>,
) -> Result<(RoleLevel, String, String), RoleError> {
    let entity = &plan.entity;
    let op = plan.operation;
    let app = objects.app;
    let app_name = objects.app_name();
    let kind = match entity.kind {
        EntityKind::Sandbox => "Sandbox",
        EntityKind::Component => "Component",
        EntityKind::Action => "Action",
    };
    let entity_label = format!("{kind}/{}", entity.name);
    if op.entity_kind() != entity.kind {
        return Err(RoleError::WrongEntityKind {
            operation: op,
            entity: entity_label,
        });
    }
    if let Some(role) = &plan.role_override {
        return Ok((RoleLevel::Override, "roleOverride".into(), role.clone()));
    }
    let own: Option<(RoleLevel, String, String)> = match entity.kind {
        EntityKind::Sandbox => app
            .spec
            .sandbox
            .as_ref()
            .and_then(|s| s.operation_roles.get(op.as_str()))
            .map(|role| {
                let rule = format!("App/{app_name} sandbox.operationRoles.{op}");
                (RoleLevel::Entity, rule, role.clone())
            }),
        EntityKind::Component => {
            let component =
                objects
                    .component(&entity.name)
                    .ok_or_else(|| RoleError::UnknownEntity {
                        entity: entity_label.clone(),
                    })?;
            component.spec.operation_roles.get(op.as_str()).map(|role| {
                let rule = format!("{entity_label} operationRoles.{op}");
                (RoleLevel::Entity, rule, role.clone())
            })
        }
        EntityKind::Action => {
            let action = objects
                .action(&entity.name)
                .ok_or_else(|| RoleError::UnknownEntity {
                    entity: entity_label.clone(),
                })?;
            let break_glass = action.spec.break_glass_role.as_ref().map(|role| {
                let rule = format!("{entity_label} breakGlassRole");
                (RoleLevel::BreakGlass, rule, role.clone())
            });
            break_glass.or_else(|| {
                action.spec.role.as_ref().map(|role| {
                    let rule = format!("{entity_label} role");
                    (RoleLevel::Entity, rule, role.clone())
                })
            })
        }
    };
    if let Some(found) = own {
        return Ok(found);
    }
    if let Some((rule, role)) = matrix_rule(plan, objects, &entity_label)? {
        return Ok((RoleLevel::Matrix, rule, role));
    }
    let role_type = op.default_role_type();
    let role = app.spec.default_role(op).ok_or(RoleError::NoDefault {
        operation: op,
        role_type,
    })?;
    let type_name = serde_json::to_value(role_type)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    Ok((
        RoleLevel::Default,
        format!("App/{app_name} default {type_name} role"),
        role.name.clone(),
    ))
}

/// The matrix rule for the Plan, as `(OperationRole/<name>, role template)`.
fn matrix_rule(
    plan: &PlanSpec,
    objects: &AppObjects<'_>,
    entity_label: &str,
) -> Result<Option<(String, String)>, RoleError> {
    let mut matching: Vec<(bool, &str, &str)> = objects
        .operation_roles
        .iter()
        .filter(|r| r.spec.app == objects.app_name() && r.spec.operation == plan.operation)
        .filter_map(|r| {
            let principal = Principal::parse(&r.spec.principal).ok()?;
            principal
                .matches(&plan.entity)
                .then(|| (principal.is_specific(), name_of(r), r.spec.role.as_str()))
        })
        .collect();
    // Specific rules first, then by name.
    matching.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let Some(&(specific, first, role)) = matching.first() else {
        return Ok(None);
    };
    let tied: Vec<_> = matching.iter().filter(|m| m.0 == specific).collect();
    if tied.iter().any(|m| m.2 != role) {
        return Err(RoleError::AmbiguousRules {
            operation: plan.operation,
            entity: entity_label.to_owned(),
            rules: tied
                .iter()
                .map(|m| format!("OperationRole/{}", m.1))
                .collect(),
        });
    }
    Ok(Some((format!("OperationRole/{first}"), role.to_owned())))
}

#[cfg(test)]
#[path = "role_chain_tests.rs"]
mod tests;
