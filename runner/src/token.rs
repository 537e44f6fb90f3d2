//! The runner's token: read once at start and kept in memory only.
//!
//! On the customer's VM the install stack starts the runner with `--token-secret ARN`:
//! the token is in the customer's AWS Secrets Manager, readable by the runner's instance
//! role alone, and the runner reads it with that role's credentials. A runner started by
//! hand (or by `outpost up`) takes it from the `OUTPOST_RUNNER_TOKEN` environment
//! variable. There is no flag that takes the token itself: a command line is readable by
//! every user of the machine (`ps`), and a unit file or EC2 user data by anyone who can
//! read the machine's configuration. The runner never writes the token to disk, and
//! every process it starts gets an environment of its own (`env_clear`), so the variable
//! does not reach terraform or a job step.

use backon::Retryable as _;

use crate::settings::RunnerArgs;

/// The environment variable a runner started without `--token-secret` reads its token
/// from.
pub const TOKEN_ENV: &str = "OUTPOST_RUNNER_TOKEN";

/// How many times the token's secret is read before the runner gives up.
const READ_ATTEMPTS: usize = 4;

/// The runner's bearer token. Its `Debug` does not show it.
#[derive(Clone)]
pub struct RunnerToken(String);

impl std::fmt::Debug for RunnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunnerToken(***)")
    }
}

impl RunnerToken {
    /// The token, for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with surrounding whitespace removed (a secret stored from a file keeps
    /// its final newline), if what is left can be a bearer token: not empty, printable
    /// ASCII without spaces.
    fn parse(text: &str) -> Option<RunnerToken> {
        let token = text.trim();
        (!token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| RunnerToken(token.to_owned()))
    }
}

/// Why the runner has no token. No variant carries the token's value.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Neither `--token-secret` nor the environment variable is set.
    #[error(
        "no runner token: pass --token-secret with the ARN or name of the AWS Secrets Manager \
         secret that holds it (the install stack's RunnerTokenSecretArn output), or set \
         {TOKEN_ENV}; the token itself is never taken on the command line"
    )]
    Missing,
    /// Both are set.
    #[error("both --token-secret and {TOKEN_ENV} are set: give the runner its token one way")]
    Both,
    /// The value is empty or has spaces or control characters inside.
    #[error("{0} does not hold a runner token (empty, or spaces or control characters inside)")]
    Malformed(String),
    /// Secrets Manager refused or failed.
    #[error("cannot read the runner token from AWS Secrets Manager secret {secret}: {reason}")]
    Secret {
        /// The secret's ARN or name.
        secret: String,
        /// The service's error code and message.
        reason: String,
    },
}

/// Where the token comes from, decided from the settings and the environment before
/// anything starts.
#[derive(Debug)]
pub enum TokenSource {
    /// `--token-secret`: the secret's ARN or name.
    SecretsManager(String),
    /// [`TOKEN_ENV`], already read.
    Environment(RunnerToken),
}

impl TokenSource {
    /// The source `args` and the environment name: exactly one of `--token-secret` and
    /// [`TOKEN_ENV`].
    ///
    /// # Errors
    ///
    /// [`TokenError::Missing`], [`TokenError::Both`], or [`TokenError::Malformed`] for a
    /// variable that holds no token.
    pub fn of(args: &RunnerArgs) -> Result<TokenSource, TokenError> {
        let variable = std::env::var_os(TOKEN_ENV).filter(|v| !v.is_empty());
        match (&args.token_secret, variable) {
            (Some(_), Some(_)) => Err(TokenError::Both),
            (Some(secret), None) => Ok(TokenSource::SecretsManager(secret.clone())),
            (None, Some(value)) => value
                .to_str()
                .and_then(RunnerToken::parse)
                .map(TokenSource::Environment)
                .ok_or_else(|| TokenError::Malformed(TOKEN_ENV.to_owned())),
            (None, None) => Err(TokenError::Missing),
        }
    }

