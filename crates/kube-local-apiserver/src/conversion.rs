//! CRD version conversion through `spec.conversion.strategy: Webhook`: ConversionReview calls (v1, or v1beta1 when
//! that is all the CRD accepts) over HTTPS with the `caBundle`, and the checks upstream's webhook converter makes on
//! the answer (uid, result status, object count, apiVersion and kind, identity metadata; only labels and annotations
//! may change in metadata).

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::meta;
use crate::registry::ResourceType;
use crate::store::Store;
use crate::webhook_client::{self, CallError};

/// Upstream's fixed timeout for conversion webhooks.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether objects of `rt`'s CRD go through a conversion webhook.
pub fn uses_webhook(rt: &ResourceType) -> bool {
    rt.custom
        .as_ref()
        .is_some_and(|c| c.conversion_webhook.is_some())
}

/// Why a conversion failed, worded like upstream's webhook converter (without the "conversion webhook for …" prefix).
enum Failure {
    /// `… failed: <why>`
    Call(String),
    /// `… returned <why>`
    Answer(String),
}

fn api_version_kind(obj: &Value) -> String {
    format!(
        "{}, Kind={}",
        obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
        obj.get("kind").and_then(Value::as_str).unwrap_or("")
    )
}

/// The error a client sees. Reads surface the converter's error as is (500 with no reason, as upstream's generic
/// error conversion does); writes wrap it in an InternalError.
fn to_api_error(subject: &Value, failure: Failure, write: bool) -> ApiError {
    let gvk = api_version_kind(subject);
    let message = match failure {
        Failure::Call(why) => format!("conversion webhook for {gvk} failed: {why}"),
        Failure::Answer(why) => format!("conversion webhook for {gvk} returned {why}"),
    };
    if write {
        ApiError::internal(format!("Internal error occurred: {message}"))
    } else {
        ApiError::internal(message).with_reason("")
    }
}

fn call_error_text(e: CallError) -> String {
    match e {
        CallError::Config(s) | CallError::Transport(s) | CallError::Response(s) => s,
        CallError::Timeout => "context deadline exceeded".into(),
    }
}

fn review_version(webhook: &Value) -> Result<&'static str, String> {
    let accepted: Vec<&str> = webhook
        .get("conversionReviewVersions")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    accepted
        .into_iter()
        .find_map(|v| match v {
            "v1" => Some("v1"),
            "v1beta1" => Some("v1beta1"),
            _ => None,
        })
        .ok_or_else(|| "no supported conversion review versions".to_string())
}

/// Sends `objects` (all needing conversion) in one review; returns the converted objects in order.
async fn call(
    store: &Store,
    webhook: &Value,
    objects: &[Value],
    desired: &str,
) -> Result<Vec<Value>, Failure> {
    let version = review_version(webhook).map_err(Failure::Call)?;
    let api_version = format!("apiextensions.k8s.io/{version}");
    let uid = meta::new_uid();
    let review = json!({
        "apiVersion": api_version,
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    });
    let client_config = webhook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let answer = webhook_client::call(store, &client_config, &review, TIMEOUT)
        .await
        .map_err(|e| Failure::Call(call_error_text(e)))?;
    if version == "v1" {
        let (got_api_version, got_kind) = (
            answer
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or(""),
            answer.get("kind").and_then(Value::as_str).unwrap_or(""),
        );
        if (got_api_version, got_kind) != (api_version.as_str(), "ConversionReview") {
            return Err(Failure::Call(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {got_api_version}, Kind={got_kind}"
            )));
        }
    }
    let response = answer
        .get("response")
        .filter(|r| r.is_object())
        .ok_or_else(|| Failure::Call("no response provided".into()))?;
    let got_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if version == "v1" && got_uid != uid {
        return Err(Failure::Call(format!(
            "expected response.uid={uid:?}, got {got_uid:?}"
        )));
    }
    let status = response
        .pointer("/result/status")
        .and_then(Value::as_str)
        .unwrap_or("");
    if status != "Success" {
        let message = response
            .pointer("/result/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(Failure::Call(if message.is_empty() {
            format!("response.result.status was '{status}', not 'Success'")
        } else {
            message.to_string()
        }));
    }
    let converted = response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if converted.len() != objects.len() {
        return Err(Failure::Answer(format!(
            "{} objects, expected {}",
            converted.len(),
            objects.len()
        )));
    }
    Ok(converted)
}

