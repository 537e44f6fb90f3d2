//! How the runner authenticates to a container registry when it copies a
//! `container_image` component ([`crate::ImageSource`]): the vendor's registry with a
//! pull credential, the install's registry with a customer credential or, for ECR, an
//! authorization token exchanged under the Plan's role.
//!
//! A password or token is always a secret reference (`{{ secrets.NAME }}`): its value
//! lives in the customer's secret store, the runner resolves it at execution time, and
//! the control plane only ever holds the reference.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::FieldError;
use crate::template;

/// Credentials for one registry. Exactly one way is set: `username` with `password`
/// (HTTP basic, also used for a registry's token realm), `token` (a bearer token), or
/// `ecr` (an ECR authorization token for the Plan's role).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RegistryAuth {
    /// User name, a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password: a secret reference, `{{ secrets.NAME }}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Bearer token: a secret reference, `{{ secrets.NAME }}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The registry is ECR: the runner calls `ecr:GetAuthorizationToken` for the
    /// registry's account under the Plan's role, and uses the short-lived token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ecr: bool,
}

impl RegistryAuth {
    /// Field errors of credentials at `field` (`spec.image.sourceAuth`).
    pub fn validate_at(&self, field: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let ways = [
            self.username.is_some() || self.password.is_some(),
            self.token.is_some(),
            self.ecr,
        ];
        match ways.iter().filter(|set| **set).count() {
            0 => errors.push(FieldError::required(
                field,
                "one of username and password, token, or ecr",
            )),
            1 => {}
            _ => errors.push(FieldError::forbidden(
                field,
                "only one of username and password, token, or ecr may be set",
            )),
        }
        match (&self.username, &self.password) {
            (Some(_), None) => errors.push(FieldError::required(
                format!("{field}.password"),
                "a username needs a password",
            )),
            (None, Some(_)) => errors.push(FieldError::required(
                format!("{field}.username"),
                "a password needs a username",
            )),
            _ => {}
        }
        if let Some(username) = &self.username
            && let Err(e) = template::expressions(username)
        {
            errors.push(FieldError::invalid(
                format!("{field}.username"),
                username,
                e.to_string(),
            ));
        }
        for (name, value) in [("password", &self.password), ("token", &self.token)] {
            if let Some(value) = value
                && secret_reference(value).is_none()
            {
                errors.push(FieldError::invalid(
                    format!("{field}.{name}"),
                    "<redacted>",
                    "must be a secret reference, {{ secrets.NAME }}: credentials are never \
                     stored in the control plane",
                ));
            }
        }
        errors
    }
}

/// The secret's name when `text` is exactly one secret reference, `{{ secrets.NAME }}`.
///
/// ```
/// use outpost_api::registry_auth::secret_reference;
/// assert_eq!(secret_reference("{{ secrets.pull_token }}"), Some("pull_token"));
/// assert_eq!(secret_reference("hunter2"), None);
/// assert_eq!(secret_reference("x{{ secrets.pull_token }}"), None);
/// ```
pub fn secret_reference(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let name = inner.trim().strip_prefix("secrets.")?;
    crate::validation::is_identifier(name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldErrorKind;

    fn errors(auth: &RegistryAuth) -> Vec<(String, FieldErrorKind)> {
        auth.validate_at("spec.image.sourceAuth")
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    fn basic(username: &str, password: &str) -> RegistryAuth {
        RegistryAuth {
            username: Some(username.into()),
            password: Some(password.into()),
            ..RegistryAuth::default()
        }
    }

    #[test]
    fn one_way_each_secret_by_reference() {
        assert_eq!(errors(&basic("robot", "{{ secrets.pull }}")), []);
        let ecr = RegistryAuth {
            ecr: true,
            ..RegistryAuth::default()
        };
        assert_eq!(errors(&ecr), []);
        assert_eq!(
            errors(&RegistryAuth::default()),
            [("spec.image.sourceAuth".into(), FieldErrorKind::Required)]
        );
        let both = RegistryAuth {
            ecr: true,
            ..basic("robot", "{{ secrets.pull }}")
        };
        assert_eq!(
            errors(&both),
            [("spec.image.sourceAuth".into(), FieldErrorKind::Forbidden)]
        );
        let half = RegistryAuth {
            password: None,
            ..basic("robot", "")
        };
        assert_eq!(
            errors(&half),
            [(
                "spec.image.sourceAuth.password".into(),
                FieldErrorKind::Required
            )]
        );
    }

    #[test]
    fn a_plain_password_or_token_is_refused_and_not_echoed() {
        let plain = basic("robot", "hunter2");
        let found = plain.validate_at("spec.image.sourceAuth");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, "spec.image.sourceAuth.password");
        assert!(
            !found[0].message.contains("hunter2"),
            "{}",
            found[0].message
        );
        let token = RegistryAuth {
            token: Some("{{ inputs.token }}".into()),
            ..RegistryAuth::default()
        };
        assert_eq!(
            errors(&token),
            [(
                "spec.image.sourceAuth.token".into(),
                FieldErrorKind::Invalid
            )]
        );
    }
}
