//! Query options of a request: write options (dry run, field validation, field manager), delete options (from the
//! query or the body), label and field selectors.

use std::collections::HashMap;

use axum::extract::Request;
use http::header;
use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::core::{DeleteOptions, FieldValidation, Propagation, WriteOptions};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};

pub(super) fn query_map(req: &Request) -> HashMap<String, String> {
    req.uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

pub(super) fn header_str(req: &Request, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

pub(super) fn flag(q: &HashMap<String, String>, key: &str) -> bool {
    matches!(q.get(key).map(String::as_str), Some("true") | Some("1"))
}

pub(super) fn write_options(
    q: &HashMap<String, String>,
    user_agent: Option<&str>,
) -> ApiResult<WriteOptions> {
    let dry_run = match q.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dry run value: {other:?}: supported values: \"All\""
            )));
        }
    };
    let field_validation = match q.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            )));
        }
    };
    let field_manager = q.get("fieldManager").cloned().filter(|m| !m.is_empty());
    Ok(WriteOptions {
        dry_run,
        field_manager: field_manager.unwrap_or_else(|| {
            user_agent
                .and_then(|ua| ua.split('/').next())
                .unwrap_or("unknown")
                .to_string()
        }),
        field_validation,
        force: flag(q, "force"),
        internal: false,
    })
}

pub(super) fn explicit_manager(q: &HashMap<String, String>) -> bool {
    q.get("fieldManager").is_some_and(|m| !m.is_empty())
}

pub(super) fn delete_options(q: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut opts = DeleteOptions::default();
    let parsed: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("unable to decode DeleteOptions: {e}")))?
    };
    let get = |k: &str| -> Option<String> {
        q.get(k).cloned().or_else(|| {
            parsed.get(k).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
    };
    opts.propagation = match get("propagationPolicy").as_deref() {
        None | Some("") | Some("null") => None,
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![crate::api_error::FieldCause::unsupported(
                    "propagationPolicy",
                    &json!(other),
                    &[
                        json!("Foreground"),
                        json!("Background"),
                        json!("Orphan"),
                        json!("nil"),
                    ],
                )],
            ));
        }
    };
    if opts.propagation.is_none() {
        match get("orphanDependents").as_deref() {
            Some("true") => opts.propagation = Some(Propagation::Orphan),
            Some("false") => opts.propagation = Some(Propagation::Background),
            _ => {}
        }
    }
    opts.grace_period_seconds = get("gracePeriodSeconds").and_then(|g| g.parse().ok());
    opts.dry_run = match get("dryRun").as_deref() {
        None | Some("") | Some("[]") => false,
        Some(v) if v.contains("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dry run value: {other}"
            )));
        }
    };
    if let Some(p) = parsed.get("preconditions") {
        opts.precondition_uid = p.get("uid").and_then(Value::as_str).map(String::from);
        opts.precondition_rv = p
            .get("resourceVersion")
            .and_then(Value::as_str)
            .map(String::from);
    }
    Ok(opts)
}

pub(super) fn selectors(
    rt: &ResourceType,
    q: &HashMap<String, String>,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let extra: Vec<String> = rt
        .custom
        .as_ref()
        .map(|c| c.selectable_fields.clone())
        .unwrap_or_default();
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        &rt.group,
        &rt.plural,
        &extra,
    )?;
    Ok((labels, fields))
}
