//! An Install's input values checked against its App's declarations: each value has
//! the declared `type`, is one of `enum`, matches `pattern`; every `required` input
//! without a default is set; no undeclared input is set; a `sensitive` input is given
//! only as a reference to one of the App's secrets (`{secretRef: SECRET}`), never as a
//! value; a `source: customer` input is not set at all (the customer sets it in the
//! install stack, see [`crate::customer_input`]). Errors name the input by field path,
//! `spec.inputs.<name>`, as kube-apiserver names a field of a custom resource that fails
//! its schema.
//!
//! The API server runs [`validate_install_inputs`] when an Install is written; the
//! Install controller runs it again on every reconcile, because an App can change its
//! declarations after its Installs exist (see `docs/ARCHITECTURE.md`, "Install inputs").

use crate::app::AppSpec;
use crate::input::{InputSpec, InputType, SecretSpec};
use crate::party::Party;
use crate::validation::FieldError;
use serde_json::Value;
use std::collections::BTreeMap;

/// The key of the one form a sensitive input's value may take: `{secretRef: SECRET}`.
pub const SECRET_REF: &str = "secretRef";

/// The App secret `value` refers to, when it is exactly `{secretRef: "<name>"}`.
///
/// ```
/// use outpost_api::input_value::secret_ref;
/// assert_eq!(secret_ref(&serde_json::json!({"secretRef": "license_key"})), Some("license_key"));
/// assert_eq!(secret_ref(&serde_json::json!("ACME-0001")), None);
/// ```
pub fn secret_ref(value: &Value) -> Option<&str> {
    let object = value.as_object()?;
    if object.len() != 1 {
        return None;
    }
    object.get(SECRET_REF)?.as_str()
}

/// The field path of input `name` of an Install.
pub fn input_field(name: &str) -> String {
    format!("spec.inputs.{name}")
}

/// Every problem of `inputs` (an Install's `spec.inputs`) against the inputs `app`
/// declares. On an update, `old` holds the inputs as they were stored: an input whose
/// value the update leaves as it was (set to the same value, or unset before and after)
/// is not checked (ratcheting, as kube-apiserver does for CRD validation), so a change
/// of an App's declarations never blocks unrelated writes to its existing Installs.
pub fn validate_install_inputs(
    app: &AppSpec,
    inputs: &BTreeMap<String, Value>,
    old: Option<&BTreeMap<String, Value>>,
) -> Vec<FieldError> {
    let unchanged = |name: &str| old.is_some_and(|old| old.get(name) == inputs.get(name));
    let mut errors = Vec::new();
    for input in &app.inputs {
        if unchanged(&input.name) {
            continue;
        }
        let field = input_field(&input.name);
        let customer = input.source() == Party::Customer;
        match inputs.get(&input.name) {
            Some(_) if customer => errors.push(FieldError::forbidden(
                field,
                format!(
                    "a source: customer input is set by the customer, in the install stack's \
                     parameter {}, not in the Install",
                    crate::customer_input::stack_parameter(&input.name)
                ),
            )),
            Some(value) => errors.extend(check_value(input, &field, value, &app.secrets)),
            // The install stack asks the customer for it (a parameter without default).
            None if customer => {}
            None if input.required && input.default.is_none() => {
                errors.push(FieldError::required(field, "a required input of the App"));
            }
            None => {}
        }
    }
    let declared: Vec<&str> = app.inputs.iter().map(|i| i.name.as_str()).collect();
    for name in inputs.keys() {
        if !declared.contains(&name.as_str()) && !unchanged(name) {
            errors.push(FieldError::not_supported(
                input_field(name),
                name,
                &declared,
            ));
        }
    }
    errors
}

