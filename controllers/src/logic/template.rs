//! The one template renderer: minijinja with strict undefined, over the state
//! of one install.
//!
//! A template sees:
//!
//! | variable | value |
//! |---|---|
//! | `install.id` | the Install's `metadata.uid` (stable, unique; used in role names) |
//! | `install.name`, `install.namespace` | the Install's name and namespace |
//! | `install.cloud.provider`, `.accountId`, `.region` | the Install's cloud account |
//! | `install.inputs.<name>`, `inputs.<name>` | the install's value of a declared input, else its default; a sensitive input's `{secretRef: S}` renders as `secrets.S` does; a `source: customer` input renders as the placeholder `${outpost-input:<name>}` the runner fills in from the install stack ([`outpost_api::customer_input`]) |
//! | `app.name`, `app.release` | the App's name and current release hash |
//! | `components.<name>.outputs.<output>` | outputs of a deployed component |
//! | `sandbox.outputs.<output>` | outputs of the provisioned sandbox |
//! | `secrets.<name>` | a *reference* `${outpost-secret:<name>}`, never a value |
//!
//! Anything else, and any of the above that has no value, is an error
//! (`UndefinedBehavior::Strict`), so a typo never renders as an empty string.
//!
//! # Secrets
//! Secret values never enter the control plane. [`TemplateContext`] has no way
//! to hold one: `secrets.<name>` renders to [`secret_reference`]`(name)`, which
//! the runner replaces with the value from the customer's secret store at
//! execution time ([`secret_references`] finds them). So that an input or an
//! output cannot forge a reference the runner would resolve, a context whose
//! inputs or outputs contain [`SECRET_REFERENCE_PREFIX`] is refused.
//!
//! # Component names with dashes
//! Component names are DNS labels (`web-image`), which Jinja would read as a
//! subtraction (`components.web - image`). Before compiling, the lexer-level
//! rewrite [`dash_names`] turns `components.web-image` into
//! `components.web_image`, and the context holds components under that spelling.
//! DNS labels have no `_`, so the mapping is one-to-one and both spellings work.

use minijinja::machinery::{Token, WhitespaceConfig, tokenize};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use outpost_api::customer_input;
use outpost_api::input_value::secret_ref;
use outpost_api::{App, Install, Party};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::OnceLock;

pub use crate::logic::reference::Reference;

/// What a `secrets.<name>` reference renders to starts with this; the rest is
/// `<name>}`.
pub const SECRET_REFERENCE_PREFIX: &str = "${outpost-secret:";

/// The text `secrets.<name>` renders to: `${outpost-secret:<name>}`.
///
/// ```
/// assert_eq!(
///     outpost_controllers::template::secret_reference("db_password"),
///     "${outpost-secret:db_password}"
/// );
/// ```
pub fn secret_reference(name: &str) -> String {
    format!("{SECRET_REFERENCE_PREFIX}{name}}}")
}

/// Names of the secrets referenced in rendered text, in order of appearance
/// (with repeats): what the runner must resolve before applying it.
///
/// ```
/// use outpost_controllers::template::secret_references;
/// assert_eq!(secret_references("a=${outpost-secret:x} b=${outpost-secret:y_2}"), ["x", "y_2"]);
/// ```
pub fn secret_references(rendered: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = rendered;
    while let Some(start) = rest.find(SECRET_REFERENCE_PREFIX) {
        rest = &rest[start + SECRET_REFERENCE_PREFIX.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if end > 0 && rest[end..].starts_with('}') {
            names.push(&rest[..end]);
        }
    }
    names
}

/// Why a template could not be parsed or rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template is not valid Jinja.
    #[error("invalid template {template:?}")]
    Syntax {
        /// The template text.
        template: String,
        /// What minijinja reported.
        #[source]
        source: minijinja::Error,
    },
    /// The template refers to something the install has no value for.
    #[error("template {template:?} refers to {reference}, which has no value")]
    Undefined {
        /// The template text.
        template: String,
        /// The first reference without a value.
        reference: Reference,
        /// What minijinja reported.
        #[source]
        source: minijinja::Error,
    },
    /// Rendering failed for another reason (a filter error, ...).
    #[error("rendering template {template:?} failed")]
    Render {
        /// The template text.
        template: String,
        /// What minijinja reported.
        #[source]
        source: minijinja::Error,
    },
    /// An input or output value contains a secret reference.
    #[error("{at} contains {SECRET_REFERENCE_PREFIX:?}, which only secrets.<name> may produce")]
    ForgedSecretReference {
        /// Where the value is, e.g. `inputs.domain`.
        at: String,
    },
    /// The Install has not been stored yet, so it has no `install.id`.
    #[error("install {install:?} has no metadata.uid, which install.id renders to")]
    MissingUid {
        /// The Install's name.
        install: String,
    },
}

