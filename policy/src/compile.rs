//! Compiling one Rego v1 module into a reusable [`CompiledPolicy`], and running its
//! `deny`/`warn`/`violation` rules against one input document.

use regorus::Engine;
use serde_json::Value;

/// The rules a policy may declare, conftest's convention. `violation` counts as
/// `deny`.
const RULES: [(&str, Severity); 3] = [
    ("deny", Severity::Deny),
    ("violation", Severity::Deny),
    ("warn", Severity::Warn),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Severity {
    Deny,
    Warn,
}

/// A module that parsed and passed regorus' analysis, ready to evaluate many times.
///
/// Evaluation clones the inner `regorus::Engine` (cheap: modules are shared behind
/// `Arc`s), so one `CompiledPolicy` can be shared between threads (it is `Send` and
/// `Sync`) and evaluated concurrently without locking.
#[derive(Clone)]
pub struct CompiledPolicy {
    engine: Engine,
    package: String,
    rules: Vec<(&'static str, Severity)>,
}

impl std::fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPolicy")
            .field("package", &self.package)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// A module that does not compile, with the 1-based position regorus reported.
///
/// Displays as `policy.rego:3:7: expecting expression`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}:{line}:{column}: {message}")]
pub struct CompileError {
    /// The name the module was compiled under (a file name or a Policy name).
    pub name: String,
    /// 1-based line in the module (1 when the engine reported no position).
    pub line: u32,
    /// 1-based column in the module (1 when the engine reported no position).
    pub column: u32,
    /// What is wrong, without the position.
    pub message: String,
}

/// A rule failed at evaluation time (a builtin error, an unsafe variable, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("evaluating {rule}: {message}")]
pub struct EvaluationError {
    /// The rule path, `data.outpost.example.deny`.
    pub rule: String,
    /// The engine's message, position included.
    pub message: String,
}

/// The messages one evaluation produced, before enforcement is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Messages of `deny` and `violation`.
    pub deny: Vec<String>,
    /// Messages of `warn`.
    pub warn: Vec<String>,
}

/// Parses and analyses one Rego v1 module, which must declare
/// `package outpost.<name>`. `name` is the module's file name in error messages.
pub fn compile(name: &str, module: &str) -> Result<CompiledPolicy, CompileError> {
    let mut engine = Engine::new();
    engine.set_rego_v0(false);
    let package = engine
        .add_policy(name.to_owned(), module.to_owned())
        .map_err(|err| CompileError::from_engine(name, &err))?;
    let package = package
        .strip_prefix("data.")
        .filter(|p| {
            p.strip_prefix("outpost.")
                .is_some_and(|rest| !rest.is_empty())
        })
        .ok_or_else(|| {
            let (line, column) = package_position(module);
            CompileError {
                name: name.to_owned(),
                line,
                column,
                message: format!(
                    "package {} must be outpost.<name>",
                    package.strip_prefix("data.").unwrap_or(&package)
                ),
            }
        })?
        .to_owned();
    // Analysis (rule scheduling, imports, functions) runs when the engine prepares for
    // its first evaluation; do it now so that it happens once, at compile time, and
    // clones start prepared. regorus reports unsafe variables and unknown functions
    // only when a rule body runs: those are evaluation errors.
    engine
        .eval_query("true".to_owned(), false)
        .map_err(|err| CompileError::from_engine(name, &err))?;
    let mut rules = Vec::new();
    for (rule, severity) in RULES {
        let declared = engine
            .has_declared_rule_rooted_at(name, rule)
            .map_err(|err| CompileError::from_engine(name, &err))?;
        if declared {
            rules.push((rule, severity));
        }
    }
    Ok(CompiledPolicy {
        engine,
        package,
        rules,
    })
}

impl CompiledPolicy {
    /// The package the module declares, `outpost.no_database_recreate`.
    pub fn package(&self) -> &str {
        &self.package
    }

    /// Evaluates the declared `deny`, `violation` and `warn` rules against `input`.
    ///
    /// Set elements that are strings are the messages; objects contribute their
    /// `msg` field (conftest's structured form); anything else its JSON text.
    pub fn findings(&self, input: &Value) -> Result<Findings, EvaluationError> {
        let mut engine = self.engine.clone();
        engine.set_input(regorus::Value::from(input.clone()));
        let mut findings = Findings::default();
        for &(rule, severity) in &self.rules {
            let path = format!("data.{}.{rule}", self.package);
            let value = engine
                .eval_rule(path.clone())
                .map_err(|err| EvaluationError {
                    rule: path.clone(),
                    message: err.to_string().trim().to_owned(),
                })?;
            let messages = messages(&value);
            match severity {
                Severity::Deny => findings.deny.extend(messages),
                Severity::Warn => findings.warn.extend(messages),
            }
        }
        Ok(findings)
    }
}

/// The messages in a rule's value: a set (or array) of strings or `{msg}` objects.
/// An undefined rule has none; `deny := true` style booleans give one generic message.
fn messages(value: &regorus::Value) -> Vec<String> {
    let json = match value {
        regorus::Value::Undefined => return Vec::new(),
        value => serde_json::to_value(value).unwrap_or(Value::Null),
    };
    let items = match json {
        Value::Array(items) => items,
        Value::Bool(false) | Value::Null => Vec::new(),
        Value::Bool(true) => vec![Value::String("denied".to_owned())],
        other => vec![other],
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::String(s) => s,
            Value::Object(ref o) if o.get("msg").is_some_and(Value::is_string) => {
                o["msg"].as_str().map(str::to_owned).unwrap_or_default()
            }
            other => other.to_string(),
        })
        .collect()
}

