//! Label selectors: the grammar and messages of apimachinery's `labels.Parse`.

use std::collections::BTreeSet;
use std::fmt;

use super::Labels;

/// How a [`Requirement`] compares a label with its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `a=b` or `a==b`: the label is set to the value.
    Equals,
    /// `a!=b`: the label is missing or set to something else.
    NotEquals,
    /// `a in (x,y)`: the label is set to one of the values.
    In,
    /// `a notin (x,y)`: the label is missing or set to none of the values.
    NotIn,
    /// `a`: the label is set.
    Exists,
    /// `!a`: the label is not set.
    DoesNotExist,
    /// `a>1`: the label is an integer greater than the value.
    GreaterThan,
    /// `a<1`: the label is an integer less than the value.
    LessThan,
}

/// One comma-separated term of a [`LabelSelector`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// Label key, e.g. `app` or `example.com/owner`.
    pub key: String,
    /// The comparison.
    pub operator: Operator,
    /// The values, sorted and without duplicates; empty for `Exists`/`DoesNotExist`.
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        let label = labels.label(&self.key);
        let listed = || label.is_some_and(|v| self.values.iter().any(|value| value == v));
        let compare = |want: std::cmp::Ordering| {
            let have = label.and_then(|v| v.parse::<i64>().ok());
            let bound = self.values.first().and_then(|v| v.parse::<i64>().ok());
            matches!((have, bound), (Some(h), Some(b)) if h.cmp(&b) == want)
        };
        match self.operator {
            Operator::Equals | Operator::In => listed(),
            Operator::NotEquals | Operator::NotIn => !listed(),
            Operator::Exists => label.is_some(),
            Operator::DoesNotExist => label.is_none(),
            Operator::GreaterThan => compare(std::cmp::Ordering::Greater),
            Operator::LessThan => compare(std::cmp::Ordering::Less),
        }
    }
}

/// A parsed `labelSelector`: every requirement must hold. The empty selector
/// matches everything.
///
/// ```no_run
/// use outpost_apiserver::selectors::{LabelSelector, labels_of};
/// let selector = LabelSelector::parse("app=web, tier in (db,cache), !legacy").unwrap();
/// let object = serde_json::json!({"metadata": {"labels": {"app": "web", "tier": "db"}}});
/// assert!(selector.matches(&labels_of(&object)));
/// assert!(selector.matches(&object));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the full selector syntax; errors read like kube-apiserver's, e.g.
    /// `unable to parse requirement: found '', expected: in, notin, =, ==, !=, gt, lt`.
    pub fn parse(selector: &str) -> Result<LabelSelector, String> {
        let mut parser = Parser {
            tokens: lex(selector),
            position: 0,
        };
        let mut requirements = parser.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Identifier,
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
    End,
    Error,
}

impl Token {
    fn symbol(text: &str) -> Option<Token> {
        Some(match text {
            "!" => Token::Not,
            "=" => Token::Equals,
            "==" => Token::DoubleEquals,
            "!=" => Token::NotEquals,
            ">" => Token::GreaterThan,
            "<" => Token::LessThan,
            "(" => Token::Open,
            ")" => Token::Close,
            "," => Token::Comma,
            _ => return None,
        })
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Tokens with their text, ending with [`Token::End`].
fn lex(input: &str) -> Vec<(Token, String)> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_space(c) {
            i += 1;
        } else if is_special(c) {
            // The longest run of symbols that is still a token, as apimachinery's lexer.
            let mut buffer = String::new();
            let mut last: Option<(Token, String, usize)> = None;
            let mut j = i;
            while j < chars.len() && is_special(chars[j]) {
                buffer.push(chars[j]);
                j += 1;
                match Token::symbol(&buffer) {
                    Some(token) => last = Some((token, buffer.clone(), j)),
                    None if last.is_some() => break,
                    None => {}
                }
            }
            match last {
                Some((token, text, end)) => {
                    tokens.push((token, text));
                    i = end;
                }
                None => {
                    let text = format!("error expected: keyword found '{buffer}'");
                    tokens.push((Token::Error, text));
                    i = j;
                }
            }
        } else {
            let start = i;
            while i < chars.len() && !is_space(chars[i]) && !is_special(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let token = match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier,
            };
            tokens.push((token, word));
        }
    }
    tokens.push((Token::End, String::new()));
    tokens
}

struct Parser {
    tokens: Vec<(Token, String)>,
    position: usize,
}

/// Where keywords are keywords (`a in (...)`) and where they are plain values.
#[derive(Clone, Copy, PartialEq)]
enum Context {
    KeyAndOperator,
    Values,
}

