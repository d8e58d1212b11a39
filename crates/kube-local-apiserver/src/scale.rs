//! The autoscaling/v1 `Scale` view of a scalable object (what the `/scale` subresource serves and its webhooks see),
//! mapped through the type's replica and selector paths. Writes through `/scale` are `core::scale_subresource`.

use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::meta;
use crate::registry::{ResourceType, ScalePaths};
use crate::selector::LabelSelector;

fn parts(path: &str) -> Vec<&str> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect()
}

fn get<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    meta::value_at(obj, &parts(path))
}

/// Sets the value at a dotted path such as `.spec.replicas`, creating the objects on the way.
pub fn set(obj: &mut Value, path: &str, v: Value) {
    let ps = parts(path);
    let Some((last, parents)) = ps.split_last() else {
        return;
    };
    let mut cur = obj;
    for p in parents {
        let m = meta::object_mut(cur);
        cur = m.entry(p.to_string()).or_insert_with(|| json!({}));
    }
    meta::object_mut(cur).insert(last.to_string(), v);
}

/// The type's scale paths; 404 for a type without a `/scale` subresource.
pub fn paths(rt: &ResourceType) -> ApiResult<&ScalePaths> {
    rt.scale.as_ref().ok_or_else(ApiError::not_found_path)
}

pub fn to_scale(rt: &ResourceType, obj: &Value) -> Value {
    let Some(p) = rt.scale.as_ref() else {
        return Value::Null;
    };
    let selector = p
        .label_selector
        .as_deref()
        .and_then(|path| get(obj, path))
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => LabelSelector::from_object(other)
                .map(|l| l.to_query())
                .unwrap_or_default(),
        });
    let mut status =
        json!({"replicas": get(obj, &p.status_replicas).and_then(Value::as_i64).unwrap_or(0)});
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = json!(s);
    }
    let mut metadata = json!({
        "name": meta::name(obj),
        "uid": meta::uid(obj),
        "resourceVersion": meta::resource_version(obj),
        "creationTimestamp": obj.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null),
    });
    if rt.namespaced {
        metadata["namespace"] = json!(meta::namespace(obj));
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": get(obj, &p.spec_replicas).and_then(Value::as_i64).unwrap_or(0)},
        "status": status,
    })
}

/// Writes the replicas of `scale` (e.g. as a mutating webhook changed them)
/// into `obj`.
pub fn set_replicas(rt: &ResourceType, obj: &mut Value, scale: &Value) -> ApiResult<()> {
    let replicas = replicas_of(scale)?;
    set(obj, &paths(rt)?.spec_replicas, json!(replicas));
    Ok(())
}

/// `spec.replicas` of a Scale (0 when unset); 422 when it is not a non-negative integer.
pub fn replicas_of(scale: &Value) -> ApiResult<i64> {
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_i64().filter(|r| *r >= 0).ok_or_else(|| {
            ApiError::invalid(
                "autoscaling",
                "Scale",
                meta::name(scale),
                vec![crate::api_error::FieldCause::invalid(
                    "spec.replicas",
                    v,
                    "must be greater than or equal to 0",
                )],
            )
        }),
    }
}
