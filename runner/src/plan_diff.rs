//! The real diff as the control plane shows it (`status.diff`, a [`PlanDiff`]): the
//! executor's [`Diff`] summed up per resource, bounded by `MAX_DIFF_*`, secret-free, and
//! hashed so that an approval binds to exactly what will be applied.
//!
//! | executor | resources | hash of |
//! |---|---|---|
//! | terraform | `resource_changes` by address, changed attribute paths before → after (sensitive: `(sensitive)`, unknown: `(known after apply)`) | the saved plan's `resource_changes` and `output_changes` |
//! | kubernetes | `Kind/namespace/name` created, changed (field paths before → after) or pruned; Secrets' values never | the dry-run results and the live resourceVersions they were checked against |
//! | job / action | each step, as one resource | the steps |
//! | container_image | the copy to the install's registry | the image document |
//! | cloudformation | the change set's resources (`Type/LogicalId`), changed properties | the described change set (its id, changes, parameters) and the stack's latest event and status |

use outpost_api::plan_lifecycle::{MAX_DIFF_FIELDS, MAX_DIFF_RESOURCES, MAX_DIFF_VALUE_CHARS};
use outpost_api::{ChangeAction, FieldChange, PlanDiff, PolicyInput, ResourceChange};
use serde_json::{Value, json};

use crate::executor::Diff;

/// What a sensitive or secret value is shown as.
pub const SENSITIVE: &str = "(sensitive)";
/// What a value terraform does not know before applying is shown as.
pub const UNKNOWN: &str = "(known after apply)";

/// The bounded, hashed diff of `diff` (without verdicts: the runner adds them).
pub fn plan_diff(diff: &Diff) -> PlanDiff {
    let resources = match &diff.resources {
        Some(resources) => resources.clone(),
        None => match diff.input {
            PolicyInput::Terraform => terraform_resources(&diff.document),
            PolicyInput::Images => image_resources(diff),
            _ => step_resources(&diff.document),
        },
    };
    let count = |f: fn(ChangeAction) -> bool| {
        u32::try_from(resources.iter().filter(|r| f(r.action)).count()).unwrap_or(u32::MAX)
    };
    let mut plan_diff = PlanDiff::new(
        hash(diff),
        count(|a| a == ChangeAction::Create),
        count(|a| matches!(a, ChangeAction::Update | ChangeAction::Replace)),
        count(|a| a == ChangeAction::Delete),
    );
    plan_diff.truncated = resources.len() > MAX_DIFF_RESOURCES;
    plan_diff.source = diff
        .basis
        .get(crate::executor::BASIS_ARTEFACT)
        .and_then(Value::as_str)
        .map(str::to_owned);
    plan_diff.resources = resources
        .into_iter()
        .take(MAX_DIFF_RESOURCES)
        .map(|mut r| {
            if r.fields.len() > MAX_DIFF_FIELDS {
                plan_diff.truncated = true;
                r.fields.truncate(MAX_DIFF_FIELDS);
            }
            r
        })
        .collect();
    plan_diff
}

/// `sha256:<hex>` of what the apply applies: terraform's saved change set, or the
/// executor's document, with the live state it was checked against.
pub fn hash(diff: &Diff) -> String {
    let changes = match diff.input {
        PolicyInput::Terraform => json!({
            "resource_changes": diff.document.get("resource_changes").cloned().unwrap_or(json!([])),
            "output_changes": diff.document.get("output_changes").cloned().unwrap_or(json!({})),
        }),
        _ => diff.document.clone(),
    };
    outpost_api::content_hash(&json!({"changes": changes, "basis": diff.basis}))
}