impl Parser {
    fn lookahead(&self, context: Context) -> (Token, String) {
        let (token, text) = self.tokens[self.position.min(self.tokens.len() - 1)].clone();
        let token = match token {
            Token::In | Token::NotIn if context == Context::Values => Token::Identifier,
            other => other,
        };
        (token, text)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let next = self.lookahead(context);
        self.position += 1;
        next
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, text) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::Not => {
                    let requirement = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, text) = self.consume(Context::Values);
                    match token {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            let (next, text) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::Not {
                                return Err(format!(
                                    "found '{text}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "found '{text}', expected: ',' or 'end of string'"
                            ));
                        }
                    }
                }
                Token::End => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{text}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (mut token, mut key) = self.consume(Context::Values);
        let negated = token == Token::Not;
        if negated {
            (token, key) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{key}', expected: identifier"));
        }
        if let Err(e) = valid_key(&key) {
            return Err(format!("<nil>: Invalid value: {key:?}: {e}"));
        }
        let (next, _) = self.lookahead(Context::Values);
        if negated || next == Token::End || next == Token::Comma {
            let operator = if negated {
                Operator::DoesNotExist
            } else {
                Operator::Exists
            };
            return Ok(Requirement {
                key,
                operator,
                values: Vec::new(),
            });
        }
        let (token, text) = self.consume(Context::KeyAndOperator);
        let operator = match token {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals | Token::DoubleEquals => Operator::Equals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            _ => {
                return Err(format!(
                    "found '{text}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => self.exact_value()?,
        };
        check_values(&key, operator, &values)?;
        Ok(Requirement {
            key,
            operator,
            values: values.into_iter().collect(),
        })
    }

    fn exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, _) = self.lookahead(Context::Values);
        if token == Token::End || token == Token::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.consume(Context::Values) {
            (Token::Identifier, value) => Ok(BTreeSet::from([value])),
            (_, text) => Err(format!("found '{text}', expected: identifier")),
        }
    }

    fn value_set(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, text) = self.consume(Context::Values);
        if token != Token::Open {
            return Err(format!("found '{text}' expected: '('"));
        }
        let (token, text) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.identifiers()?;
                match self.consume(Context::Values) {
                    (Token::Close, _) => Ok(values),
                    (_, text) => Err(format!("found '{text}', expected: ')'")),
                }
            }
            Token::Close => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{text}', expected: ',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<BTreeSet<String>, String> {
        let mut values = BTreeSet::new();
        loop {
            match self.consume(Context::Values) {
                (Token::Identifier, value) => {
                    values.insert(value);
                    match self.lookahead(Context::Values) {
                        (Token::Comma, _) => continue,
                        (Token::Close, _) => return Ok(values),
                        (_, text) => return Err(format!("found '{text}', expected: ',' or ')'")),
                    }
                }
                // `(,a`, `a,)` and `a,,b` hold the empty value.
                (Token::Comma, _) => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.lookahead(Context::Values).0 {
                        Token::Close => {
                            values.insert(String::new());
                            return Ok(values);
                        }
                        Token::Comma => {
                            self.consume(Context::Values);
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                (_, text) => return Err(format!("found '{text}', expected: ',', or identifier")),
            }
        }
    }
}

/// apimachinery's `NewRequirement` checks, one message per problem.
fn check_values(key: &str, operator: Operator, values: &BTreeSet<String>) -> Result<(), String> {
    let mut errors = Vec::new();
    if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                errors.push(format!(
                    "values[{i}]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        if let Err(e) = valid_value(v) {
            errors.push(format!("values[{i}][{key}]: Invalid value: {v:?}: {e}"));
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

const NAME_FORMAT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, possibly empty.
fn is_name_chars(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.is_empty()
        || (alnum(s.chars().next())
            && alnum(s.chars().last())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

/// A qualified name (`[prefix/]name`), with apimachinery's messages.
fn valid_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((_, rest)) if rest.contains('/') => {
            return Err(format!(
                "a qualified name {NAME_FORMAT} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let mut errors = Vec::new();
    match prefix {
        Some("") => errors.push("prefix part must be non-empty".to_owned()),
        Some(p) if !outpost_meta::validation::is_dns1123_subdomain(p) => errors.push(
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned()),
        _ => {}
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_name_chars(name) {
        errors.push(format!("name part {NAME_FORMAT}"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// A label value: empty, or up to 63 name characters.
fn valid_value(value: &str) -> Result<(), String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !is_name_chars(value) {
        errors.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned());
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical form, as apimachinery prints a selector: `a=b,c in (x,y),!d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self
            .requirements
            .iter()
            .map(|r| {
                let one = || r.values.first().cloned().unwrap_or_default();
                match r.operator {
                    Operator::Equals => format!("{}={}", r.key, one()),
                    Operator::NotEquals => format!("{}!={}", r.key, one()),
                    Operator::In => format!("{} in ({})", r.key, r.values.join(",")),
                    Operator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
                    Operator::Exists => r.key.clone(),
                    Operator::DoesNotExist => format!("!{}", r.key),
                    Operator::GreaterThan => format!("{}>{}", r.key, one()),
                    Operator::LessThan => format!("{}<{}", r.key, one()),
                }
            })
            .collect();
        f.write_str(&terms.join(","))
    }
}

#[cfg(test)]
#[path = "label_tests.rs"]
mod tests;
