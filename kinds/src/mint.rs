//! `POST /apis/outpost.dev/v1alpha1/namespaces/NS/installs/NAME/token`: mints the
//! install's runner token, like a TokenRequest. The answer is the only time the token
//! is shown; the Install keeps its SHA-256 in `status.runnerTokenHash`, so minting again
//! rotates it (the previous token gets 401 from then on).

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use outpost_apiserver::object_meta::to_store;
use outpost_apiserver::request::Verb;
use outpost_apiserver::server::{Call, RETRIES, Subresource, json};
use outpost_apiserver::status::ApiError;
use outpost_apiserver::storage::StoreError;
use serde_json::{Value, json};

use crate::runner_token::RunnerToken;

/// The subresource's name.
pub const SUBRESOURCE: &str = "token";

/// How long minting waits for the watch cache to have the new token's hash.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `installs/NAME/token`. Not fenced: minting is answered before admission and the
/// fencing check, as it was before plugins.
#[derive(Clone, Copy, Debug, Default)]
pub struct MintRunnerToken;

#[async_trait::async_trait]
impl Subresource for MintRunnerToken {
    fn name(&self) -> &'static str {
        SUBRESOURCE
    }

    fn fenced(&self) -> bool {
        false
    }

    async fn answer(&self, call: &Call, _body: Body) -> Result<Response, ApiError> {
        mint(call).await
    }
}

/// Mints a token, stores its hash in the Install and answers `RunnerToken`.
pub async fn mint(call: &Call) -> Result<Response, ApiError> {
    if call.request.verb != Verb::Create {
        return Err(ApiError::MethodNotAllowed);
    }
    let namespace = call.namespace().unwrap_or_default();
    for _ in 0..RETRIES {
        let (kv, mut install) = call.load().await?;
        let token = RunnerToken::generate(namespace, call.name());
        let status = install
            .as_object_mut()
            .ok_or_else(|| ApiError::Internal("stored install is not an object".into()))?
            .entry("status")
            .or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        status["runnerTokenHash"] = Value::String(token.hash());
        match call
            .reads()
            .store()
            .update(&call.key(), to_store(&install), kv.mod_revision)
            .await
        {
            Ok(written) => {
                // Runner tokens are checked against the watch cache: answer once it has
                // the new hash, so that the previous token is refused from now on.
                let cached = call.wait_for_caches(written.mod_revision, CACHE_WAIT).await;
                if !cached {
                    tracing::warn!(
                        "the watch cache is behind the store: the new runner token may be refused for a moment"
                    );
                }
                return Ok(json(
                    StatusCode::CREATED,
                    &json!({
                        "apiVersion": call.rt.api_version(),
                        "kind": "RunnerToken",
                        "token": token.secret(),
                    }),
                ));
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(err) => return Err(ApiError::from_store(err, call.subject())),
        }
    }
    Err(ApiError::Conflict {
        subject: call.subject(),
        reason: "the install kept changing; try again".into(),
    })
}
