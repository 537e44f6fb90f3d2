//! A terraform module's static configuration, read from its files before `terraform
//! init`: which providers it needs, which modules it calls, which resources it declares
//! and what its files hold. Nothing here runs terraform or any provider; the customer's
//! policies see [`Configuration::document`] (input `static`) and the provider allow-list
//! is checked against [`Configuration::providers`] before any vendor code runs.
//!
//! What is read, as terraform reads it:
//! * every `*.tf` (native syntax, parsed with `hcl-edit`) and `*.tf.json` file directly in
//!   a module's directory;
//! * providers: each `required_providers` entry, and every provider a `provider` block,
//!   a resource, data source or ephemeral resource (also those nested in `check`
//!   blocks) or a module call's `providers` map uses, by local name: the local name's
//!   `required_providers` source, else terraform's implied `hashicorp/<name>` (and
//!   `terraform` is the built-in `terraform.io/builtin/terraform`);
//! * module calls: a local source (`./`, `../`) is read the same way when it stays
//!   inside the root module's directory. Any other source is refused: `terraform init`
//!   would download code whose providers nobody checked, and the runner does not fetch
//!   modules.
//!
//! A file that does not parse is an error: what cannot be read cannot be checked.

use hcl_edit::expr::{Expression, ObjectKey};
use hcl_edit::structure::{Attribute, Body};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Terraform's built-in provider (`terraform_data`, `terraform_remote_state`): part of
/// the terraform binary, never installed.
pub const BUILTIN: &str = "terraform.io/builtin/terraform";

/// How deep module calls are followed.
const MAX_DEPTH: usize = 16;

/// Bytes of one file's content the `static` input carries; larger files are listed
/// with `content: null`.
const CONTENT_LIMIT: u64 = 256 * 1024;

/// Why a module's configuration cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigurationError {
    /// A file cannot be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file does not parse.
    #[error("{path} does not parse: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A provider source address is not one.
    #[error("{module}: provider {local:?} has the invalid source address {source_address:?}")]
    InvalidSource {
        /// The module's address (`root`, `module.vpc`).
        module: String,
        /// The provider's local name.
        local: String,
        /// The address as written.
        source_address: String,
    },
    /// A module call's source is not a local directory inside the module.
    #[error(
        "{module}: module {name:?} has source {source_address:?}, which the runner cannot check \
         before `terraform init`: only local sources (`./`, `../`) inside the module's \
         directory are allowed (the runner does not fetch modules)"
    )]
    ModuleSource {
        /// The calling module's address.
        module: String,
        /// The module call's name.
        name: String,
        /// Its source.
        source_address: String,
    },
}

/// A provider the configuration needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUse {
    /// The provider's source address, normalised (`registry.terraform.io/hashicorp/aws`).
    pub source: String,
    /// The modules using it (`root`, `module.vpc`).
    pub modules: BTreeSet<String>,
    /// The local names it is used by.
    pub local_names: BTreeSet<String>,
    /// Version constraints, as written.
    pub versions: BTreeSet<String>,
}

/// What a module's files declare.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Configuration {
    /// The providers, by source address.
    pub providers: BTreeMap<String, ProviderUse>,
    /// Module calls: `{module, name, source, path}` (`path`: the called directory,
    /// relative to the root module).
    pub modules: Vec<Value>,
    /// Resources: `{module, mode, type, name, provider}`.
    pub resources: Vec<Value>,
    /// Files of the root module's directory (recursively, without terraform's own
    /// `.terraform` directory, lock file and state): `{path, content}`.
    pub files: Vec<Value>,
}

impl Configuration {
    /// Reads the module in `root` and the local modules it calls.
    ///
    /// # Errors
    /// When a file cannot be read or parsed, a provider source is invalid, or a module
    /// call's source is not local to `root`.
    pub fn read(root: &Path) -> Result<Self, ConfigurationError> {
        let mut config = Configuration::default();
        let canonical = std::fs::canonicalize(root).map_err(|source| ConfigurationError::Io {
            path: root.to_owned(),
            source,
        })?;
        config.read_module(&canonical, &canonical, "root", 0)?;
        config.files = files(&canonical)?;
        Ok(config)
    }