/// The problem of `value` as the value of `input` (of an App with `secrets`), reported
/// at `field`. A sensitive input's value is never echoed in the error.
pub(crate) fn check_value(
    input: &InputSpec,
    field: &str,
    value: &Value,
    secrets: &[SecretSpec],
) -> Option<FieldError> {
    if input.sensitive {
        let Some(secret) = secret_ref(value) else {
            return Some(FieldError::invalid(
                field,
                "(sensitive)",
                "a sensitive input is given as {secretRef: SECRET} naming one of the App's \
                 secrets, never as a value",
            ));
        };
        let secrets: Vec<&str> = secrets.iter().map(|s| s.name.as_str()).collect();
        return (!secrets.contains(&secret))
            .then(|| FieldError::not_supported(format!("{field}.{SECRET_REF}"), secret, &secrets));
    }
    if !input.type_.accepts(value) {
        return Some(FieldError::invalid(
            field,
            shown(value),
            format!("must be of type {}", type_name(input.type_)),
        ));
    }
    if !input.enum_.is_empty() && !input.enum_.contains(value) {
        let allowed: Vec<String> = input.enum_.iter().map(shown).collect();
        let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
        return Some(FieldError::not_supported(field, shown(value), &allowed));
    }
    if let (Some(pattern), Some(text)) = (&input.pattern, value.as_str()) {
        // An App whose pattern does not compile is refused when it is written; one
        // stored before that check matches nothing.
        let matches = regex::Regex::new(pattern).is_ok_and(|re| re.is_match(text));
        if !matches {
            return Some(FieldError::invalid(
                field,
                text,
                format!("must match the pattern {pattern:?}"),
            ));
        }
    }
    None
}

/// Problems of input declaration `input` itself (its `enum`, `pattern`, `default` and
/// `sensitive`), with paths under `at` (`spec.inputs[2]`).
pub(crate) fn validate_declaration(input: &InputSpec, at: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let type_ = type_name(input.type_);
    for (i, value) in input.enum_.iter().enumerate() {
        if !input.type_.accepts(value) {
            errors.push(FieldError::invalid(
                format!("{at}.enum[{i}]"),
                shown(value),
                format!("must be of type {type_}"),
            ));
        }
    }
    if let Some(pattern) = &input.pattern {
        if input.type_ != InputType::String {
            errors.push(FieldError::forbidden(
                format!("{at}.pattern"),
                "only applies to inputs of type string",
            ));
        } else if let Err(err) = regex::Regex::new(pattern) {
            errors.push(FieldError::invalid(
                format!("{at}.pattern"),
                pattern,
                err.to_string(),
            ));
        }
    }
    if input.sensitive && input.source() == Party::Customer {
        errors.push(FieldError::forbidden(
            format!("{at}.sensitive"),
            "a sensitive value the customer sets is one of the App's secrets (spec.secrets: \
             the install stack asks for it as a NoEcho parameter and keeps it in Secrets \
             Manager), given to the input as {secretRef: SECRET}; a source: customer input \
             is a plain stack parameter",
        ));
    }
    if input.sensitive {
        // Its value never reaches the control plane: nothing to check it against, and a
        // default would be a value in plain form.
        if !matches!(input.type_, InputType::String | InputType::Json) {
            errors.push(FieldError::invalid(
                format!("{at}.type"),
                type_,
                "a sensitive input is a secret's value: string or json",
            ));
        }
        for (field, set) in [
            ("default", input.default.is_some()),
            ("enum", !input.enum_.is_empty()),
            ("pattern", input.pattern.is_some()),
        ] {
            if set {
                errors.push(FieldError::forbidden(
                    format!("{at}.{field}"),
                    "a sensitive input's value never reaches the control plane",
                ));
            }
        }
    } else if let Some(default) = &input.default {
        errors.extend(check_value(input, &format!("{at}.default"), default, &[]));
    }
    errors
}

/// How a type is named in messages: `string`, `number`, `boolean`, `list`, `json`.
fn type_name(type_: InputType) -> &'static str {
    match type_ {
        InputType::String => "string",
        InputType::Number => "number",
        InputType::Boolean => "boolean",
        InputType::List => "list",
        InputType::Json => "json",
    }
}

/// A value as an error shows it: a string as itself, anything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[path = "input_value_tests.rs"]
mod tests;
