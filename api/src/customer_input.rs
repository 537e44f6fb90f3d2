//! Inputs the customer sets (`source: customer`): the install stack asks for each as a
//! parameter ([`stack_parameter`], `Input<PascalName>`) when the customer creates or
//! updates it, and the runner reads the value from its own stack. The vendor's Install
//! never holds one (admission refuses it, see [`crate::input_value`]), and the control
//! plane never knows it: templates render `{{ inputs.NAME }}` of a customer input as the
//! placeholder [`placeholder`] (`${outpost-input:NAME}`), which the runner replaces with
//! the value ([`substitute`]) after checking it against the App's declaration
//! ([`from_parameter`], [`check`]).
//!
//! A placeholder is replaced by the value's text: a string as itself, anything else as
//! JSON (`5`, `true`, `["a","b"]`). Filters in the template act on the placeholder, not
//! on the value (as for secrets): `{{ inputs.domain | upper }}` upper-cases the
//! placeholder, which the runner then no longer recognises and leaves as it is.

use crate::input::{InputSpec, InputType};
use crate::install_stack::pascal_case;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a customer input renders to starts with this; the rest is `<name>}`.
pub const PLACEHOLDER_PREFIX: &str = "${outpost-input:";

/// The text `{{ inputs.NAME }}` of a customer input renders to.
///
/// ```
/// assert_eq!(outpost_api::customer_input::placeholder("domain"), "${outpost-input:domain}");
/// ```
pub fn placeholder(name: &str) -> String {
    format!("{PLACEHOLDER_PREFIX}{name}}}")
}

/// The install stack parameter the customer sets input `name` in: `Input<PascalName>`.
///
/// ```
/// assert_eq!(outpost_api::customer_input::stack_parameter("db_name"), "InputDbName");
/// ```
pub fn stack_parameter(name: &str) -> String {
    format!("Input{}", pascal_case(name))
}

