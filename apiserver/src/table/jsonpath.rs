//! The simple JSONPath of printer columns: `.status.phase`, `.metadata.labels['a.b/c']`,
//! `.spec.items[0].name`, `.spec.items[*].name`,
//! `.status.conditions[?(@.type=="Ready")].status`.

use serde_json::Value;

/// One step of a parsed path.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `[3]`, `[-1]`.
    Index(i64),
    /// `[*]`.
    All,
    /// `[?(@.a.b == "x")]` (or `!=`); no value tests for presence.
    Filter {
        path: Vec<Step>,
        negate: bool,
        value: Option<Value>,
    },
}

/// A parsed printer-column JSONPath.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath(Vec<Step>);

impl JsonPath {
    /// Parses `path`, with or without the surrounding `{}`.
    pub fn parse(path: &str) -> Result<JsonPath, String> {
        let trimmed = path.trim();
        let inner = trimmed
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .unwrap_or(trimmed);
        let mut parser = Parser { rest: inner };
        let steps = parser.steps()?;
        if !parser.rest.is_empty() {
            return Err(format!("unrecognized column definition {path:?}"));
        }
        Ok(JsonPath(steps))
    }

    /// Every value the path finds in `object`, in order.
    pub fn find<'v>(&self, object: &'v Value) -> Vec<&'v Value> {
        eval(&self.0, vec![object])
    }
}

