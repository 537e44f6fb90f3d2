//! The customer's inputs (`source: customer`): one parameter each, `Input<PascalName>`,
//! that the customer fills in when creating or updating the stack. The runner reads
//! them back from the stack (`DescribeStacks`) and checks them against the App's
//! declaration again before use (see `outpost_api::customer_input`).
//!
//! | declared `type` | parameter |
//! |---|---|
//! | `string` | `String`; `enum` as `AllowedValues`, `pattern` as `AllowedPattern` (made to match the whole value, as CloudFormation requires, around the declared unanchored one) |
//! | `number` | `Number`; `enum` as `AllowedValues` |
//! | `boolean` | `String` with `AllowedValues` `true`, `false` |
//! | `list` | `CommaDelimitedList` (of strings) |
//! | `json` | `String` holding JSON |
//!
//! The declared default is the parameter's `Default`; without one, the parameter has
//! none and CloudFormation asks for it. Sensitive customer inputs do not exist (the App
//! is refused): a secret the customer sets is an App secret ([`super::secrets`]).

use super::render::StackError;
use super::stack_template::StackTemplate;
use outpost_api::customer_input::stack_parameter;
use outpost_api::{InputSpec, InputType, Party};
use serde_json::{Map, Value, json};

const GROUP: &str = "Inputs";
/// The template metadata entry mapping each customer input to its parameter
/// (`{"domain": {"Ref": "InputDomain"}}`). CloudFormation does not resolve it: it
/// tells a reader of the template which parameter holds which input, and it is the
/// parameters' one use in the template (nothing in the stack consumes them; the runner
/// reads them back), which keeps cfn-lint's unused-parameter check (W2001) meaningful
/// for the others.
const METADATA: &str = "Outpost::CustomerInputs";

/// Adds a parameter for every customer input of `inputs`, and the metadata entry
/// [`METADATA`] naming the parameter of each input.
pub(super) fn add_inputs(
    stack: &mut StackTemplate,
    inputs: &[InputSpec],
) -> Result<(), StackError> {
    let mut mapping = Map::new();
    for input in inputs.iter().filter(|i| i.source() == Party::Customer) {
        let id = stack_parameter(&input.name);
        stack.parameter(
            GROUP,
            &id,
            &format!("input {:?}", input.name),
            parameter(input),
        )?;
        mapping.insert(input.name.clone(), json!({"Ref": id}));
    }
    if !mapping.is_empty() {
        stack.metadata(METADATA, Value::Object(mapping));
    }
    Ok(())
}

/// The parameter of customer input `input`.
fn parameter(input: &InputSpec) -> Value {
    let mut parameter = Map::new();
    let type_ = match input.type_ {
        InputType::Number => "Number",
        InputType::List => "CommaDelimitedList",
        InputType::String | InputType::Boolean | InputType::Json => "String",
    };
    parameter.insert("Type".into(), json!(type_));
    let label = input.display_name.as_deref().unwrap_or(&input.name);
    let description = match &input.description {
        Some(text) => format!("{label}: {}", text.trim()),
        None => label.to_owned(),
    };
    parameter.insert("Description".into(), json!(description));
    if let Some(default) = &input.default {
        parameter.insert("Default".into(), json!(text(default)));
    }
    match input.type_ {
        InputType::Boolean => {
            parameter.insert("AllowedValues".into(), json!(["true", "false"]));
        }
        InputType::String | InputType::Number if !input.enum_.is_empty() => {
            let allowed: Vec<String> = input.enum_.iter().map(text).collect();
            parameter.insert("AllowedValues".into(), json!(allowed));
        }
        _ => {}
    }
    if let Some(pattern) = &input.pattern {
        // CloudFormation matches AllowedPattern against the whole value; the declared
        // pattern is unanchored (as in OpenAPI), so it may match anywhere in it.
        parameter.insert("AllowedPattern".into(), json!(format!(".*(?:{pattern}).*")));
        parameter.insert(
            "ConstraintDescription".into(),
            json!(format!("must match the pattern {pattern}")),
        );
    }
    if input.required && input.default.is_none() && input.type_ == InputType::String {
        parameter.insert("MinLength".into(), json!(1));
    }
    Value::Object(parameter)
}

/// A value as a parameter holds it: a string as itself, a list comma-delimited,
/// anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}