/// Upstream's `validateConvertedObject` + `restoreObjectMeta`: identity must be kept, metadata comes from the
/// original except labels and annotations.
fn checked(original: &Value, mut converted: Value, desired: &str) -> Result<Value, String> {
    let got = converted
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if got != desired {
        return Err(format!(
            "invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    let same = |what: &str, a: &str, b: &str| {
        if a == b {
            Ok(())
        } else {
            Err(format!("must have the same {what}: {a} != {b}"))
        }
    };
    let kind = |o: &Value| {
        o.get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    same("kind", &kind(original), &kind(&converted))?;
    same("name", meta::name(original), meta::name(&converted))?;
    same(
        "namespace",
        meta::namespace(original),
        meta::namespace(&converted),
    )?;
    same("UID", meta::uid(original), meta::uid(&converted))?;
    let answered = converted
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| "missing metadata in converted object".to_string())?;
    let mut restored: Map<String, Value> = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match answered.get(field) {
            None | Some(Value::Null) => {
                restored.remove(field);
            }
            Some(Value::Object(m)) => {
                if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!(
                        "metadata.{field}[{k}] must be a string in converted object"
                    ));
                }
                restored.insert(field.into(), Value::Object(m.clone()));
            }
            Some(_) => {
                return Err(format!("invalid metadata.{field} in converted object"));
            }
        }
    }
    meta::object_mut(&mut converted).insert("metadata".into(), Value::Object(restored));
    Ok(converted)
}

/// Converts objects of `rt`'s CRD to `desired` (`group/version`): those already there are kept, the others go to
/// the webhook in one review. `write` selects how failures are reported (see [`to_api_error`]).
pub async fn convert(
    store: &Store,
    rt: &ResourceType,
    objects: Vec<Value>,
    desired: &str,
    write: bool,
) -> ApiResult<Vec<Value>> {
    let Some(webhook) = rt
        .custom
        .as_ref()
        .and_then(|c| c.conversion_webhook.as_ref())
        .and_then(|c| c.get("webhook"))
    else {
        return Ok(objects);
    };
    let pending: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(desired))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = pending.first() else {
        return Ok(objects);
    };
    let batch: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
    let subject = objects[first].clone();
    let converted = call(store, webhook, &batch, desired)
        .await
        .map_err(|f| to_api_error(&subject, f, write))?;
    let single = objects.len() == 1;
    let mut out = objects;
    for (index, (i, c)) in pending.into_iter().zip(converted).enumerate() {
        let object = checked(&out[i], c, desired).map_err(|why| {
            let at = if single {
                format!("invalid object at index {index}: {why}")
            } else {
                format!("invalid converted object at index {index}: {why}")
            };
            to_api_error(&subject, Failure::Answer(at), write)
        })?;
        out[i] = object;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_other_than_labels_and_annotations_is_restored() {
        let original = json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "a", "uid": "u", "resourceVersion": "5", "labels": {"x": "1"}}});
        let answered = json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a", "uid": "u", "resourceVersion": "99", "labels": {"y": "2"}}, "spec": {}});
        let out = checked(&original, answered, "g/v1").unwrap();
        assert_eq!(out["metadata"]["resourceVersion"], "5");
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
    }

    #[test]
    fn identity_and_version_are_checked() {
        let original = json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "a"}});
        let renamed = json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "b"}});
        assert_eq!(
            checked(&original, renamed, "g/v1").unwrap_err(),
            "must have the same name: a != b"
        );
        let unconverted = json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "a"}});
        assert_eq!(
            checked(&original, unconverted, "g/v1").unwrap_err(),
            "invalid groupVersion (expected g/v1, received g/v2)"
        );
    }

    #[test]
    fn read_failures_have_no_reason_and_writes_are_internal_errors() {
        let obj = json!({"apiVersion": "g/v2", "kind": "K"});
        let read = to_api_error(&obj, Failure::Call("boom".into()), false);
        assert_eq!(read.code, 500);
        assert_eq!(read.reason, "");
        assert_eq!(
            read.message,
            "conversion webhook for g/v2, Kind=K failed: boom"
        );
        let write = to_api_error(&obj, Failure::Answer("2 objects, expected 1".into()), true);
        assert_eq!(write.reason, "InternalError");
        assert_eq!(
            write.message,
            "Internal error occurred: conversion webhook for g/v2, Kind=K returned 2 objects, expected 1"
        );
    }
}