fn eval<'v>(steps: &[Step], mut current: Vec<&'v Value>) -> Vec<&'v Value> {
    for step in steps {
        current = current
            .into_iter()
            .flat_map(|value| -> Vec<&'v Value> {
                match (step, value) {
                    (Step::Field(name), Value::Object(map)) => map.get(name).into_iter().collect(),
                    (Step::Index(i), Value::Array(items)) => {
                        let index = if *i < 0 { items.len() as i64 + i } else { *i };
                        usize::try_from(index)
                            .ok()
                            .and_then(|i| items.get(i))
                            .into_iter()
                            .collect()
                    }
                    (Step::All, Value::Array(items)) => items.iter().collect(),
                    (Step::All, Value::Object(map)) => map.values().collect(),
                    (
                        Step::Filter {
                            path,
                            negate,
                            value: want,
                        },
                        Value::Array(items),
                    ) => items
                        .iter()
                        .filter(|item| {
                            let found = eval(path, vec![item]);
                            match want {
                                None => found.is_empty() == *negate,
                                Some(want) => {
                                    let equal =
                                        found.first().is_some_and(|v| loosely_equal(v, want));
                                    equal != *negate
                                }
                            }
                        })
                        .collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    current
}

/// `==` as kube's JSONPath compares: numbers by value, strings by text.
fn loosely_equal(found: &Value, want: &Value) -> bool {
    match (found, want) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => found == want,
    }
}

struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    fn steps(&mut self) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        loop {
            if let Some(rest) = self.rest.strip_prefix('.') {
                self.rest = rest;
                if self.rest.starts_with('[') || self.rest.is_empty() {
                    continue;
                }
                if let Some(rest) = self.rest.strip_prefix('*') {
                    self.rest = rest;
                    steps.push(Step::All);
                    continue;
                }
                let end = self
                    .rest
                    .find(|c: char| {
                        c == '.' || c == '[' || c == ')' || c.is_whitespace() || "=!".contains(c)
                    })
                    .unwrap_or(self.rest.len());
                if end == 0 {
                    return Err(format!("expected a field name at {:?}", self.rest));
                }
                steps.push(Step::Field(self.rest[..end].to_owned()));
                self.rest = &self.rest[end..];
            } else if let Some(rest) = self.rest.strip_prefix('[') {
                self.rest = rest;
                steps.push(self.bracket()?);
            } else {
                return Ok(steps);
            }
        }
    }

    fn bracket(&mut self) -> Result<Step, String> {
        let step = if let Some(rest) = self.rest.strip_prefix("?(@") {
            self.rest = rest;
            let path = self.steps()?;
            self.rest = self.rest.trim_start();
            let (negate, value) = if let Some(rest) = self.rest.strip_prefix("==") {
                self.rest = rest.trim_start();
                (false, Some(self.literal()?))
            } else if let Some(rest) = self.rest.strip_prefix("!=") {
                self.rest = rest.trim_start();
                (true, Some(self.literal()?))
            } else {
                (false, None)
            };
            self.rest = self
                .rest
                .trim_start()
                .strip_prefix(')')
                .ok_or("expected ')' closing a filter")?;
            Step::Filter {
                path,
                negate,
                value,
            }
        } else if self.rest.starts_with(['\'', '"']) {
            match self.literal()? {
                Value::String(name) => Step::Field(name),
                _ => return Err("expected a quoted field name".into()),
            }
        } else if let Some(rest) = self.rest.strip_prefix('*') {
            self.rest = rest;
            Step::All
        } else {
            let end = self.rest.find(']').ok_or("expected ']'")?;
            let index = self.rest[..end]
                .trim()
                .parse()
                .map_err(|_| format!("unsupported subscript {:?}", &self.rest[..end]))?;
            self.rest = &self.rest[end..];
            Step::Index(index)
        };
        self.rest = self.rest.strip_prefix(']').ok_or("expected ']'")?;
        Ok(step)
    }

    /// A quoted string, a number, `true`, `false` or `null`.
    fn literal(&mut self) -> Result<Value, String> {
        if let Some(quote) = self.rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
            let body = &self.rest[1..];
            let end = body.find(quote).ok_or("unterminated string")?;
            self.rest = &body[end + 1..];
            return Ok(Value::String(body[..end].to_owned()));
        }
        let end = self
            .rest
            .find(|c: char| c == ')' || c.is_whitespace())
            .unwrap_or(self.rest.len());
        let token = &self.rest[..end];
        self.rest = &self.rest[end..];
        serde_json::from_str(token).map_err(|_| format!("unsupported literal {token:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}},
            "spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]},
            "status": {
                "phase": "Ready",
                "conditions": [
                    {"type": "Progressing", "status": "False"},
                    {"type": "Ready", "status": "True", "count": 2},
                ],
            },
        })
    }

    fn first(path: &str) -> Option<Value> {
        JsonPath::parse(path)
            .unwrap()
            .find(&object())
            .first()
            .map(|v| (*v).clone())
    }

    #[test]
    fn finds_fields_indexes_and_filters() {
        assert_eq!(first(".status.phase"), Some(json!("Ready")));
        assert_eq!(first("{.spec.replicas}"), Some(json!(3)));
        assert_eq!(first(".metadata.labels.tier"), Some(json!("front")));
        assert_eq!(
            first(".metadata.labels['app.kubernetes.io/name']"),
            Some(json!("web"))
        );
        assert_eq!(first(".spec.ports[1].port"), Some(json!(443)));
        assert_eq!(first(".spec.ports[-1].port"), Some(json!(443)));
        assert_eq!(first(".spec.ports[*].port"), Some(json!(80)));
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("True"))
        );
        assert_eq!(
            first(".status.conditions[?(@.type == 'Progressing')].status"),
            Some(json!("False"))
        );
        assert_eq!(
            first(".status.conditions[?(@.count==2)].type"),
            Some(json!("Ready"))
        );
        assert_eq!(
            first(r#".status.conditions[?(@.type!="Ready")].type"#),
            Some(json!("Progressing"))
        );
    }

    #[test]
    fn missing_values_find_nothing() {
        assert_eq!(first(".status.missing"), None);
        assert_eq!(first(".spec.ports[5].port"), None);
        assert_eq!(first(".status.phase.deeper"), None);
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Gone")].status"#),
            None
        );
    }

    #[test]
    fn rejects_what_it_cannot_parse() {
        for path in [
            ".spec.ports[x]",
            ".spec.ports[1",
            ".a[?(@.b==\"c\"]",
            ".a b",
        ] {
            assert!(JsonPath::parse(path).is_err(), "{path}");
        }
    }
}