    /// The non-built-in providers' source addresses.
    pub fn installed_providers(&self) -> impl Iterator<Item = &str> {
        self.providers
            .keys()
            .map(String::as_str)
            .filter(|s| *s != BUILTIN)
    }

    /// The `static` policy input, with `allowed(source)` telling whether the runner's
    /// allow-list lets a provider be installed.
    pub fn document(&self, allowed: impl Fn(&str) -> bool) -> Value {
        let providers: Vec<Value> = self
            .providers
            .values()
            .map(|p| {
                json!({
                    "source": p.source,
                    "builtin": p.source == BUILTIN,
                    "allowed": p.source == BUILTIN || allowed(&p.source),
                    "modules": p.modules,
                    "localNames": p.local_names,
                    "versions": p.versions,
                })
            })
            .collect();
        json!({
            "providers": providers,
            "modules": self.modules,
            "resources": self.resources,
            "files": self.files,
        })
    }

    fn read_module(
        &mut self,
        root: &Path,
        dir: &Path,
        address: &str,
        depth: usize,
    ) -> Result<(), ConfigurationError> {
        let mut facts = ModuleFacts::default();
        let entries = std::fs::read_dir(dir).map_err(|source| ConfigurationError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        paths.sort();
        for path in paths {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let native = name.ends_with(".tf");
            if !native && !name.ends_with(".tf.json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigurationError::Io {
                path: path.clone(),
                source,
            })?;
            let parse = |message: String| ConfigurationError::Parse {
                path: path.clone(),
                message,
            };
            if native {
                let body = hcl_edit::parser::parse_body(&text).map_err(|e| parse(e.to_string()))?;
                facts.native(&body);
            } else {
                let value: Value = serde_json::from_str(&text).map_err(|e| parse(e.to_string()))?;
                facts.json(&value);
            }
        }
        self.record(address, &facts)?;
        for (name, source) in &facts.calls {
            let outside = || ConfigurationError::ModuleSource {
                module: address.to_owned(),
                name: name.clone(),
                source_address: source.clone(),
            };
            if !(source.starts_with("./") || source.starts_with("../")) || depth >= MAX_DEPTH {
                return Err(outside());
            }
            let called = std::fs::canonicalize(dir.join(source)).map_err(|_| outside())?;
            if !called.starts_with(root) || !called.is_dir() {
                return Err(outside());
            }
            let relative = called.strip_prefix(root).unwrap_or(&called);
            self.modules.push(json!({
                "module": address,
                "name": name,
                "source": source,
                "path": relative.to_string_lossy(),
            }));
            let child = if address == "root" {
                format!("module.{name}")
            } else {
                format!("{address}.module.{name}")
            };
            self.read_module(root, &called, &child, depth + 1)?;
        }
        Ok(())
    }

    /// Resolves a module's local names to sources and records its providers and
    /// resources.
    fn record(&mut self, module: &str, facts: &ModuleFacts) -> Result<(), ConfigurationError> {
        let mut sources: BTreeMap<&str, String> = BTreeMap::new();
        for (local, required) in &facts.required {
            let source = match &required.source {
                Some(written) => {
                    normalise(written).ok_or_else(|| ConfigurationError::InvalidSource {
                        module: module.to_owned(),
                        local: local.clone(),
                        source_address: written.clone(),
                    })?
                }
                None => implied(local),
            };
            sources.insert(local, source);
        }
        let source_of = |local: &str| {
            sources
                .get(local)
                .cloned()
                .unwrap_or_else(|| implied(local))
        };
        let mut used: Vec<(String, Option<&str>)> = facts
            .required
            .iter()
            .map(|(local, r)| (local.clone(), r.version.as_deref()))
            .collect();
        used.extend(facts.used.iter().map(|local| (local.clone(), None)));
        for (local, version) in used {
            let source = source_of(&local);
            let entry = self
                .providers
                .entry(source.clone())
                .or_insert_with(|| ProviderUse {
                    source,
                    modules: BTreeSet::new(),
                    local_names: BTreeSet::new(),
                    versions: BTreeSet::new(),
                });
            entry.modules.insert(module.to_owned());
            entry.local_names.insert(local);
            entry.versions.extend(version.map(str::to_owned));
        }
        for resource in &facts.resources {
            self.resources.push(json!({
                "module": module,
                "mode": resource.mode,
                "type": resource.type_,
                "name": resource.name,
                "provider": source_of(&resource.provider),
            }));
        }
        Ok(())
    }
}

