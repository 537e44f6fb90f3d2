//! `outpost policy test`: evaluates a directory of policies against one input file,
//! like `conftest test`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_api::{Enforcement, Policy, PolicyInput};
use outpost_policy::{CompileError, CompiledPolicy, PolicyMeta, evaluate, input::documents};
use serde_json::Value;

/// Policy verbs.
#[derive(clap::Subcommand)]
pub enum PolicyCommand {
    /// Evaluate every `*.rego` file and every `Policy` in `*.yaml` files of DIR against
    /// INPUT. Prints `FAIL`/`WARN` lines and a summary where each (policy, document)
    /// pair is one test that failed, warned or passed; exits 1 on any deny, 2 when a
    /// module does not compile or a file cannot be read.
    Test {
        /// Directory of `*.rego` modules and `*.yaml` files holding `Policy` objects.
        dir: PathBuf,
        /// The input document, JSON or YAML (several YAML documents are tested one by one).
        input: PathBuf,
        /// What the input is; only policies declaring this kind are evaluated
        /// (a bare `*.rego` file applies to every kind).
        #[arg(long, value_parser = parse_input_kind)]
        input_kind: PolicyInput,
    },
}

fn parse_input_kind(s: &str) -> Result<PolicyInput, String> {
    serde_json::from_value(Value::String(s.to_owned()))
        .map_err(|_| "one of kubernetes, terraform, images, plan, drift, static".to_owned())
}

/// Runs a policy verb; the exit code is the verb's answer.
pub fn run(command: PolicyCommand) -> ExitCode {
    let PolicyCommand::Test {
        dir,
        input,
        input_kind,
    } = command;
    match test(&dir, &input, input_kind) {
        Ok(report) => {
            print!("{}", report.text);
            if report.failures > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// What `policy test` prints, and how many messages denied.
struct Report {
    text: String,
    failures: usize,
}

fn test(dir: &Path, input_file: &Path, kind: PolicyInput) -> anyhow::Result<Report> {
    let policies = load(dir, kind)?;
    let pairs: Vec<(&PolicyMeta, &CompiledPolicy)> = policies.iter().map(|(m, c)| (m, c)).collect();
    let input = read_input(input_file)?;
    let file = input_file.display();
    let mut text = String::new();
    let (mut tests, mut passed, mut warned, mut failed, mut failures) = (0, 0, 0, 0, 0);
    for document in input.iter().flat_map(|doc| documents(kind, doc)) {
        for verdict in evaluate(&pairs, kind, &document) {
            tests += 1;
            for message in &verdict.warnings {
                writeln!(text, "WARN - {file} - {} - {message}", verdict.policy)?;
            }
            for message in &verdict.denials {
                writeln!(text, "FAIL - {file} - {} - {message}", verdict.policy)?;
            }
            failures += verdict.denials.len();
            match (verdict.denied(), verdict.warnings.is_empty()) {
                (true, _) => failed += 1,
                (false, true) => passed += 1,
                (false, false) => warned += 1,
            }
        }
    }
    writeln!(
        text,
        "\n{tests} tests, {passed} passed, {warned} warnings, {failed} failures"
    )?;
    Ok(Report { text, failures })
}

/// Every policy in `dir`, compiled: `*.rego` files (named for the file, applying to
/// `kind`, enforcement `deny`) and `Policy` objects in `*.yaml`/`*.yml` files.
fn load(dir: &Path, kind: PolicyInput) -> anyhow::Result<Vec<(PolicyMeta, CompiledPolicy)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    let mut policies = Vec::new();
    for file in files {
        let extension = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(extension, "rego" | "yaml" | "yml") {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        if extension == "rego" {
            let compiled = outpost_policy::compile(&file.display().to_string(), &text)?;
            let name = file.file_stem().unwrap_or_default().to_string_lossy();
            let meta = PolicyMeta {
                name: name.into_owned(),
                inputs: vec![kind],
                enforcement: Enforcement::Deny,
            };
            policies.push((meta, compiled));
            continue;
        }
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("{} is not valid YAML", file.display()))?;
        let policy_documents = documents
            .into_iter()
            .filter(|d| d.get("kind").and_then(Value::as_str) == Some("Policy"));
        for (index, document) in policy_documents.enumerate() {
            let policy: Policy = serde_json::from_value(document)
                .with_context(|| format!("{}: not a valid Policy", file.display()))?;
            let name = policy.metadata.name.as_deref().unwrap_or("spec.module");
            let compiled =
                outpost_policy::compile(&format!("{}#{name}", file.display()), &policy.spec.module)
                    .map_err(|err| in_file(err, &file, &text, index))?;
            policies.push((PolicyMeta::from_policy(&policy), compiled));
        }
    }
    Ok(policies)
}

/// Places a module's compile error in the YAML file that holds it: the `index`th
/// `module: |` block scalar of the file. When the module is not a block scalar the
/// position stays relative to the module, named `<file>#spec.module`.
fn in_file(err: CompileError, file: &Path, text: &str, index: usize) -> CompileError {
    let lines: Vec<&str> = text.lines().collect();
    let block = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let l = l.trim();
            l.strip_prefix("module:")
                .is_some_and(|rest| matches!(rest.trim(), "|" | "|-" | "|+"))
        })
        .nth(index)
        .map(|(i, _)| i);
    let Some(key) = block else {
        return CompileError {
            name: format!("{}#spec.module", file.display()),
            ..err
        };
    };
    let indent = lines[key + 1..]
        .iter()
        .find(|l| !l.trim().is_empty())
        .map_or(0, |l| l.len() - l.trim_start().len());
    let offset = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    CompileError {
        name: file.display().to_string(),
        // 1-based `key` is the `module:` line; the module's line 1 is the next one.
        line: err.line.saturating_add(offset(key + 1)),
        column: err.column.saturating_add(offset(indent)),
        ..err
    }
}

/// The input file's documents: one for JSON, each non-empty document for YAML.
fn read_input(file: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    if file.extension().is_some_and(|e| e == "json") {
        let value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", file.display()))?;
        return Ok(vec![value]);
    }
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
        .with_context(|| format!("{} is not valid YAML", file.display()))?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}
