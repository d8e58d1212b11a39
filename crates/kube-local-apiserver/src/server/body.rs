//! Request bodies: read up to a limit and decoded by content type (JSON, YAML, protobuf of built-in kinds).

use axum::extract::Request;
use http::header;
use serde_json::Value;

use crate::api_error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::subresource::PathSubresource;

use super::options::header_str;
use super::protobuf;

const MAX_BODY: usize = 3 * 1024 * 1024;

pub(super) async fn read_body(req: Request) -> ApiResult<(Option<String>, bytes::Bytes)> {
    let ct = header_str(&req, header::CONTENT_TYPE).map(String::from);
    let body = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| {
            ApiError::bad_request(format!("unable to read request body: {e}"))
                .with_reason("RequestEntityTooLarge")
        })?;
    Ok((ct, body))
}

/// The apiVersion and kind a write's body is decoded as when it does not say (protobuf envelopes may not).
pub(super) fn body_kind(
    rt: &ResourceType,
    subresource: Option<PathSubresource>,
) -> (String, String) {
    match subresource {
        Some(PathSubresource::Scale) => ("autoscaling/v1".into(), "Scale".into()),
        Some(PathSubresource::Token) => ("authentication.k8s.io/v1".into(), "TokenRequest".into()),
        Some(PathSubresource::Eviction) => ("policy/v1".into(), "Eviction".into()),
        _ if rt.group.is_empty() => (rt.version.clone(), rt.kind.clone()),
        _ => (format!("{}/{}", rt.group, rt.version), rt.kind.clone()),
    }
}

pub(super) fn decode_object(
    rt: &ResourceType,
    subresource: Option<PathSubresource>,
    ct: Option<&str>,
    body: &[u8],
) -> ApiResult<Value> {
    let base = ct
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the object provided is unrecognized: {e}"))
        }),
        "application/yaml" => serde_saphyr::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}"))),
        // Custom resources have no protobuf form upstream either.
        protobuf::MEDIA_TYPE if !rt.is_custom() => {
            let (api_version, kind) = body_kind(rt, subresource);
            protobuf::decode(body, &api_version, &kind)
        }
        other => Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml{}; got {other:?}",
            if rt.is_custom() {
                String::new()
            } else {
                format!(", {}", protobuf::MEDIA_TYPE)
            }
        ))),
    }
}