    /// Reads the token: from Secrets Manager (`secretsmanager:GetSecretValue` with the
    /// default credential chain, on the VM the instance role; `--aws-region` and
    /// `--aws-endpoint` apply), or the variable's value read by [`TokenSource::of`].
    ///
    /// # Errors
    ///
    /// [`TokenError::Secret`] when Secrets Manager refuses (a principal other than the
    /// runner's role, a missing secret) or cannot be reached, [`TokenError::Malformed`]
    /// when the secret holds no token.
    pub async fn read(self, args: &RunnerArgs) -> Result<RunnerToken, TokenError> {
        let secret = match self {
            TokenSource::Environment(token) => return Ok(token),
            TokenSource::SecretsManager(secret) => secret,
        };
        let failed = |reason: String| TokenError::Secret {
            secret: secret.clone(),
            reason,
        };
        let config = crate::aws::sdk_config(args.aws_region.clone(), args.aws_endpoint.clone())
            .await
            .map_err(|e| failed(format!("{e:#}")))?;
        let client = aws_sdk_secretsmanager::Client::new(&config);
        // A few tries: on a fresh stack the instance role's grant can take seconds to
        // reach every IAM endpoint. Past them the runner exits and systemd restarts it.
        let value = (|| client.get_secret_value().secret_id(&secret).send())
            .retry(crate::retry::backoff(READ_ATTEMPTS))
            .sleep(tokio::time::sleep)
            .notify(|e, after| {
                tracing::warn!(secret = %secret, error = %crate::aws::describe(e), ?after,
                    "cannot read the runner token yet; retrying");
            })
            .await
            .map_err(|e| failed(crate::aws::describe(&e)))?;
        value
            .secret_string()
            .and_then(RunnerToken::parse)
            .ok_or_else(|| TokenError::Malformed(format!("AWS Secrets Manager secret {secret}")))
    }
}

/// Mints a new runner token for install `namespace/install` with an admin's `client`
/// (`outpost token`, `outpost up`, the benchmarks): `POST
/// /apis/outpost.dev/v1alpha1/namespaces/NS/installs/NAME/token`, which rotates any
/// previous token. The answer is the only place the token is ever shown.
pub async fn mint(
    client: &kube_client::Client,
    namespace: &str,
    install: &str,
) -> Result<String, MintError> {
    let named = || format!("{namespace}/{install}");
    let request = http::Request::post(format!(
        "/apis/outpost.dev/v1alpha1/namespaces/{namespace}/installs/{install}/token"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(b"{}".to_vec())
    .map_err(|source| MintError::Path {
        install: named(),
        source,
    })?;
    let answer: serde_json::Value =
        client
            .request(request)
            .await
            .map_err(|source| MintError::Request {
                install: named(),
                source,
            })?;
    answer
        .get("token")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| MintError::NoToken { install: named() })
}

/// Why [`mint`] has no token. No variant carries a token.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The namespace or name cannot be part of a request path.
    #[error("cannot mint a runner token for install {install}: not a valid request path")]
    Path {
        /// NAMESPACE/NAME.
        install: String,
        /// Why the path is refused.
        #[source]
        source: http::Error,
    },
    /// The API server refused (not an admin, no such install) or could not be reached.
    #[error("cannot mint a runner token for install {install}")]
    Request {
        /// NAMESPACE/NAME.
        install: String,
        /// The API server's answer or the transport's error.
        #[source]
        source: kube_client::Error,
    },
    /// The answer had no `token`.
    #[error("the API server answered without a runner token for install {install}")]
    NoToken {
        /// NAMESPACE/NAME.
        install: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_trimmed_and_must_be_one_printable_word() {
        assert_eq!(
            RunnerToken::parse("opr_shop_acme_0123\n").unwrap().expose(),
            "opr_shop_acme_0123"
        );
        for bad in ["", " \n", "opr_a b", "opr_\u{7f}x", "opr_é"] {
            assert!(RunnerToken::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn debug_hides_the_token() {
        let token = RunnerToken::parse("opr_shop_acme_secret").unwrap();
        assert_eq!(format!("{token:?}"), "RunnerToken(***)");
        let source = TokenSource::Environment(token);
        assert!(!format!("{source:?}").contains("secret"));
    }
}
