use std::collections::BTreeMap;

use super::{LabelSelector, Operator};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
    LabelSelector::parse(selector)
        .unwrap_or_else(|e| panic!("{selector:?} should parse: {e}"))
        .matches(&labels(pairs))
}

fn error(selector: &str) -> String {
    LabelSelector::parse(selector).expect_err(selector)
}

#[test]
fn equality_operators() {
    for s in ["app=web", "app==web", " app = web "] {
        assert!(selects(s, &[("app", "web")]), "{s}");
        assert!(!selects(s, &[("app", "db")]), "{s}");
        assert!(!selects(s, &[]), "{s}");
    }
    assert!(selects("app!=web", &[("app", "db")]));
    assert!(selects("app!=web", &[]));
    assert!(!selects("app!=web", &[("app", "web")]));
    // `a=` asks for the empty value.
    assert!(selects("app=", &[("app", "")]));
    assert!(!selects("app=", &[]));
}

#[test]
fn set_operators() {
    assert!(selects("tier in (db, cache)", &[("tier", "cache")]));
    assert!(!selects("tier in (db,cache)", &[("tier", "web")]));
    assert!(!selects("tier in (db,cache)", &[]));
    assert!(selects("tier notin (db)", &[("tier", "web")]));
    assert!(selects("tier notin (db)", &[]));
    assert!(!selects("tier notin (db)", &[("tier", "db")]));
    // Keywords are plain values inside the parentheses.
    assert!(selects("op in (in,notin)", &[("op", "notin")]));
    assert!(selects("tier in (a,)", &[("tier", "")]));
}

#[test]
fn existence_and_comparison() {
    assert!(selects("app", &[("app", "")]));
    assert!(!selects("app", &[]));
    assert!(selects("!app", &[("other", "x")]));
    assert!(!selects("!app", &[("app", "x")]));
    assert!(selects("size>5", &[("size", "10")]));
    assert!(!selects("size>5", &[("size", "5")]));
    assert!(!selects("size>5", &[("size", "big")]));
    assert!(selects("size<5", &[("size", "-1")]));
}

#[test]
fn every_requirement_must_hold() {
    let s = "app=web,tier in (db),!legacy, example.com/tenant";
    let all = [("app", "web"), ("tier", "db"), ("example.com/tenant", "t")];
    assert!(selects(s, &all));
    assert!(!selects(s, &[("app", "web"), ("tier", "db")]));
    assert!(!selects(s, &[all[0], all[1], all[2], ("legacy", "1")]));
    assert!(selects("", &[]));
    assert!(LabelSelector::parse("  ").expect("blank parses").is_empty());
}

#[test]
fn parsed_requirements_are_sorted_and_printable() {
    let selector = LabelSelector::parse("z in (b,a,b), !y, x==1, w").expect("valid");
    let keys: Vec<&str> = selector
        .requirements()
        .iter()
        .map(|r| r.key.as_str())
        .collect();
    assert_eq!(keys, ["w", "x", "y", "z"]);
    assert_eq!(selector.requirements()[3].operator, Operator::In);
    assert_eq!(selector.requirements()[3].values, ["a", "b"]);
    assert_eq!(selector.to_string(), "w,x=1,!y,z in (a,b)");
}

#[test]
fn errors_read_like_kube_apiserver() {
    assert_eq!(
        error("app in"),
        "unable to parse requirement: found '' expected: '('"
    );
    assert_eq!(
        error("app in (a"),
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    assert_eq!(
        error("app web"),
        "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, gt, lt"
    );
    assert_eq!(
        error("app=web,"),
        "found '', expected: identifier after ','"
    );
    assert_eq!(
        error("a=b c"),
        "found 'c', expected: ',' or 'end of string'"
    );
    assert_eq!(
        error("=x"),
        "found '=', expected: !, identifier, or 'end of string'"
    );
    assert_eq!(
        error("!=x"),
        "found '!=', expected: !, identifier, or 'end of string'"
    );
    assert_eq!(
        error("! =x"),
        "unable to parse requirement: found '=', expected: identifier"
    );
    assert!(error("a/b/c").starts_with(
        "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of"
    ));
    assert!(error("Example.com/a=b").contains("prefix part a lowercase RFC 1123 subdomain"));
    assert!(selects("example.com/a=b", &[("example.com/a", "b")]));
    assert!(error("-a=b").contains("name part must consist of alphanumeric characters"));
    assert!(
        error(&format!("{}=b", "k".repeat(64)))
            .contains("name part must be no more than 63 characters")
    );
    assert!(error("a=b!c").starts_with("found '!', expected: ',' or 'end of string'"));
    assert!(
        error("a in (x y)").ends_with("found 'y', expected: ',' or ')'"),
        "{}",
        error("a in (x y)")
    );
    assert!(error("a=-x").starts_with(
        "unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must be an empty string"
    ));
    assert_eq!(
        error("a>x"),
        "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
    );
}
