//! `POST /apis/outpost.dev/v1alpha1/namespaces/NS/installs/NAME/token`: mints the
//! install's runner token, like a TokenRequest. The answer is the only time the token
//! is shown; the Install keeps its SHA-256 in `status.runnerTokenHash`, so minting again
//! rotates it (the previous token gets 401 from then on).

use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use super::body::json;
use super::dispatch::Call;
use super::objects::RETRIES;
use crate::auth::RunnerToken;
use crate::object_meta::to_store;
use crate::registry::ResourceType;
use crate::request::Verb;
use crate::status::ApiError;
use crate::storage::StoreError;

/// How long minting waits for the watch cache to have the new token's hash.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether `rt` is the type whose objects have a `token` subresource (Installs).
pub fn serves(rt: &ResourceType) -> bool {
    rt.group == "outpost.dev" && rt.plural == "installs"
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
            .state
            .store
            .update(&call.key(), to_store(&install), kv.mod_revision)
            .await
        {
            Ok(written) => {
                // Runner tokens are checked against the watch cache: answer once it has
                // the new hash, so that the previous token is refused from now on.
                let cached = call
                    .state
                    .progress
                    .wait_for(written.mod_revision, CACHE_WAIT)
                    .await;
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