/// Outputs an install's entities reported, keyed by output name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstallOutputs {
    /// Outputs of the sandbox.
    pub sandbox: BTreeMap<String, Value>,
    /// Outputs of each deployed component, by component name.
    pub components: BTreeMap<String, BTreeMap<String, Value>>,
}

/// What templates of one install render against. Built only from an App, an
/// Install and outputs, so it cannot hold a secret value.
#[derive(Clone, Debug)]
pub struct TemplateContext {
    value: Value,
    /// `value` as the renderer holds it, converted once rather than per template.
    rendered_from: minijinja::Value,
}

impl PartialEq for TemplateContext {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl TemplateContext {
    /// The context of `install` of `app`, with the outputs reported so far.
    /// Inputs are the install's values of the App's declared inputs, falling
    /// back to their defaults; undeclared install inputs are left out.
    pub fn new(
        app: &App,
        install: &Install,
        outputs: &InstallOutputs,
    ) -> Result<Self, TemplateError> {
        let install_name = install.metadata.name.clone().unwrap_or_default();
        let id = install
            .metadata
            .uid
            .clone()
            .ok_or_else(|| TemplateError::MissingUid {
                install: install_name.clone(),
            })?;
        let inputs: Map<String, Value> = app
            .spec
            .inputs
            .iter()
            .filter_map(|input| {
                let value = install
                    .spec
                    .inputs
                    .get(&input.name)
                    .or(input.default.as_ref())?;
                Some((input.name.clone(), value.clone()))
            })
            .collect();
        let cloud = &install.spec.cloud;
        let mut install_value = json!({
            "id": id,
            "name": install_name,
            "inputs": inputs,
            "cloud": {
                "provider": cloud.provider,
                "accountId": cloud.account_id,
                "region": cloud.region,
            },
        });
        if let Some(namespace) = &install.metadata.namespace {
            install_value["namespace"] = json!(namespace);
        }
        let mut app_value = json!({ "name": app.metadata.name.clone().unwrap_or_default() });
        if let Some(release) = app.status.as_ref().and_then(|s| s.release.as_ref()) {
            app_value["release"] = json!(release);
        }
        let components: Map<String, Value> = outputs
            .components
            .iter()
            .map(|(name, outputs)| (context_key(name), json!({ "outputs": outputs })))
            .collect();
        let value = json!({
            "install": install_value,
            "inputs": inputs,
            "app": app_value,
            "components": components,
            "sandbox": { "outputs": outputs.sandbox },
        });
        refuse_secret_references("", &value)?;
        let mut value = value;
        // A sensitive input is given as `{secretRef: SECRET}`: it renders as that
        // secret's reference, which only the runner resolves.
        for input in app.spec.inputs.iter().filter(|i| i.sensitive) {
            let secret = install.spec.inputs.get(&input.name).and_then(secret_ref);
            if let Some(secret) = secret {
                let reference = Value::String(secret_reference(secret));
                value["inputs"][&input.name] = reference.clone();
                value["install"]["inputs"][&input.name] = reference;
            }
        }
        // A customer input's value is in the customer's install stack, never here: it
        // renders as a placeholder only the runner fills in (whatever an Install stored
        // before admission refused it).
        for input in app
            .spec
            .inputs
            .iter()
            .filter(|i| i.source() == Party::Customer)
        {
            let placeholder = Value::String(customer_input::placeholder(&input.name));
            value["inputs"][&input.name] = placeholder.clone();
            value["install"]["inputs"][&input.name] = placeholder;
        }
        value["secrets"] = app
            .spec
            .secrets
            .iter()
            .map(|s| (s.name.clone(), Value::String(secret_reference(&s.name))))
            .collect::<Map<_, _>>()
            .into();
        let rendered_from = minijinja::Value::from_serialize(&value);
        Ok(Self {
            value,
            rendered_from,
        })
    }

