//! The benchmark's HTTP client: one keep-alive HTTP/1.1 connection per worker, as a
//! controller or `kubectl` holds one, with the admin's bearer token.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiBenchError;
use outpost_apiserver::storage::Revision;

/// Where the benchmark's objects live.
pub(super) const INSTALLS: &str = "/apis/outpost.dev/v1alpha1/namespaces/bench/installs";

/// A realistic, `ConfigMap`-sized Install named `name`.
pub(super) fn install(name: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": name, "namespace": "bench", "labels": {"outpost.dev/app": "shopfront"}},
        "spec": {
            "app": "shopfront",
            "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"},
            "approvalMode": "approve-all",
        },
    })
}

/// The part of an object (or of a watch event's object) the benchmark reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    resource_version: String,
}

#[derive(Deserialize)]
struct Object {
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Event {
    object: Object,
}

fn revision(rv: &str) -> Result<Revision, ApiBenchError> {
    rv.parse()
        .map_err(|_| ApiBenchError::Unexpected(format!("resourceVersion {rv:?} is not a number")))
}

/// The `resourceVersion` of the object in a response body.
pub(super) fn object_revision(body: &[u8]) -> Result<Revision, ApiBenchError> {
    let object: Object = serde_json::from_slice(body).map_err(ApiBenchError::decode)?;
    revision(&object.metadata.resource_version)
}

/// The `resourceVersion` of the object in one watch event line.
pub(super) fn event_revision(line: &[u8]) -> Result<Revision, ApiBenchError> {
    let event: Event = serde_json::from_slice(line).map_err(ApiBenchError::decode)?;
    revision(&event.object.metadata.resource_version)
}

/// One keep-alive connection to the API server.
pub(super) struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    authority: String,
    authorization: String,
}

impl Connection {
    /// Connects to `address` and sends `token` with every request.
    pub async fn open(address: SocketAddr, token: &str) -> Result<Self, ApiBenchError> {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(ApiBenchError::connect)?;
        stream.set_nodelay(true).map_err(ApiBenchError::connect)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // Drives the connection until the sender is dropped or the server closes it.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection {
            sender,
            authority: address.to_string(),
            authorization: format!("Bearer {token}"),
        })
    }

    /// Sends a request and returns the response once its head has arrived; a status
    /// other than `expected` is an error carrying the body.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        expected: StatusCode,
    ) -> Result<Incoming, ApiBenchError> {
        self.sender.ready().await?;
        let request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, &self.authority)
            .header(header::AUTHORIZATION, &self.authorization)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, "outpost-bench/1")
            .body(Full::new(body))
            .map_err(|e| ApiBenchError::Unexpected(format!("cannot build a request: {e}")))?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body();
        if status != expected {
            let bytes = body.collect().await?.to_bytes();
            return Err(ApiBenchError::Status {
                request: format!("{method} {path}"),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        Ok(body)
    }

    /// Sends a request and reads the whole response body.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        expected: StatusCode,
    ) -> Result<Bytes, ApiBenchError> {
        let body = self.send(method, path, body, expected).await?;
        Ok(body.collect().await?.to_bytes())
    }

    /// POSTs `object` to the Install collection and returns its `resourceVersion`.
    pub async fn create(&mut self, object: &Value) -> Result<Revision, ApiBenchError> {
        let body = self
            .call(
                Method::POST,
                INSTALLS,
                to_bytes(object),
                StatusCode::CREATED,
            )
            .await?;
        object_revision(&body)
    }

    /// PUTs `object` over the Install of its name (with its `resourceVersion` as the
    /// precondition) and returns the new `resourceVersion`.
    pub async fn update(&mut self, object: &Value) -> Result<Revision, ApiBenchError> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .expect("the benchmark's objects are named");
        let path = format!("{INSTALLS}/{name}");
        let body = self
            .call(Method::PUT, &path, to_bytes(object), StatusCode::OK)
            .await?;
        object_revision(&body)
    }
}

/// `object` with the next annotation value and `resourceVersion`: a real change, so
/// that the server's no-op detection does not skip the write.
pub(super) fn next_version(object: &mut Value, seq: usize, revision: Revision) {
    object["metadata"]["resourceVersion"] = json!(revision.to_string());
    object["metadata"]["annotations"] = json!({"bench.outpost.dev/seq": seq.to_string()});
}

fn to_bytes(object: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(object).expect("JSON values encode"))
}

/// Splits a watch response into its lines (one event each).
pub(super) struct Lines {
    body: Incoming,
    buffer: BytesMut,
}

impl Lines {
    /// Reads `body` line by line.
    pub fn new(body: Incoming) -> Self {
        Lines {
            body,
            buffer: BytesMut::new(),
        }
    }

    /// The next complete line, without its newline; `None` when the stream ends.
    pub async fn next(&mut self) -> Result<Option<Bytes>, ApiBenchError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line = self.buffer.split_to(end + 1).freeze();
                return Ok(Some(line.slice(..end)));
            }
            match self.body.frame().await.transpose()? {
                Some(frame) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                None => return Ok(None),
            }
        }
    }
}
