use futures::{Stream, StreamExt as _};
use http_body_util::BodyExt as _;
use serde_json::Value;

use crate::ControlPlane;

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: String,
    /// The body as JSON (`Null` if it is not JSON).
    pub json: Value,
    /// The body as text.
    pub text: String,
    /// The response headers (`Retry-After`, `Set-Cookie`, ...).
    pub headers: http::HeaderMap,
}

impl Reply {
    /// A response header as text, if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a Kubernetes `Status` answer: HTTP `code` (also the body's `code`),
    /// `reason`, and a message starting with `message`.
    pub fn assert_status(&self, code: u16, reason: &str, message: &str) {
        assert_eq!(self.status, code, "{}", self.text);
        assert_eq!(self.json["kind"], "Status", "{}", self.text);
        assert_eq!(self.json["code"], code, "{}", self.text);
        assert_eq!(self.json["reason"], reason, "{}", self.text);
        let got = self.json["message"].as_str().unwrap_or_default();
        assert!(
            got.starts_with(message),
            "message {got:?}, expected {message:?}"
        );
    }

    /// The `metadata.name` of each item of a list answer, in order; panics if the body is
    /// not a list of named objects.
    pub fn item_names(&self) -> Vec<&str> {
        self.json["items"]
            .as_array()
            .unwrap_or_else(|| panic!("not a list: {}", self.text))
            .iter()
            .map(|item| item["metadata"]["name"].as_str().expect("a named item"))
            .collect()
    }
}

impl ControlPlane {
    async fn raw_client(&self, token: Option<&str>) -> kube_client::Client {
        let mut config = match token {
            Some(token) => self.client_config_as(token).await,
            None => {
                let mut config = kube_client::Config::new(self.url.parse().expect("URL"));
                let pem = std::fs::read(&self.tls.ca).expect("CA");
                let der = pem_to_der(&pem);
                config.root_cert = Some(vec![der]);
                config
            }
        };
        // Every answer reaches the test as the server sent it: kube-client would otherwise
        // retry 429, 503 and 504 for minutes.
        config.default_retry = false;
        kube_client::Client::try_from(config).expect("client")
    }

    /// Sends one request as `token`'s user (or with no credentials).
    pub async fn raw(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Reply {
        let client = self.raw_client(token).await;
        let mut request = http::Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(kube_client::client::Body::from(body.into()))
            .expect("request");
        let response = client.send(request).await.expect("the server answers");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Reply {
            status,
            content_type,
            json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            text,
            headers,
        }
    }

    /// POSTs JSON `body` to `path` as each actor who may and may not create there: the
    /// admin gets 422 `Invalid` whose first cause names `field`, and a reply that never
    /// echoes `secret`; the viewer and the approver get 403. (Nothing is stored: the
    /// caller checks the collection.)
    pub async fn post_refused_as_invalid(&self, path: &str, body: &str, field: &str, secret: &str) {
        const JSON: (&str, &str) = ("content-type", "application/json");
        let admin = self
            .raw(Some(&self.admin_token), "POST", path, &[JSON], body)
            .await;
        assert_eq!(
            (admin.status, admin.json["reason"].as_str()),
            (422, Some("Invalid")),
            "{}",
            admin.text
        );
        assert_eq!(
            admin.json["details"]["causes"][0]["field"], field,
            "{}",
            admin.text
        );
        assert!(!admin.text.contains(secret), "{}", admin.text);
        for token in [&self.viewer_token, &self.approver_token] {
            let reply = self.raw(Some(token), "POST", path, &[JSON], body).await;
            assert_eq!(reply.status, 403, "{}", reply.text);
        }
    }

    /// PATCHes `path` as the admin with a body of the given content type.
    pub async fn patch(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        self.raw(
            Some(&self.admin_token),
            "PATCH",
            path,
            &[("content-type", content_type)],
            body,
        )
        .await
    }

    /// Opens a watch (or any streaming GET) as the admin and yields one JSON value per line.
    pub async fn stream_lines(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, impl Stream<Item = Value> + Unpin + use<>) {
        let client = self.client().await;
        let mut request = http::Request::builder().method("GET").uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(kube_client::client::Body::empty())
            .expect("request");
        let response = client.send(request).await.expect("the server answers");
        let status = response.status().as_u16();
        let data = response.into_body().into_data_stream();
        let lines = futures::stream::unfold(
            (data, Vec::<u8>::new()),
            |(mut data, mut buffer)| async move {
                loop {
                    if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buffer.drain(..=end).collect();
                        let value =
                            serde_json::from_slice(&line).expect("one JSON object per line");
                        return Some((value, (data, buffer)));
                    }
                    match data.next().await {
                        Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                        _ => return None,
                    }
                }
            },
        );
        (status, Box::pin(lines))
    }
}

fn pem_to_der(pem: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(pem);
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM body is base64")
}