/// Whether `replan`, planned again against live state after an apply was cut (the runner
/// was killed during it), stays within `cleared`, the diff that apply was cleared to make
/// (approved by a person, or passed by the policies): `Err` says where it does not.
///
/// It does when every resource `replan` changes is one `cleared` changes (by address),
/// * by the same action, changing no field `cleared` does not, each to the value `cleared`
///   shows (or to any value where `cleared` showed [`UNKNOWN`]: what the cut apply made
///   is known now, e.g. an id a later resource takes); or
/// * by what is left of it: `cleared` replaced it and the re-plan only creates or only
///   deletes it (one half was done), or `cleared` created it and the re-plan replaces it
///   (a create cut halfway leaves the object tainted); the fields both list agree as above.
///
/// A delete is compared by address and action only: what is deleted is the object at that
/// address, whatever its attributes now. Resources `cleared` changes that the re-plan
/// leaves alone were applied before the cut. A diff cut to its bound (`truncated`) cannot
/// be checked whole, so it is never within. The hashes differ by nature (another change
/// set) and are not compared; nor are the verdicts (the re-plan has its own).
pub fn within(replan: &PlanDiff, cleared: &PlanDiff) -> Result<(), String> {
    if cleared.truncated || replan.truncated {
        return Err("a diff was cut to its bound, so the re-plan cannot be checked against all of what was cleared".into());
    }
    for change in &replan.resources {
        let candidates: Vec<&ResourceChange> = cleared
            .resources
            .iter()
            .filter(|c| c.address == change.address)
            .collect();
        if candidates.is_empty() {
            return Err(format!(
                "{} would be {}d, and the cleared diff does not change it",
                change.address,
                verb(change.action)
            ));
        }
        let results: Vec<Result<(), String>> = candidates
            .iter()
            .map(|c| resource_within(change, c))
            .collect();
        if !results.iter().any(Result::is_ok) {
            let reasons: Vec<String> = results.into_iter().filter_map(Result::err).collect();
            return Err(reasons.join("; "));
        }
    }
    Ok(())
}

fn verb(action: ChangeAction) -> &'static str {
    match action {
        ChangeAction::Create => "create",
        ChangeAction::Update => "update",
        ChangeAction::Replace => "replace",
        ChangeAction::Delete => "delete",
    }
}

/// Whether `change` (of the re-plan) is within `cleared` (of the same address).
fn resource_within(change: &ResourceChange, cleared: &ResourceChange) -> Result<(), String> {
    use ChangeAction::{Create, Delete, Replace};
    let address = &change.address;
    let same = change.action == cleared.action;
    let rest_of = matches!(
        (cleared.action, change.action),
        (Replace, Create | Delete) | (Create, Replace)
    );
    if !same && !rest_of {
        return Err(format!(
            "{address} would be {}d, and the cleared diff would {} it",
            verb(change.action),
            verb(cleared.action)
        ));
    }
    if change.action == Delete {
        return Ok(());
    }
    for field in &change.fields {
        let path = &field.path;
        match cleared.fields.iter().find(|f| f.path == *path) {
            Some(f) if f.after == field.after || f.after.as_deref() == Some(UNKNOWN) => {}
            Some(f) => {
                return Err(format!(
                    "{address} {path} would become {}, and the cleared diff sets it to {}",
                    field.after.as_deref().unwrap_or("null"),
                    f.after.as_deref().unwrap_or("null")
                ));
            }
            None if same => {
                return Err(format!(
                    "{address} {path} would change, and the cleared diff does not change it"
                ));
            }
            None => {}
        }
    }
    Ok(())
}

/// The changed attributes from `before` to `after`, as dotted paths (array items by
/// index); values under a path `sensitive` says yes to are shown as [`SENSITIVE`].
pub fn field_changes(
    before: &Value,
    after: &Value,
    sensitive: &dyn Fn(&str) -> bool,
) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    walk("", before, after, &Value::Null, sensitive, &mut changes);
    changes
}

