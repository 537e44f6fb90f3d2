//! Reading a role's trust policy: does it let the runner assume the role with the
//! install's external id?

use serde_json::Value;

/// The role ARN behind an assumed-role identity
/// (`arn:aws:sts::A:assumed-role/R/S` → `arn:aws:iam::A:role/R`); other ARNs as they are.
pub fn role_of(caller: &str) -> String {
    let parts: Vec<&str> = caller.splitn(6, ':').collect();
    if let [arn, partition, "sts", "", account, resource] = parts.as_slice()
        && let Some(rest) = resource.strip_prefix("assumed-role/")
    {
        let role = rest.split('/').next().unwrap_or_default();
        return format!("{arn}:{partition}:iam::{account}:role/{role}");
    }
    caller.to_owned()
}

/// Whether the trust policy `document` (JSON, URL-encoded as IAM returns it, or not)
/// has an `Allow` statement for `sts:AssumeRole` whose AWS principal is one of
/// `principals` and whose `StringEquals` condition requires `sts:ExternalId` to be
/// `external_id`. A statement without the external-id condition does not count: the
/// install's roles are only ever assumed with it.
pub fn trusts(document: &str, principals: &[&str], external_id: &str) -> bool {
    let decoded = percent_encoding::percent_decode_str(document).decode_utf8_lossy();
    let Ok(policy) = serde_json::from_str::<Value>(&decoded) else {
        return false;
    };
    let statements = match &policy["Statement"] {
        Value::Array(items) => items.clone(),
        one @ Value::Object(_) => vec![one.clone()],
        _ => return false,
    };
    let denied = statements
        .iter()
        .any(|s| s["Effect"] == "Deny" && strings(&s["Action"]).iter().any(|a| covers(a)));
    !denied
        && statements.iter().any(|s| {
            s["Effect"] == "Allow"
                && strings(&s["Action"]).iter().any(|a| covers(a))
                && strings(&s["Principal"]["AWS"])
                    .iter()
                    .any(|p| principals.contains(&p.as_str()))
                && strings(&s["Condition"]["StringEquals"]["sts:ExternalId"])
                    .iter()
                    .any(|id| id == external_id)
        })
}

fn covers(action: &str) -> bool {
    matches!(action, "sts:AssumeRole" | "sts:*" | "*")
}

/// A policy element that is a string or a list of strings.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNER: &str = "arn:aws:iam::123456789012:role/outpost-acme-RunnerInstanceRole-X";

    fn policy(principal: &str, external_id: &str) -> String {
        serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"AWS": principal},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
            }],
        })
        .to_string()
    }

    #[test]
    fn the_runner_role_with_the_external_id_is_trusted() {
        let caller =
            "arn:aws:sts::123456789012:assumed-role/outpost-acme-RunnerInstanceRole-X/i-0abc";
        assert_eq!(role_of(caller), RUNNER);
        let id = "outpost:shop/acme";
        let encoded: String = percent_encoding::utf8_percent_encode(
            &policy(RUNNER, id),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        assert!(trusts(&encoded, &[RUNNER], id));
        assert!(trusts(&policy(RUNNER, id), &[RUNNER], id));
        assert!(!trusts(
            &policy(RUNNER, "outpost:shop/other"),
            &[RUNNER],
            id
        ));
        assert!(!trusts(
            &policy("arn:aws:iam::123456789012:role/someone-else", id),
            &[RUNNER],
            id
        ));
        let without_condition = policy(RUNNER, id).replace("\"Condition\"", "\"Ignored\"");
        assert!(!trusts(&without_condition, &[RUNNER], id));
        assert!(!trusts("not json", &[RUNNER], id));
    }
}
