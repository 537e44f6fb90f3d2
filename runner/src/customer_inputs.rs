//! The customer's inputs (`source: customer`): a Plan's desired state holds
//! `${outpost-input:NAME}` where a template used one ([`outpost_api::customer_input`]);
//! before anything else, the runner fills each in with the customer's value and checks
//! it against the App's declaration (type, `enum`, `pattern`). The values come from the
//! install stack's `Input<Name>` parameters (`DescribeStacks` with the runner's instance
//! role, read again for every Plan when its role is assumed), or from `--customer-inputs
//! FILE` on a runner without `--stack` (without either, each input has its declared
//! default). A missing or invalid value fails the Plan, naming the input and its stack
//! parameter.
//!
//! The values are not secrets (a sensitive customer value is an App secret), so they are
//! not masked: the Plan's diff and the objects the runner reports show them, as the
//! approver needs to see what is applied. The control plane's own copy of the Plan (its
//! `desiredState`) and the Install hold only the placeholder.

use std::collections::BTreeMap;
use std::time::Duration;

use outpost_api::customer_input::{self, CustomerInputError};
use outpost_api::{InputSpec, Party};
use serde_json::Value;

use crate::session::Session;

/// `desired` with every customer input filled in, or why it cannot be.
pub async fn fill(session: &Session, desired: &Value) -> Result<Value, String> {
    let names = customer_input::references(desired);
    if names.is_empty() {
        return Ok(desired.clone());
    }
    let declared = declarations(session).await?;
    let values = match (&session.aws, &session.args.customer_inputs) {
        (Some(account), _) => {
            let stack = match account.stack() {
                Some(stack) => stack,
                None => account.refresh().await.map_err(|e| {
                    format!(
                        "cannot read the install stack {}: {e:#}",
                        account.stack_name
                    )
                })?,
            };
            from_stack(&names, &declared, &stack.parameters)
        }
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read --customer-inputs {}: {e}", file.display()))?;
            let given: BTreeMap<String, Value> = serde_saphyr::from_str(&text).map_err(|e| {
                format!(
                    "--customer-inputs {} is not a map of inputs: {e}",
                    file.display()
                )
            })?;
            from_file(&names, &declared, &given)
        }
        // Neither: every input has its declared default, or the Plan fails naming it.
        (None, None) => from_file(&names, &declared, &BTreeMap::new()),
    }
    .map_err(|e| e.to_string())?;
    Ok(customer_input::substitute(desired, &values))
}

/// The install's App's input declarations, by name, read from the control plane.
async fn declarations(session: &Session) -> Result<BTreeMap<String, InputSpec>, String> {
    let app = tokio::time::timeout(Duration::from_secs(10), session.app())
        .await
        .map_err(|_| "reading the App's input declarations timed out".to_owned())?
        .map_err(|e| format!("cannot read the App's input declarations: {e}"))?;
    Ok(app
        .spec
        .inputs
        .into_iter()
        .map(|input| (input.name.clone(), input))
        .collect())
}

/// The declaration of customer input `name`.
fn declaration<'a>(
    declared: &'a BTreeMap<String, InputSpec>,
    name: &str,
) -> Result<&'a InputSpec, CustomerInputError> {
    declared
        .get(name)
        .filter(|input| input.source() == Party::Customer)
        .ok_or_else(|| CustomerInputError {
            name: name.to_owned(),
            parameter: customer_input::stack_parameter(name),
            reason: "the App declares no customer input of that name".into(),
        })
}

/// The values of `names` from the install stack's `parameters`.
fn from_stack(
    names: &[String],
    declared: &BTreeMap<String, InputSpec>,
    parameters: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Value>, CustomerInputError> {
    let mut values = BTreeMap::new();
    for name in names {
        let input = declaration(declared, name)?;
        let parameter = customer_input::stack_parameter(name);
        let text = parameters
            .get(&parameter)
            .ok_or_else(|| CustomerInputError {
                name: name.clone(),
                parameter: parameter.clone(),
                reason:
                    "the install stack has no such parameter: update it to the current template"
                        .into(),
            })?;
        values.insert(name.clone(), customer_input::from_parameter(input, text)?);
    }
    Ok(values)
}

/// The values of `names` from a `--customer-inputs` file's map `given` (the declared
/// default for one it leaves out).
fn from_file(
    names: &[String],
    declared: &BTreeMap<String, InputSpec>,
    given: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, Value>, CustomerInputError> {
    let mut values = BTreeMap::new();
    for name in names {
        let input = declaration(declared, name)?;
        let value =
            given
                .get(name)
                .or(input.default.as_ref())
                .ok_or_else(|| CustomerInputError {
                    name: name.clone(),
                    parameter: customer_input::stack_parameter(name),
                    reason:
                        "not set by the customer (--customer-inputs, on a runner without --stack), \
                         and the input has no default"
                            .into(),
                })?;
        customer_input::check(input, value)?;
        values.insert(name.clone(), value.clone());
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> BTreeMap<String, InputSpec> {
        let inputs: Vec<InputSpec> = serde_json::from_value(json!([
            {"name": "domain", "type": "string", "source": "customer", "pattern": "^[a-z.]+$"},
            {"name": "count", "type": "number", "source": "customer", "default": 3},
            {"name": "tag", "type": "string"},
        ]))
        .unwrap();
        inputs.into_iter().map(|i| (i.name.clone(), i)).collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn stack_parameters_are_read_and_checked() {
        let parameters = BTreeMap::from([
            ("InputDomain".to_owned(), "shop.example".to_owned()),
            ("InputCount".to_owned(), "5".to_owned()),
        ]);
        let values = from_stack(&names(&["count", "domain"]), &declared(), &parameters).unwrap();
        assert_eq!(values["domain"], json!("shop.example"));
        assert_eq!(values["count"], json!(5));

        let bad = BTreeMap::from([("InputDomain".to_owned(), "Shop!".to_owned())]);
        let err = from_stack(&names(&["domain"]), &declared(), &bad).unwrap_err();
        assert!(err.to_string().starts_with("customer input domain (install stack parameter InputDomain): Invalid value: \"Shop!\": must match"), "{err}");
        let err = from_stack(&names(&["count"]), &declared(), &bad).unwrap_err();
        assert!(err.reason.contains("no such parameter"), "{err}");
        // A vendor input, or an undeclared one, is not the customer's to fill in.
        for name in ["tag", "nope"] {
            let err = from_stack(&names(&[name]), &declared(), &parameters).unwrap_err();
            assert!(err.reason.contains("declares no customer input"), "{err}");
        }
    }

    #[test]
    fn a_file_gives_typed_values_or_the_default() {
        let given = BTreeMap::from([("domain".to_owned(), json!("shop.example"))]);
        let values = from_file(&names(&["count", "domain"]), &declared(), &given).unwrap();
        assert_eq!(values["count"], json!(3));
        let wrong = BTreeMap::from([("count".to_owned(), json!("five"))]);
        let err = from_file(&names(&["count"]), &declared(), &wrong).unwrap_err();
        assert!(err.reason.contains("must be of type number"), "{err}");
        let err = from_file(&names(&["domain"]), &declared(), &BTreeMap::new()).unwrap_err();
        assert!(err.reason.contains("no default"), "{err}");
    }
}