fn walk(
    path: &str,
    before: &Value,
    after: &Value,
    unknown: &Value,
    sensitive: &dyn Fn(&str) -> bool,
    out: &mut Vec<FieldChange>,
) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            // Attributes terraform does not know yet are only in `after_unknown`.
            let unknown_keys = unknown.as_object().into_iter().flat_map(|u| u.keys());
            let mut keys: Vec<&String> = b.keys().chain(a.keys()).chain(unknown_keys).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                walk(
                    &join(key),
                    b.get(key).unwrap_or(&Value::Null),
                    a.get(key).unwrap_or(&Value::Null),
                    unknown.get(key.as_str()).unwrap_or(&Value::Null),
                    sensitive,
                    out,
                );
            }
        }
        (Value::Array(b), Value::Array(a)) if a.len() == b.len() => {
            for (i, (b, a)) in b.iter().zip(a).enumerate() {
                walk(
                    &join(&i.to_string()),
                    b,
                    a,
                    unknown.get(i).unwrap_or(&Value::Null),
                    sensitive,
                    out,
                );
            }
        }
        (Value::Null, Value::Object(a)) if !a.is_empty() => {
            walk(path, &json!({}), after, unknown, sensitive, out);
        }
        (Value::Object(b), Value::Null) if !b.is_empty() => {
            walk(path, before, &json!({}), unknown, sensitive, out);
        }
        _ if *unknown == Value::Bool(true) => out.push(FieldChange {
            path: path.to_owned(),
            before: shown(before, path, sensitive),
            after: Some(UNKNOWN.to_owned()),
        }),
        _ if before != after => out.push(FieldChange {
            path: path.to_owned(),
            before: shown(before, path, sensitive),
            after: shown(after, path, sensitive),
        }),
        _ => {}
    }
}

