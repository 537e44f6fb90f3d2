//! Secret references in rendered desired state: `${outpost-secret:NAME}`.
//!
//! The control plane never sees secret values: templates render `secrets.NAME` to a
//! reference, and the runner resolves it at execution time from the step's environment
//! ([`super::StepContext::env`], as `OUTPOST_SECRET_<NAME>`, see [`crate::secrets::env_name`]). Resolved text only ever
//! goes into a child process's environment, never to disk or argv.

use std::collections::BTreeMap;

/// Opening of a reference; it ends at the next `}`.
pub const PREFIX: &str = "${outpost-secret:";

/// A reference names a secret the step's environment does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret {name:?} is referenced but was not resolved for this step")]
pub struct UnresolvedSecret {
    /// The secret's name.
    pub name: String,
}

/// Whether `text` contains a secret reference.
pub fn has_reference(text: &str) -> bool {
    text.contains(PREFIX)
}

/// `text` with every `${outpost-secret:NAME}` replaced by `env[OUTPOST_SECRET_<NAME>]`.
pub fn resolve(text: &str, env: &BTreeMap<String, String>) -> Result<String, UnresolvedSecret> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(PREFIX) {
        let after = &rest[start + PREFIX.len()..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        let value = env
            .get(&crate::secrets::env_name(name))
            .ok_or_else(|| UnresolvedSecret {
                name: name.to_owned(),
            })?;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_from_the_environment() {
        let env = BTreeMap::from([(
            crate::secrets::env_name("db_password"),
            "hunter2".to_owned(),
        )]);
        assert_eq!(
            resolve("pw=${outpost-secret:db_password};", &env).unwrap(),
            "pw=hunter2;"
        );
        assert_eq!(resolve("plain", &env).unwrap(), "plain");
        assert_eq!(
            resolve("${outpost-secret:nope}", &env).unwrap_err().name,
            "nope"
        );
        assert!(has_reference("${outpost-secret:x}"));
    }
}