/// A `required_providers` entry.
#[derive(Debug, Default)]
struct Required {
    source: Option<String>,
    version: Option<String>,
}

/// A resource, data source or ephemeral resource, with the local name of its provider.
#[derive(Debug)]
struct Resource {
    mode: &'static str,
    type_: String,
    name: String,
    provider: String,
}

/// What one module's files declare, before local names are resolved.
#[derive(Debug, Default)]
struct ModuleFacts {
    required: BTreeMap<String, Required>,
    /// Local names of providers used (provider blocks, resources, module calls).
    used: BTreeSet<String>,
    resources: Vec<Resource>,
    /// Module calls: name and source.
    calls: Vec<(String, String)>,
}

impl ModuleFacts {
    fn resource(&mut self, mode: &'static str, type_: &str, name: &str, provider: Option<String>) {
        let provider = provider.unwrap_or_else(|| implied_local_name(type_).to_owned());
        self.used.insert(provider.clone());
        self.resources.push(Resource {
            mode,
            type_: type_.to_owned(),
            name: name.to_owned(),
            provider,
        });
    }

    /// One `required_providers` entry in the native syntax: `NAME = "VERSION"` or
    /// `NAME = { source = "...", version = "..." }`.
    fn required_native(&mut self, attribute: &Attribute) {
        let entry = self
            .required
            .entry(attribute.key.as_str().to_owned())
            .or_default();
        match &attribute.value {
            Expression::String(version) => entry.version = Some(version.as_str().to_owned()),
            Expression::Object(object) => {
                for (key, value) in object {
                    let key = match key {
                        ObjectKey::Ident(i) => i.as_str().to_owned(),
                        ObjectKey::Expression(e) => literal(e).unwrap_or_default(),
                    };
                    match key.as_str() {
                        "source" => entry.source = literal(value.expr()),
                        "version" => entry.version = literal(value.expr()),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// The native syntax.
    fn native(&mut self, body: &Body) {
        for block in body.blocks() {
            let labels: Vec<&str> = block.labels.iter().map(|l| l.as_str()).collect();
            match (block.ident.as_str(), labels.as_slice()) {
                ("terraform", _) => {
                    let blocks = block.body.blocks();
                    for required in blocks.filter(|b| b.ident.as_str() == "required_providers") {
                        for attribute in required.body.attributes() {
                            self.required_native(attribute);
                        }
                    }
                }
                ("provider", [local, ..]) => {
                    self.used.insert((*local).to_owned());
                }
                (kind @ ("resource" | "data" | "ephemeral"), [type_, name, ..]) => {
                    let provider = block
                        .body
                        .get_attribute("provider")
                        .and_then(|a| reference_root(&a.value));
                    self.resource(mode(kind), type_, name, provider);
                }
                ("check", _) => self.native(&block.body),
                ("module", [name, ..]) => {
                    let source = block
                        .body
                        .get_attribute("source")
                        .and_then(|a| literal(&a.value))
                        .unwrap_or_default();
                    self.calls.push(((*name).to_owned(), source));
                    if let Some(Expression::Object(map)) =
                        block.body.get_attribute("providers").map(|a| &a.value)
                    {
                        let roots = map.iter().filter_map(|(_, v)| reference_root(v.expr()));
                        self.used.extend(roots);
                    }
                }
                _ => {}
            }
        }
    }

    /// The JSON syntax (`*.tf.json`).
    fn json(&mut self, document: &Value) {
        let Some(top) = document.as_object() else {
            return;
        };
        for (kind, value) in top {
            for item in each(value) {
                match kind.as_str() {
                    "terraform" => {
                        for required in each(&item["required_providers"]) {
                            for (local, spec) in required.as_object().into_iter().flatten() {
                                let entry = self.required.entry(local.clone()).or_default();
                                match spec {
                                    Value::String(version) => entry.version = Some(version.clone()),
                                    Value::Object(spec) => {
                                        entry.source = spec
                                            .get("source")
                                            .and_then(Value::as_str)
                                            .map(str::to_owned);
                                        entry.version = spec
                                            .get("version")
                                            .and_then(Value::as_str)
                                            .map(str::to_owned);
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                    "provider" => self.used.extend(keys(item)),
                    "resource" | "data" | "ephemeral" => {
                        for (type_, named) in item.as_object().into_iter().flatten() {
                            for named in each(named) {
                                for (name, body) in named.as_object().into_iter().flatten() {
                                    let provider = each(body)
                                        .iter()
                                        .find_map(|b| b.get("provider").and_then(Value::as_str))
                                        .map(|p| p.split('.').next().unwrap_or(p).to_owned());
                                    self.resource(mode(kind), type_, name, provider);
                                }
                            }
                        }
                    }
                    "check" => {
                        for (_, body) in item.as_object().into_iter().flatten() {
                            for body in each(body) {
                                let mut data = Map::new();
                                data.insert("data".into(), body["data"].clone());
                                self.json(&Value::Object(data));
                            }
                        }
                    }
                    "module" => {
                        for (name, body) in item.as_object().into_iter().flatten() {
                            for body in each(body) {
                                let source = body["source"].as_str().unwrap_or_default();
                                self.calls.push((name.clone(), source.to_owned()));
                                for provider in body["providers"]
                                    .as_object()
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|(_, p)| p.as_str())
                                {
                                    let local = provider.split('.').next().unwrap_or(provider);
                                    self.used.insert(local.to_owned());
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A block's mode in resource addresses.
fn mode(kind: &str) -> &'static str {
    match kind {
        "data" => "data",
        "ephemeral" => "ephemeral",
        _ => "managed",
    }
}

/// A JSON value as a list of its items: an array's elements, else itself (the JSON
/// syntax allows both for blocks); nothing for `null`.
fn each(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(items) => items.iter().collect(),
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// A literal string expression's value.
fn literal(expression: &Expression) -> Option<String> {
    match expression {
        Expression::String(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// The root name of a reference (`aws` of `aws.west`).
fn reference_root(expression: &Expression) -> Option<String> {
    match expression {
        Expression::Variable(v) => Some(v.as_str().to_owned()),
        Expression::Traversal(t) => reference_root(&t.expr),
        _ => None,
    }
}

/// The local name terraform implies for a resource type: up to the first `_`.
fn implied_local_name(type_: &str) -> &str {
    type_.split('_').next().unwrap_or(type_)
}

/// The source terraform implies for a local name nobody declared.
fn implied(local: &str) -> String {
    if local == "terraform" {
        BUILTIN.to_owned()
    } else {
        format!("registry.terraform.io/hashicorp/{}", local.to_lowercase())
    }
}

/// A provider source address in full, lower case: `aws` and `hashicorp/aws` are
/// `registry.terraform.io/hashicorp/aws`; `example.com/acme/db` stays. `None` when it is
/// not an address.
pub fn normalise(source: &str) -> Option<String> {
    let source = source.trim().to_lowercase();
    let parts: Vec<&str> = source.split('/').collect();
    let valid = |part: &&str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    };
    if !parts.iter().all(valid) {
        return None;
    }
    match parts.as_slice() {
        [type_] => Some(format!("registry.terraform.io/hashicorp/{type_}")),
        [namespace, type_] => Some(format!("registry.terraform.io/{namespace}/{type_}")),
        [_, _, _] => Some(source.clone()),
        _ => None,
    }
}

/// The files of the module's directory, recursively, without what terraform keeps.
fn files(root: &Path) -> Result<Vec<Value>, ConfigurationError> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let io = |source| ConfigurationError::Io {
            path: dir.clone(),
            source,
        };
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(io)?
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if super::workspace::KEPT.contains(&&*name) {
                continue;
            }
            let meta =
                std::fs::symlink_metadata(&path).map_err(|source| ConfigurationError::Io {
                    path: path.clone(),
                    source,
                })?;
            if meta.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let content = (meta.is_file() && meta.len() <= CONTENT_LIMIT)
                .then(|| std::fs::read_to_string(&path).ok())
                .flatten();
            out.push(json!({"path": relative.to_string_lossy(), "content": content}));
        }
    }
    out.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    Ok(out)
}

#[cfg(test)]
#[path = "configuration_tests.rs"]
mod tests;
