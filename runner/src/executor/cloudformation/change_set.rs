//! A described change set as the [`super::Diff`] document policies see and the
//! resources the Plan's diff lists.

use aws_sdk_cloudformation::types::{Change, Replacement, ResourceChangeDetail};
use outpost_api::{ChangeAction, FieldChange, ResourceChange};
use serde_json::{Value, json};

/// One change of a change set as policies see it: CloudFormation's own names
/// (`action` `Add`/`Modify`/`Remove`, `replacement` `True`/`False`/`Conditional`).
pub fn change_document(change: &Change) -> Value {
    let Some(resource) = change.resource_change() else {
        return json!({});
    };
    let details: Vec<Value> = resource.details().iter().map(detail_document).collect();
    json!({
        "action": resource.action().map(|a| a.as_str()),
        "logicalResourceId": resource.logical_resource_id(),
        "physicalResourceId": resource.physical_resource_id(),
        "resourceType": resource.resource_type(),
        "replacement": resource.replacement().map(|r| r.as_str()),
        "scope": resource.scope().iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "details": details,
    })
}

fn detail_document(detail: &ResourceChangeDetail) -> Value {
    let target = detail.target();
    json!({
        "attribute": target.and_then(|t| t.attribute()).map(|a| a.as_str()),
        "name": target.and_then(|t| t.name()),
        "requiresRecreation": target.and_then(|t| t.requires_recreation()).map(|r| r.as_str()),
        "before": target.and_then(|t| t.before_value()),
        "after": target.and_then(|t| t.after_value()),
        "changeSource": detail.change_source().map(|c| c.as_str()),
        "evaluation": detail.evaluation().map(|e| e.as_str()),
        "causingEntity": detail.causing_entity(),
    })
}

/// The resource a change document (from [`change_document`]) changes, as the Plan's
/// diff lists it: `Type/LogicalId`; `Add` creates, `Remove` deletes, `Modify` updates in
/// place or, when CloudFormation says the resource is (or may be: `Conditional`)
/// replaced, replaces; each changed property as a field, with its values when
/// CloudFormation gave them.
pub fn resource_change(change: &Value) -> ResourceChange {
    let action = match change["action"].as_str() {
        Some("Add") | Some("Import") => ChangeAction::Create,
        Some("Remove") => ChangeAction::Delete,
        _ if replaced(&change["replacement"]) => ChangeAction::Replace,
        _ => ChangeAction::Update,
    };
    let fields = change["details"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let path = match (d["attribute"].as_str(), d["name"].as_str()) {
                (Some(attribute), Some(name)) => format!("{attribute}.{name}"),
                (Some(attribute), None) => attribute.to_owned(),
                (None, Some(name)) => name.to_owned(),
                (None, None) => return None,
            };
            let value = |v: &Value| v.as_str().map(|s| json!(s).to_string());
            Some(FieldChange {
                path,
                before: value(&d["before"]),
                after: value(&d["after"]),
            })
        })
        .collect();
    ResourceChange {
        address: format!(
            "{}/{}",
            change["resourceType"].as_str().unwrap_or("?"),
            change["logicalResourceId"].as_str().unwrap_or("?")
        ),
        action,
        fields,
        note: None,
    }
}

fn replaced(replacement: &Value) -> bool {
    let text = replacement.as_str().unwrap_or_default();
    text == Replacement::True.as_str() || text == Replacement::Conditional.as_str()
}

/// `N to add, N to change, N to destroy` over `resources`, as terraform says it (a
/// replacement counts as a change).
pub fn summary(resources: &[ResourceChange]) -> String {
    let count = |f: fn(ChangeAction) -> bool| resources.iter().filter(|r| f(r.action)).count();
    format!(
        "{} to add, {} to change, {} to destroy",
        count(|a| a == ChangeAction::Create),
        count(|a| matches!(a, ChangeAction::Update | ChangeAction::Replace)),
        count(|a| a == ChangeAction::Delete),
    )
}

/// Whether a change set's failure reason says only that it has no changes (what
/// CloudFormation answers for an update that changes nothing).
pub fn says_no_changes(reason: &str) -> bool {
    reason.contains("didn't contain changes") || reason.contains("No updates are to be performed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudformation::types::{
        ChangeType, ResourceAttribute, ResourceChange as CfnChange, ResourceTargetDefinition,
    };

    fn modify(replacement: Replacement) -> Change {
        Change::builder()
            .r#type(ChangeType::Resource)
            .resource_change(
                CfnChange::builder()
                    .action(aws_sdk_cloudformation::types::ChangeAction::Modify)
                    .logical_resource_id("Queue")
                    .resource_type("AWS::SQS::Queue")
                    .replacement(replacement)
                    .details(
                        ResourceChangeDetail::builder()
                            .target(
                                ResourceTargetDefinition::builder()
                                    .attribute(ResourceAttribute::Properties)
                                    .name("QueueName")
                                    .before_value("a")
                                    .after_value("b")
                                    .build(),
                            )
                            .build(),
                    )
                    .build(),
            )
            .build()
    }

    #[test]
    fn a_replacement_is_a_replace_and_an_in_place_change_an_update() {
        let replaced = resource_change(&change_document(&modify(Replacement::True)));
        assert_eq!(replaced.address, "AWS::SQS::Queue/Queue");
        assert_eq!(replaced.action, ChangeAction::Replace);
        assert_eq!(replaced.fields[0].path, "Properties.QueueName");
        assert_eq!(replaced.fields[0].before.as_deref(), Some("\"a\""));
        assert_eq!(replaced.fields[0].after.as_deref(), Some("\"b\""));
        let maybe = resource_change(&change_document(&modify(Replacement::Conditional)));
        assert_eq!(maybe.action, ChangeAction::Replace);
        let in_place = resource_change(&change_document(&modify(Replacement::False)));
        assert_eq!(in_place.action, ChangeAction::Update);
        assert_eq!(
            summary(&[replaced, in_place]),
            "0 to add, 2 to change, 0 to destroy"
        );
    }

    #[test]
    fn only_the_no_change_reasons_say_no_changes() {
        assert!(says_no_changes(
            "The submitted information didn't contain changes. Submit different information to create a change set."
        ));
        assert!(says_no_changes("No updates are to be performed."));
        assert!(!says_no_changes("Template format error"));
    }
}
