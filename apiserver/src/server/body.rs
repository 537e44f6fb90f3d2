//! Request bodies (size limit, JSON or YAML) and JSON responses.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::status::ApiError;

/// How much of an oversized body is read and thrown away before answering 413, so the
/// client, still writing, gets the answer instead of a broken connection.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// Reads the whole body, refusing more than `limit` bytes with 413.
pub async fn read(body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    use futures::StreamExt as _;
    let mut stream = body.into_data_stream();
    let mut buffer = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::BadRequest(format!("cannot read the request body: {e}")))?;
        seen += chunk.len();
        if seen <= limit {
            buffer.extend_from_slice(&chunk);
        } else if seen > DRAIN_LIMIT {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::TooLarge(limit));
    }
    Ok(buffer.freeze())
}

/// The request's content type, without parameters.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("application/json")
        .trim()
        .to_ascii_lowercase()
}

/// Decodes an object from JSON or YAML, by content type.
pub fn decode_object(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let kind = content_type(headers);
    let value: Value = match kind.as_str() {
        "application/json" | "" | "*/*" => serde_json::from_slice(bytes).map_err(|e| {
            ApiError::BadRequest(format!("the body of the request is not valid JSON: {e}"))
        })?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| ApiError::BadRequest("the YAML body is not UTF-8".into()))?;
            serde_saphyr::from_str(text).map_err(|e| {
                ApiError::BadRequest(format!("the body of the request is not valid YAML: {e}"))
            })?
        }
        "application/vnd.kubernetes.protobuf" => {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml".into(),
            ));
        }
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format ({other}) - accepted media types include: application/json, application/yaml"
            )));
        }
    };
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "the body of the request must be a JSON object".into(),
        ));
    }
    crate::patch::check_trackable(&value)?;
    Ok(value)
}

/// A JSON response.
pub fn json(code: StatusCode, value: &Value) -> Response {
    let bytes = serde_json::to_vec(value).expect("a JSON value serialises");
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// A JSON body already encoded.
pub fn json_bytes(code: StatusCode, bytes: bytes::Bytes) -> Response {
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// A JSON response with `Warning` headers (299 warnings, as kube-apiserver sends).
pub fn json_with_warnings(code: StatusCode, value: &Value, warnings: &[String]) -> Response {
    with_warnings(json(code, value), warnings)
}

/// [`json_with_warnings`] with the body already encoded.
pub fn json_bytes_with_warnings(
    code: StatusCode,
    bytes: bytes::Bytes,
    warnings: &[String],
) -> Response {
    with_warnings(json_bytes(code, bytes), warnings)
}

fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {:?}", warning);
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}
