//! Responses: JSON bodies with their status code, errors as `Status`, warnings as headers, aggregated discovery.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::api_error::ApiError;
use crate::core::Written;
use crate::discovery;
use crate::output::{self, Format};
use crate::registry::ResourceType;

pub(super) fn json_response(code: u16, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// What kube-apiserver's mux answers for a path under no served API group or version: plain text, not a Status
/// (clients read the code; kubectl says "the server could not find the requested resource").
pub(super) fn page_not_found() -> Response {
    let mut resp = Response::new(Body::from("404 page not found\n"));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub(super) fn error_response(e: &ApiError) -> Response {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(seconds) = e.retry_after_seconds() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    resp
}

pub(super) fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

pub(super) fn aggregated_response(body: &Value) -> Response {
    let mut r = json_response(200, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    r
}

pub(super) fn written_response(format: Format, rt: &ResourceType, w: Written) -> Response {
    let code = if w.created { 201 } else { 200 };
    with_warnings(
        json_response(code, &output::object(format, rt, w.object)),
        &w.warnings,
    )
}