fn shown(value: &Value, path: &str, sensitive: &dyn Fn(&str) -> bool) -> Option<String> {
    if value.is_null() {
        return None;
    }
    if sensitive(path) || value == SENSITIVE {
        return Some(SENSITIVE.to_owned());
    }
    let text = value.to_string();
    Some(if text.chars().count() > MAX_DIFF_VALUE_CHARS {
        let cut: String = text.chars().take(MAX_DIFF_VALUE_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        text
    })
}

/// Terraform's `resource_changes` (already redacted by the executor), by address.
fn terraform_resources(plan: &Value) -> Vec<ResourceChange> {
    let never = |_: &str| false;
    plan["resource_changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rc| rc["mode"] != "data")
        .filter_map(|rc| {
            let actions: Vec<&str> = rc["change"]["actions"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let action = match actions.as_slice() {
                ["create"] => ChangeAction::Create,
                ["update"] => ChangeAction::Update,
                ["delete"] => ChangeAction::Delete,
                [_, _] if actions.contains(&"create") && actions.contains(&"delete") => {
                    ChangeAction::Replace
                }
                _ => return None,
            };
            let change = &rc["change"];
            let mut fields = Vec::new();
            walk(
                "",
                &change["before"],
                &change["after"],
                &change["after_unknown"],
                &never,
                &mut fields,
            );
            Some(ResourceChange {
                address: rc["address"].as_str()?.to_owned(),
                action,
                fields,
                note: None,
            })
        })
        .collect()
}

/// A job's or action's steps, one resource each.
fn step_resources(document: &Value) -> Vec<ResourceChange> {
    document["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, step)| ResourceChange {
            address: format!(
                "step/{}",
                step["name"]
                    .as_str()
                    .map_or_else(|| i.to_string(), str::to_owned)
            ),
            action: ChangeAction::Create,
            fields: Vec::new(),
            note: None,
        })
        .collect()
}

/// A `container_image` copy: the image at its destination, when anything is copied.
fn image_resources(diff: &Diff) -> Vec<ResourceChange> {
    if !diff.changes {
        return Vec::new();
    }
    diff.document["images"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|image| ResourceChange {
            address: image["destination"].as_str().unwrap_or("image").to_owned(),
            action: ChangeAction::Create,
            fields: vec![FieldChange {
                path: "digest".into(),
                before: None,
                after: image.get("digest").map(Value::to_string),
            }],
            note: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubernetes(resources: Vec<ResourceChange>) -> Diff {
        Diff {
            input: PolicyInput::Kubernetes,
            document: json!([]),
            summary: String::new(),
            changes: true,
            resources: Some(resources),
            basis: json!([{"address": "Deployment/shop/web", "resourceVersion": "7"}]),
        }
    }

    #[test]
    fn field_paths_show_before_and_after() {
        let before = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"image": "a"}]}}}});
        let after = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "b"}]}}}});
        let fields = field_changes(&before, &after, &|_: &str| false);
        assert_eq!(fields.len(), 2, "{fields:?}");
        assert_eq!(fields[0].path, "spec.replicas");
        assert_eq!(fields[0].before.as_deref(), Some("2"));
        assert_eq!(fields[0].after.as_deref(), Some("3"));
        assert_eq!(fields[1].path, "spec.template.spec.containers.0.image");
        let secret = field_changes(
            &json!({"data": {"k": "b2xk"}}),
            &json!({"data": {"k": "bmV3"}}),
            &|p: &str| p.starts_with("data"),
        );
        assert_eq!(secret[0].before.as_deref(), Some(SENSITIVE));
        assert_eq!(secret[0].after.as_deref(), Some(SENSITIVE));
    }

    #[test]
    fn terraform_changes_are_counted_by_address() {
        let plan = json!({"resource_changes": [
            {"address": "terraform_data.a", "mode": "managed",
             "change": {"actions": ["create"], "before": null, "after": {"input": "x"},
                        "after_unknown": {"id": true}}},
            {"address": "terraform_data.b", "mode": "managed",
             "change": {"actions": ["delete", "create"], "before": {"input": "1"}, "after": {"input": "2"}}},
            {"address": "terraform_data.c", "mode": "managed",
             "change": {"actions": ["no-op"], "before": {}, "after": {}}},
        ]});
        let diff = plan_diff(&Diff {
            input: PolicyInput::Terraform,
            document: plan,
            summary: String::new(),
            changes: true,
            resources: None,
            basis: Value::Null,
        });
        assert_eq!(diff.summary, "1 to add, 1 to change, 0 to destroy");
        assert_eq!(diff.resources.len(), 2);
        assert_eq!(diff.resources[0].address, "terraform_data.a");
        let id = diff.resources[0].fields.iter().find(|f| f.path == "id");
        assert_eq!(id.and_then(|f| f.after.as_deref()), Some(UNKNOWN));
        assert_eq!(diff.resources[1].action, ChangeAction::Replace);
        assert!(outpost_api::is_content_hash(&diff.hash));
    }

    fn change(
        address: &str,
        action: ChangeAction,
        fields: &[(&str, Option<&str>)],
    ) -> ResourceChange {
        ResourceChange {
            address: address.to_owned(),
            action,
            fields: fields
                .iter()
                .map(|(path, after)| FieldChange {
                    path: (*path).to_owned(),
                    before: None,
                    after: after.map(str::to_owned),
                })
                .collect(),
            note: None,
        }
    }

    fn diff_of(resources: Vec<ResourceChange>) -> PlanDiff {
        PlanDiff {
            resources,
            ..PlanDiff::new("sha256:x".into(), 0, 0, 0)
        }
    }

    /// Three chained resources, as terraform plans them before any exists: b's input is
    /// a's id, unknown until a is made.
    fn cleared() -> PlanDiff {
        use ChangeAction::{Create, Delete, Replace, Update};
        diff_of(vec![
            change(
                "t.a",
                Create,
                &[("id", Some(UNKNOWN)), ("input", Some("\"a\""))],
            ),
            change(
                "t.b",
                Create,
                &[("id", Some(UNKNOWN)), ("input", Some(UNKNOWN))],
            ),
            change("t.c", Update, &[("input", Some("\"2\""))]),
            change("t.d", Replace, &[("input", Some("\"new\""))]),
            change("t.e", Delete, &[("input", None)]),
        ])
    }

    #[test]
    fn what_is_left_of_a_cut_apply_is_within_it() {
        use ChangeAction::{Create, Delete, Replace};
        // Nothing was applied: the same diff.
        assert_eq!(within(&cleared(), &cleared()), Ok(()));
        // a, c and e were applied; b's input is a's id now; d's delete half was done.
        let rest = diff_of(vec![
            change(
                "t.b",
                Create,
                &[("id", Some(UNKNOWN)), ("input", Some("\"id-of-a\""))],
            ),
            change(
                "t.d",
                Create,
                &[("id", Some(UNKNOWN)), ("input", Some("\"new\""))],
            ),
        ]);
        assert_eq!(within(&rest, &cleared()), Ok(()));
        // All applied: nothing left.
        assert_eq!(within(&diff_of(Vec::new()), &cleared()), Ok(()));
        // A create cut halfway left a tainted object, replaced now; d's create half was
        // done first (create before destroy), its deposed object is deleted now.
        let tainted = diff_of(vec![
            change("t.a", Replace, &[("id", Some(UNKNOWN))]),
            change("t.d", Delete, &[("input", None)]),
        ]);
        assert_eq!(within(&tainted, &cleared()), Ok(()));
    }

    #[test]
    fn a_re_plan_beyond_what_was_cleared_is_not_within_it() {
        use ChangeAction::{Create, Delete, Update};
        let outside = |resources| within(&diff_of(resources), &cleared()).unwrap_err();
        // A resource the cleared diff does not touch.
        let why = outside(vec![change("t.z", Create, &[])]);
        assert!(why.contains("t.z would be created"), "{why}");
        // Another action on a resource it does touch.
        let why = outside(vec![change("t.e", Update, &[("input", Some("\"x\""))])]);
        assert!(
            why.contains("t.e would be updated, and the cleared diff would delete it"),
            "{why}"
        );
        let why = outside(vec![change("t.c", Delete, &[])]);
        assert!(why.contains("t.c would be deleted"), "{why}");
        // Another value than the one cleared.
        let why = outside(vec![change("t.c", Update, &[("input", Some("\"3\""))])]);
        assert!(why.contains("t.c input would become \"3\""), "{why}");
        // A value cleared as known that is unknown now.
        let why = outside(vec![change("t.a", Create, &[("input", Some(UNKNOWN))])]);
        assert!(why.contains("t.a input"), "{why}");
        // A field the cleared update does not change.
        let why = outside(vec![change("t.c", Update, &[("size", Some("9"))])]);
        assert!(why.contains("t.c size would change"), "{why}");
        // A diff cut to its bound cannot be checked whole.
        let mut cut = cleared();
        cut.truncated = true;
        assert!(within(&cleared(), &cut).is_err());
    }

    #[test]
    fn diffs_are_bounded_and_bind_to_live_versions() {
        let many: Vec<ResourceChange> = (0..MAX_DIFF_RESOURCES + 5)
            .map(|i| ResourceChange {
                address: format!("ConfigMap/shop/c{i}"),
                action: ChangeAction::Create,
                fields: Vec::new(),
                note: None,
            })
            .collect();
        let diff = plan_diff(&kubernetes(many.clone()));
        assert_eq!(diff.resources.len(), MAX_DIFF_RESOURCES);
        assert_eq!(diff.add as usize, MAX_DIFF_RESOURCES + 5);
        assert!(diff.truncated);
        let mut moved = kubernetes(many);
        moved.basis = json!([{"address": "Deployment/shop/web", "resourceVersion": "8"}]);
        assert_ne!(plan_diff(&moved).hash, diff.hash);
    }
}
