//! Reading terraform's JSON: the plan summary, and state normalised for drift
//! (`last_applied` and `observe`), with sensitive values redacted.

use serde_json::{Map, Value, json};

/// What a sensitive value is replaced with in normalised state.
pub const REDACTED: &str = "(sensitive)";

/// `N to add, M to change, K to destroy`, counted like terraform does (a replacement
/// adds and destroys) from the plan's `resource_changes`; `, outputs change` when only
/// outputs would change.
pub fn summary(plan: &Value) -> String {
    let (mut add, mut change, mut destroy) = (0, 0, 0);
    for rc in changes(plan) {
        let actions: Vec<&str> = rc["change"]["actions"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for action in actions {
            match action {
                "create" => add += 1,
                "update" => change += 1,
                "delete" => destroy += 1,
                _ => {}
            }
        }
    }
    let outputs_change = plan["output_changes"]
        .as_object()
        .is_some_and(|o| o.values().any(|c| !is_no_op(&c["actions"])));
    let mut text = format!("{add} to add, {change} to change, {destroy} to destroy");
    if add + change + destroy == 0 && outputs_change {
        text.push_str(", outputs change");
    }
    text
}

fn changes(plan: &Value) -> impl Iterator<Item = &Value> {
    plan["resource_changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rc| rc["mode"] != "data")
}

fn is_no_op(actions: &Value) -> bool {
    actions
        .as_array()
        .is_some_and(|a| a.iter().all(|x| x == "no-op" || x == "read"))
}

/// The part of a plan that says what apply will do: `resource_changes` and
/// `output_changes`. Two plans with equal parts apply the same change.
pub fn change_set(plan: &Value) -> Value {
    json!({
        "resource_changes": plan.get("resource_changes").cloned().unwrap_or(json!([])),
        "output_changes": plan.get("output_changes").cloned().unwrap_or(json!({})),
    })
}

/// A state document (`terraform show -json`'s `values`, or a plan's
/// `prior_state.values`) normalised: `{"resources": {address: attributes}, "outputs":
/// {name: value}}`, over the root module and its children, sensitive values redacted.
pub fn normalised_state(values: &Value) -> Value {
    let mut resources = Map::new();
    collect_resources(&values["root_module"], &mut resources);
    let outputs: Map<String, Value> = values["outputs"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, o)| {
            let value = if o["sensitive"] == true {
                Value::String(REDACTED.into())
            } else {
                o["value"].clone()
            };
            (name.clone(), value)
        })
        .collect();
    json!({"resources": resources, "outputs": outputs})
}

fn collect_resources(module: &Value, out: &mut Map<String, Value>) {
    for resource in module["resources"].as_array().into_iter().flatten() {
        if resource["mode"] == "data" {
            continue;
        }
        let Some(address) = resource["address"].as_str() else {
            continue;
        };
        out.insert(
            address.to_owned(),
            redact(&resource["values"], &resource["sensitive_values"]),
        );
    }
    for child in module["child_modules"].as_array().into_iter().flatten() {
        collect_resources(child, out);
    }
}

/// A `terraform show -json` plan with the values terraform marks sensitive redacted:
/// sensitive variables, the sensitive parts of `resource_changes`' and
/// `resource_drift`'s `before`/`after` and of `output_changes`, and sensitive values in
/// `planned_values` and `prior_state`. This is the document policies see and the runner
/// reports, so secret values never leave the customer's account through it.
pub fn redacted_plan(plan: &Value) -> Value {
    let mut plan = plan.clone();
    let sensitive_variables: Vec<String> = plan
        .pointer("/configuration/root_module/variables")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, v)| v["sensitive"] == true)
        .map(|(name, _)| name.clone())
        .collect();
    for name in &sensitive_variables {
        for pointer in [
            format!("/variables/{name}/value"),
            format!("/configuration/root_module/variables/{name}/default"),
        ] {
            if let Some(value) = plan.pointer_mut(&pointer) {
                *value = Value::String(REDACTED.into());
            }
        }
    }
    for list in ["resource_changes", "resource_drift"] {
        let changes = plan.get_mut(list).and_then(Value::as_array_mut);
        for rc in changes.into_iter().flatten() {
            if let Some(change) = rc.get_mut("change") {
                redact_change(change);
            }
        }
    }
    let outputs = plan
        .get_mut("output_changes")
        .and_then(Value::as_object_mut);
    for (_, change) in outputs.into_iter().flatten() {
        redact_change(change);
    }
    for pointer in ["/planned_values", "/prior_state/values"] {
        if let Some(values) = plan.pointer_mut(pointer) {
            redact_values(values);
        }
    }
    plan
}