    /// Renders one template.
    ///
    /// # Errors
    /// [`TemplateError::Syntax`] for invalid Jinja, [`TemplateError::Undefined`]
    /// naming the first reference without a value, [`TemplateError::Render`]
    /// otherwise.
    pub fn render_str(&self, template: &str) -> Result<String, TemplateError> {
        if !template.contains('{') {
            // No tag, expression or comment: Jinja renders the text as it is.
            return Ok(template.to_owned());
        }
        let source = dash_names(template);
        let compiled =
            environment()
                .template_from_str(&source)
                .map_err(|source| TemplateError::Syntax {
                    template: template.to_owned(),
                    source,
                })?;
        compiled.render(&self.rendered_from).map_err(|source| {
            let undefined = (source.kind() == ErrorKind::UndefinedError)
                .then(|| self.first_undefined(&compiled))
                .flatten();
            match undefined {
                Some(reference) => TemplateError::Undefined {
                    template: template.to_owned(),
                    reference,
                    source,
                },
                None => TemplateError::Render {
                    template: template.to_owned(),
                    source,
                },
            }
        })
    }

    /// `value` with every string rendered as a template, recursively through
    /// arrays and objects. Object keys are not templates and stay as they are;
    /// numbers, booleans and nulls are copied.
    pub fn render_value(&self, value: &Value) -> Result<Value, TemplateError> {
        Ok(match value {
            Value::String(text) => Value::String(self.render_str(text)?),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.render_value(item))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.render_value(v)?)))
                    .collect::<Result<_, TemplateError>>()?,
            ),
            scalar => scalar.clone(),
        })
    }

    /// The first reference of `compiled` whose path has no value here.
    fn first_undefined(&self, compiled: &minijinja::Template<'_, '_>) -> Option<Reference> {
        let mut paths: Vec<String> = compiled.undeclared_variables(true).into_iter().collect();
        paths.sort();
        paths
            .into_iter()
            .find(|path| {
                path.split('.')
                    .try_fold(&self.value, |at, part| at.get(part))
                    .is_none()
            })
            .map(|path| Reference::from_path(&path))
    }
}

/// What `template` refers to, sorted and without repeats: for validation and
/// for the component dependency graph. Functions of the renderer (`range`,
/// `dict`, ...) and variables the template sets itself are not references.
///
/// ```
/// use outpost_controllers::template::{references, Reference};
/// let refs = references("{{ components.web-image.outputs.image }}:{{ inputs.tag }}").unwrap();
/// assert_eq!(refs, [
///     Reference::Input { name: "tag".into() },
///     Reference::Component { name: "web-image".into(), output: Some("image".into()) },
/// ]);
/// ```
pub fn references(template: &str) -> Result<Vec<Reference>, TemplateError> {
    let source = dash_names(template);
    let env = environment();
    let compiled = env
        .template_from_str(&source)
        .map_err(|source| TemplateError::Syntax {
            template: template.to_owned(),
            source,
        })?;
    let mut found: Vec<Reference> = compiled
        .undeclared_variables(true)
        .into_iter()
        .filter(|path| {
            let root = path.split('.').next().unwrap_or_default();
            env.globals().all(|(name, _)| name != root)
        })
        .map(|path| Reference::from_path(&path))
        .collect();
    found.extend(
        secret_references(template)
            .into_iter()
            .map(|name| Reference::Secret { name: name.into() }),
    );
    found.sort();
    found.dedup();
    Ok(found)
}