/// The names of the customer inputs referenced in `value`, sorted, without repeats.
pub fn references(value: &Value) -> Vec<String> {
    fn collect(value: &Value, names: &mut Vec<String>) {
        match value {
            Value::String(text) => {
                let mut rest = text.as_str();
                while let Some(start) = rest.find(PLACEHOLDER_PREFIX) {
                    rest = &rest[start + PLACEHOLDER_PREFIX.len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(rest.len());
                    if end > 0 && rest[end..].starts_with('}') {
                        names.push(rest[..end].to_owned());
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| collect(v, names)),
            Value::Object(map) => map.values().for_each(|v| collect(v, names)),
            _ => {}
        }
    }
    let mut names = Vec::new();
    collect(value, &mut names);
    names.sort();
    names.dedup();
    names
}

/// `value` with every placeholder of an input in `values` replaced by the input's text
/// (a string as itself, anything else as JSON); other placeholders stay as they are.
pub fn substitute(value: &Value, values: &BTreeMap<String, Value>) -> Value {
    match value {
        Value::String(text) if text.contains(PLACEHOLDER_PREFIX) => {
            let mut out = text.clone();
            for (name, value) in values {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out = out.replace(&placeholder(name), &text);
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, values)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, values)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Why a customer's value cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("customer input {name} (install stack parameter {parameter}): {reason}")]
pub struct CustomerInputError {
    /// The input.
    pub name: String,
    /// Its stack parameter.
    pub parameter: String,
    /// What is wrong.
    pub reason: String,
}

/// `input`'s value from the text of its stack parameter (as `DescribeStacks` gives it),
/// checked against the declaration: a number parsed as a JSON number, a boolean from
/// `true`/`false`, a list from a comma-delimited list of strings, json parsed; an empty
/// text is no value (the declared default, if any, else an error).
pub fn from_parameter(input: &InputSpec, text: &str) -> Result<Value, CustomerInputError> {
    let error = |reason: String| CustomerInputError {
        name: input.name.clone(),
        parameter: stack_parameter(&input.name),
        reason,
    };
    if text.is_empty() && input.type_ != InputType::String {
        return input
            .default
            .clone()
            .ok_or_else(|| error("not set, and the input has no default".into()));
    }
    let value = match input.type_ {
        InputType::String => Value::String(text.to_owned()),
        InputType::Number => serde_json::from_str::<serde_json::Number>(text.trim())
            .map(Value::Number)
            .map_err(|_| error(format!("{text:?} is not a number")))?,
        InputType::Boolean => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(error(format!("{text:?} is neither true nor false"))),
        },
        InputType::List => Value::Array(
            text.split(',')
                .map(|item| Value::String(item.trim().to_owned()))
                .collect(),
        ),
        InputType::Json => {
            serde_json::from_str(text).map_err(|e| error(format!("not JSON ({e})")))?
        }
    };
    check(input, &value)?;
    Ok(value)
}

/// Whether `value` holds against `input`'s declaration (type, `enum`, `pattern`), and
/// holds no `${outpost-…}` text, which the runner would read as a reference after
/// filling the value in.
pub fn check(input: &InputSpec, value: &Value) -> Result<(), CustomerInputError> {
    if value.to_string().contains("${outpost-") {
        return Err(CustomerInputError {
            name: input.name.clone(),
            parameter: stack_parameter(&input.name),
            reason: "must not contain \"${outpost-\", which the runner reads as a reference".into(),
        });
    }
    match crate::input_value::check_value(input, &input.name, value, &[]) {
        None => Ok(()),
        Some(problem) => Err(CustomerInputError {
            name: input.name.clone(),
            parameter: stack_parameter(&input.name),
            reason: problem.message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(declaration: Value) -> InputSpec {
        serde_json::from_value(declaration).expect("a declaration")
    }

    #[test]
    fn parameters_are_typed_and_checked() {
        let domain = input(json!({"name": "domain", "type": "string", "pattern": "^[a-z.]+$"}));
        assert_eq!(
            from_parameter(&domain, "shop.example"),
            Ok(json!("shop.example"))
        );
        let err = from_parameter(&domain, "Shop Example").unwrap_err();
        assert_eq!(err.parameter, "InputDomain");
        assert!(err.to_string().contains("must match the pattern"), "{err}");

        let count = input(json!({"name": "node_count", "type": "number", "enum": [3, 5]}));
        assert_eq!(from_parameter(&count, "5"), Ok(json!(5)));
        assert!(
            from_parameter(&count, "4")
                .unwrap_err()
                .reason
                .contains("supported values")
        );
        assert!(
            from_parameter(&count, "five")
                .unwrap_err()
                .reason
                .contains("not a number")
        );
        assert!(
            from_parameter(&count, "")
                .unwrap_err()
                .reason
                .contains("no default")
        );

        let cache = input(json!({"name": "cache", "type": "boolean", "default": true}));
        assert_eq!(from_parameter(&cache, "false"), Ok(json!(false)));
        assert_eq!(from_parameter(&cache, ""), Ok(json!(true)));
        assert!(from_parameter(&cache, "yes").is_err());

        let cidrs = input(json!({"name": "cidrs", "type": "list"}));
        assert_eq!(
            from_parameter(&cidrs, "10.0.0.0/8, 192.168.0.0/16"),
            Ok(json!(["10.0.0.0/8", "192.168.0.0/16"]))
        );
        let labels = input(json!({"name": "labels", "type": "json"}));
        assert_eq!(from_parameter(&labels, r#"{"a":1}"#), Ok(json!({"a": 1})));
        assert!(from_parameter(&labels, "{").is_err());
        // A reference the runner would resolve next is not a value.
        let err = from_parameter(&labels, r#"{"a":"${outpost-secret:pw}"}"#).unwrap_err();
        assert!(err.reason.contains("must not contain"), "{err}");
    }

    #[test]
    fn placeholders_are_found_and_substituted() {
        let desired = json!({"data": {"host": "https://${outpost-input:domain}/x",
                                      "n": ["${outpost-input:node_count}", "${outpost-input:Bad}"]},
                             "other": "${outpost-secret:pw}"});
        assert_eq!(references(&desired), ["domain", "node_count"]);
        let values = BTreeMap::from([
            ("domain".to_owned(), json!("shop.example")),
            ("node_count".to_owned(), json!(5)),
        ]);
        assert_eq!(
            substitute(&desired, &values),
            json!({"data": {"host": "https://shop.example/x", "n": ["5", "${outpost-input:Bad}"]},
                   "other": "${outpost-secret:pw}"})
        );
    }
}