/// Redacts `before` and `after` of a change by its `before_sensitive`/`after_sensitive`.
fn redact_change(change: &mut Value) {
    for (side, mask) in [("before", "before_sensitive"), ("after", "after_sensitive")] {
        let mask = change.get(mask).cloned().unwrap_or(Value::Null);
        if let Some(value) = change.get_mut(side) {
            *value = redact(value, &mask);
        }
    }
}

/// Redacts a `{outputs, root_module}` values document in place.
fn redact_values(values: &mut Value) {
    let outputs = values.get_mut("outputs").and_then(Value::as_object_mut);
    for (_, output) in outputs.into_iter().flatten() {
        if output["sensitive"] == true
            && let Some(value) = output.get_mut("value")
        {
            *value = Value::String(REDACTED.into());
        }
    }
    fn module(m: &mut Value) {
        let resources = m.get_mut("resources").and_then(Value::as_array_mut);
        for r in resources.into_iter().flatten() {
            let mask = r.get("sensitive_values").cloned().unwrap_or(Value::Null);
            if let Some(values) = r.get_mut("values") {
                *values = redact(values, &mask);
            }
        }
        let children = m.get_mut("child_modules").and_then(Value::as_array_mut);
        for child in children.into_iter().flatten() {
            module(child);
        }
    }
    if let Some(root) = values.get_mut("root_module") {
        module(root);
    }
}

/// `value` with every leaf that `mask` marks `true` replaced by [`REDACTED`]
/// (terraform's `sensitive_values` mirrors the value's shape).
pub fn redact(value: &Value, mask: &Value) -> Value {
    match (value, mask) {
        (Value::Null, _) => Value::Null,
        (_, Value::Bool(true)) => Value::String(REDACTED.into()),
        (Value::Object(map), Value::Object(m)) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), redact(v, m.get(k).unwrap_or(&Value::Null))))
                .collect(),
        ),
        (Value::Array(items), Value::Array(m)) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| redact(v, m.get(i).unwrap_or(&Value::Null)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_like_terraform() {
        let plan = json!({"resource_changes": [
            {"mode": "managed", "change": {"actions": ["delete", "create"]}},
            {"mode": "managed", "change": {"actions": ["update"]}},
            {"mode": "managed", "change": {"actions": ["no-op"]}},
            {"mode": "data", "change": {"actions": ["read"]}},
        ]});
        assert_eq!(summary(&plan), "1 to add, 1 to change, 1 to destroy");
        let outputs = json!({"resource_changes": [],
            "output_changes": {"x": {"actions": ["create"]}}});
        assert_eq!(
            summary(&outputs),
            "0 to add, 0 to change, 0 to destroy, outputs change"
        );
    }

    #[test]
    fn plans_are_redacted_where_terraform_marks_them_sensitive() {
        let plan = json!({
            "variables": {"pw": {"value": "hunter2"}, "size": {"value": "x"}},
            "configuration": {"root_module": {"variables": {
                "pw": {"sensitive": true, "default": "hunter2"}, "size": {}}}},
            "resource_changes": [{"change": {"actions": ["create"], "before": null,
                "after": {"input": {"pw": "hunter2", "size": "x"}},
                "before_sensitive": false, "after_sensitive": {"input": {"pw": true}}}}],
            "output_changes": {"pw": {"actions": ["create"], "before": null, "after": "hunter2",
                "before_sensitive": true, "after_sensitive": true}},
            "planned_values": {"outputs": {"pw": {"sensitive": true, "value": "hunter2"}},
                "root_module": {"resources": [{"values": {"input": {"pw": "hunter2"}},
                    "sensitive_values": {"input": {"pw": true}}}]}},
        });
        let redacted = redacted_plan(&plan);
        assert!(!redacted.to_string().contains("hunter2"), "{redacted}");
        assert_eq!(redacted["variables"]["size"]["value"], "x");
        assert_eq!(
            redacted["resource_changes"][0]["change"]["after"],
            json!({"input": {"pw": REDACTED, "size": "x"}})
        );
        assert_eq!(
            redacted["resource_changes"][0]["change"]["before"],
            Value::Null
        );
    }

    #[test]
    fn state_is_normalised_and_redacted() {
        let values = json!({
            "outputs": {"id": {"value": "1", "sensitive": false},
                        "pw": {"value": "s3cr3t", "sensitive": true}},
            "root_module": {
                "resources": [{"address": "a.b", "mode": "managed",
                    "values": {"x": 1, "secret": "p", "list": ["q", "r"]},
                    "sensitive_values": {"secret": true, "list": [false, true]}}],
                "child_modules": [{"resources": [{"address": "module.m.c.d",
                    "mode": "managed", "values": {"y": 2}}]}]
            }
        });
        assert_eq!(
            normalised_state(&values),
            json!({
                "resources": {
                    "a.b": {"x": 1, "secret": REDACTED, "list": ["q", REDACTED]},
                    "module.m.c.d": {"y": 2}
                },
                "outputs": {"id": "1", "pw": REDACTED}
            })
        );
    }
}