/// Every string in `value` with its path (`manifest.content`,
/// `helm.values["auth.enabled"]`, `steps[0].env.DB`): the templates of a spec.
pub fn templates_in(value: &Value) -> Vec<(String, &str)> {
    fn walk<'a>(at: String, value: &'a Value, out: &mut Vec<(String, &'a str)>) {
        match value {
            Value::String(text) => out.push((at, text)),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(format!("{at}[{i}]"), item, out);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let plain = key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    let next = match (at.is_empty(), plain) {
                        (true, true) => key.clone(),
                        (false, true) => format!("{at}.{key}"),
                        (_, false) => format!("{at}[{key:?}]"),
                    };
                    walk(next, item, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), value, &mut out);
    out
}

/// The key a component's outputs have in the context: its name with `-`
/// replaced by `_` (see the module docs).
fn context_key(component: &str) -> String {
    component.replace('-', "_")
}

/// The renderer every template goes through: strict undefined, trailing
/// newlines kept (manifests end with one), no auto-escaping.
fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        env
    })
}

/// `template` with `components.<dashed-name>` rewritten to
/// `components.<dashed_name>` inside expressions and statements; text,
/// comments and string literals are untouched. A template the lexer rejects is
/// returned as is, so compiling it reports the error.
pub fn dash_names(template: &str) -> Cow<'_, str> {
    // `SyntaxConfig` is a unit struct unless another crate enables minijinja's
    // `custom_syntax`; `default()` compiles either way.
    #[allow(clippy::default_constructed_unit_structs)]
    let tokens: Vec<_> = match tokenize(
        template,
        false,
        SyntaxConfig::default(),
        WhitespaceConfig::default(),
    )
    .collect::<Result<_, _>>()
    {
        Ok(tokens) => tokens,
        Err(_) => return Cow::Borrowed(template),
    };
    let mut edits = Vec::new();
    for (i, window) in tokens.windows(3).enumerate() {
        let [
            (Token::Ident("components"), _),
            (Token::Dot, _),
            (_, name_span),
        ] = window
        else {
            continue;
        };
        if i > 0 && matches!(tokens[i - 1].0, Token::Dot) {
            continue;
        }
        let start = name_span.start_offset as usize;
        let len = template[start..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(template.len() - start);
        let name = template[start..start + len].trim_end_matches('-');
        if name.contains('-') {
            edits.push((start, name.len()));
        }
    }
    if edits.is_empty() {
        return Cow::Borrowed(template);
    }
    let mut out = template.to_owned();
    for (start, len) in edits {
        // Same length, so earlier edits do not move later offsets.
        let renamed = context_key(&template[start..start + len]);
        out.replace_range(start..start + len, &renamed);
    }
    Cow::Owned(out)
}

/// Fails if any string in `value` contains [`SECRET_REFERENCE_PREFIX`].
fn refuse_secret_references(at: &str, value: &Value) -> Result<(), TemplateError> {
    let child = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    match value {
        Value::String(text) if text.contains(SECRET_REFERENCE_PREFIX) => {
            Err(TemplateError::ForgedSecretReference { at: at.to_owned() })
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| refuse_secret_references(&format!("{at}[{i}]"), item)),
        Value::Object(map) => map
            .iter()
            .try_for_each(|(key, item)| refuse_secret_references(&child(key), item)),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "template_tests.rs"]
pub(crate) mod tests;
