//! Renders the example App's stack and checks what a customer would see:
//! parameters and their defaults, which resources each parameter setting
//! creates (conditions evaluated here), trust, ingress and NoEcho. By topic: `roles` (the
//! lifecycle roles, their switches, trust and policies), `runner` (the runner VM, its
//! token and UserData) and `stack` (secrets, account and region, names, server URLs, the
//! state bucket, providers and customer inputs).

use super::*;
use outpost_api::{App, Install, InstallStackSpec, content_hash, is_content_hash};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

const APP_YAML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../manifests/app.yaml"
));

fn example_app() -> App {
    serde_saphyr::from_str(APP_YAML).expect("manifests/app.yaml is an App")
}

fn install() -> Install {
    serde_json::from_value(json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": "acme", "namespace": "shop"},
        "spec": {
            "app": "shopfront",
            "cloud": {"provider": "aws", "accountId": "111122223333", "region": "eu-west-1"},
        },
    }))
    .expect("a valid Install")
}

/// Stands in for the template engine: `{{ install.id }}` and
/// `{{ install.name }}` become the install's name; anything else is an error.
fn render_for(install: &Install) -> impl Fn(&str) -> Result<String, String> + use<> {
    let name = install.metadata.name.clone().unwrap_or_default();
    move |text: &str| {
        let out = text
            .replace("{{ install.id }}", &name)
            .replace("{{ install.name }}", &name);
        match out.find("{{") {
            Some(at) => Err(format!("unknown expression at byte {at}")),
            None => Ok(out),
        }
    }
}

fn options() -> StackOptions {
    StackOptions {
        server_urls: vec!["https://outpost.example.com".into()],
    }
}

fn render(app: &App) -> Result<InstallStackSpec, StackError> {
    let install = install();
    render_install_stack(app, &install, &options(), &render_for(&install))
}

fn example_stack() -> Value {
    render(&example_app())
        .expect("the example renders")
        .template
}

fn section<'a>(template: &'a Value, name: &str) -> &'a Map<String, Value> {
    template[name]
        .as_object()
        .unwrap_or_else(|| panic!("template has a {name} section"))
}

/// A parameter's value: `set` if given there, else its `Default`.
fn parameter_value(template: &Value, set: &BTreeMap<&str, &str>, name: &str) -> String {
    if let Some(value) = set.get(name) {
        return (*value).to_owned();
    }
    template["Parameters"][name]["Default"]
        .as_str()
        .unwrap_or_else(|| panic!("parameter {name} has no default and was not set"))
        .to_owned()
}

/// Evaluates a condition expression as CloudFormation would.
fn evaluate(template: &Value, set: &BTreeMap<&str, &str>, expression: &Value) -> bool {
    let operand = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Object(o) if o.contains_key("Ref") => {
                parameter_value(template, set, o["Ref"].as_str().expect("Ref is a name"))
            }
            other => panic!("unsupported operand {other}"),
        }
    };
    let (function, args) = expression
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("a condition is a one-key object");
    match function.as_str() {
        "Fn::Equals" => operand(&args[0]) == operand(&args[1]),
        "Fn::Not" => !evaluate(template, set, &args[0]),
        "Fn::And" => args
            .as_array()
            .unwrap()
            .iter()
            .all(|a| evaluate(template, set, a)),
        "Fn::Or" => args
            .as_array()
            .unwrap()
            .iter()
            .any(|a| evaluate(template, set, a)),
        "Condition" => {
            let name = args.as_str().expect("Condition names a condition");
            evaluate(template, set, &template["Conditions"][name])
        }
        other => panic!("unsupported condition function {other}"),
    }
}

/// The entries of `section_name` CloudFormation would create for the
/// parameter values `set` (defaults elsewhere).
fn created(template: &Value, section_name: &str, set: &[(&str, &str)]) -> BTreeSet<String> {
    let set: BTreeMap<&str, &str> = set.iter().copied().collect();
    section(template, section_name)
        .iter()
        .filter(|(_, entry)| match entry.get("Condition") {
            None => true,
            Some(Value::String(name)) => {
                let expression = &template["Conditions"][name.as_str()];
                assert!(!expression.is_null(), "condition {name} is defined");
                evaluate(template, &set, expression)
            }
            Some(other) => panic!("Condition must be a name, got {other}"),
        })
        .map(|(id, _)| id.clone())
        .collect()
}

fn role_resources(ids: &BTreeSet<String>) -> BTreeSet<&str> {
    ids.iter()
        .map(String::as_str)
        .filter(|id| id.starts_with("Role"))
        .collect()
}

/// The runner VM's UserData script.
fn user_data(template: &Value) -> &str {
    template["Resources"]["RunnerInstance"]["Properties"]["UserData"]["Fn::Base64"]["Fn::Sub"]
        .as_str()
        .expect("the UserData is an Fn::Sub string")
}

/// Where in `value` something refers to `id`, as dotted paths: `{"Ref": id}`,
/// `{"Fn::GetAtt": [id, …]}` or `${id}` in an `Fn::Sub` string.
fn references(value: &Value, id: &str) -> Vec<String> {
    fn walk(value: &Value, id: &str, path: &str, found: &mut Vec<String>) {
        let refers = match value {
            Value::Object(map) => {
                map.get("Ref").is_some_and(|r| r == id)
                    || map.get("Fn::GetAtt").is_some_and(|a| a[0] == id)
            }
            Value::String(text) => text.contains(&format!("${{{id}}}")),
            _ => false,
        };
        if refers {
            found.push(path.trim_start_matches('.').to_owned());
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    walk(child, id, &format!("{path}.{key}"), found);
                }
            }
            Value::Array(items) => {
                for (at, child) in items.iter().enumerate() {
                    walk(child, id, &format!("{path}.{at}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(value, id, "", &mut found);
    found
}

mod roles;
mod runner;
mod stack;