impl CompileError {
    /// Reads the position and message out of regorus' rendered error:
    /// `\n--> name:3:7\n  |\n3 | ...\n  |  ^\nerror: message`.
    fn from_engine(name: &str, err: &impl std::fmt::Display) -> Self {
        let text = err.to_string();
        let position = text.lines().find_map(|l| {
            let location = l.trim().strip_prefix("--> ")?;
            let (rest, column) = location.rsplit_once(':')?;
            let (_, line) = rest.rsplit_once(':')?;
            Some((line.parse().ok()?, column.parse().ok()?))
        });
        let message = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(text.trim())
            .to_owned();
        let (line, column) = position.unwrap_or((1, 1));
        CompileError {
            name: name.to_owned(),
            line,
            column,
            message,
        }
    }
}

/// 1-based line and column of the `package` keyword (1:1 if there is none).
fn package_position(module: &str) -> (u32, u32) {
    module
        .lines()
        .enumerate()
        .find_map(|(i, l)| {
            let column = l.find("package")?;
            l.trim_start().starts_with("package").then(|| {
                (
                    u32::try_from(i + 1).unwrap_or(u32::MAX),
                    u32::try_from(column + 1).unwrap_or(u32::MAX),
                )
            })
        })
        .unwrap_or((1, 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn syntax_error_names_line_and_column() {
        let err = compile(
            "policy.rego",
            "package outpost.x\n\ndeny contains msg if {\n  input.a == = 1\n}\n",
        )
        .unwrap_err();
        assert_eq!((err.line, err.column), (4, 14), "{err}");
        assert_eq!(err.message, "expecting expression");
        assert_eq!(err.to_string(), "policy.rego:4:14: expecting expression");
    }

    #[test]
    fn rego_v0_syntax_is_rejected() {
        let err = compile(
            "p.rego",
            "package outpost.x\n\ndeny[msg] {\n  msg := \"a\"\n}\n",
        )
        .unwrap_err();
        assert_eq!((err.line, err.column), (3, 11), "{err}");
        assert!(err.message.contains("`if`"), "{err}");
    }

    #[test]
    fn package_must_be_under_outpost() {
        let err = compile(
            "p.rego",
            "# a policy\npackage main\n\ndeny contains \"x\" if true\n",
        )
        .unwrap_err();
        assert_eq!((err.line, err.column), (2, 1), "{err}");
        assert_eq!(
            err.to_string(),
            "p.rego:2:1: package main must be outpost.<name>"
        );
        assert!(compile("p.rego", "package outpost\n").is_err());
        let ok = compile("p.rego", "package outpost.a.b\n").unwrap();
        assert_eq!(ok.package(), "outpost.a.b");
    }

    /// regorus 0.14 only reports unsafe variables when the rule body runs, so they
    /// are evaluation errors (which fail closed), not compile errors.
    #[test]
    fn unsafe_variables_surface_at_evaluation() {
        let policy = compile(
            "p.rego",
            "package outpost.x\n\ndeny contains msg if {\n  msg := y\n}\n",
        )
        .unwrap();
        let err = policy.findings(&json!({})).unwrap_err();
        assert!(err.message.contains("p.rego:4:10"), "{err}");
        assert!(err.message.contains("var y is unsafe"), "{err}");
    }

    #[test]
    fn findings_read_deny_violation_and_warn() {
        let policy = compile(
            "p.rego",
            r#"package outpost.x

deny contains "d" if input.d
violation contains {"msg": "v"} if input.v
warn contains sprintf("w %d", [input.n]) if input.n
"#,
        )
        .unwrap();
        let f = policy
            .findings(&json!({"d": true, "v": true, "n": 3}))
            .unwrap();
        assert_eq!(f.deny, vec!["d", "v"]);
        assert_eq!(f.warn, vec!["w 3"]);
        assert_eq!(policy.findings(&json!({})).unwrap(), Findings::default());
    }

    #[test]
    fn runtime_errors_are_evaluation_errors() {
        let policy = compile(
            "p.rego",
            "package outpost.x\n\ndeny contains msg if {\n  msg := 1 / input.z\n}\n",
        )
        .unwrap();
        let err = policy.findings(&json!({"z": 0})).unwrap_err();
        assert_eq!(err.rule, "data.outpost.x.deny");
    }

    #[test]
    fn compiled_policies_are_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CompiledPolicy>();
    }
}
