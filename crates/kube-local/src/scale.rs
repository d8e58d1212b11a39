//! The `/scale` subresource (autoscaling/v1 `Scale`), mapped through the type's replica and selector paths.

use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::core::{Candidate, Core, Subresource, WriteOptions, Written};
use crate::meta;
use crate::patch::{self, PatchKind};
use crate::registry::{ResourceType, ScalePaths};
use crate::selector::LabelSelector;
use crate::type_info::TypeInfo;

fn parts(path: &str) -> Vec<&str> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect()
}

fn get<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    meta::value_at(obj, &parts(path))
}

fn set(obj: &mut Value, path: &str, v: Value) {
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

fn paths(rt: &ResourceType) -> ApiResult<&ScalePaths> {
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

fn replicas_of(scale: &Value) -> ApiResult<i64> {
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

async fn scaled(
    core: &Core,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    opts: &WriteOptions,
    mut to_scale_obj: impl FnMut(&Value) -> ApiResult<Value> + Send,
) -> ApiResult<Written> {
    let p = paths(rt)?.clone();
    let w = core
        .write(
            rt,
            ns,
            name,
            Subresource::Scale,
            opts,
            false,
            &mut |current| {
                let Some(current) = current else {
                    return Err(ApiError::not_found(rt.subject(name)));
                };
                let new_scale = to_scale_obj(&to_scale(rt, current))?;
                let replicas = replicas_of(&new_scale)?;
                let wanted_rv = meta::resource_version(&new_scale).to_string();
                let mut obj = current.clone();
                set(&mut obj, &p.spec_replicas, json!(replicas));
                let precondition =
                    !wanted_rv.is_empty() && wanted_rv != meta::resource_version(current);
                if precondition {
                    meta::set_meta(&mut obj, "resourceVersion", json!(wanted_rv));
                }
                Ok(Candidate {
                    object: obj,
                    rv_is_precondition: precondition,
                    managed: false,
                })
            },
        )
        .await?;
    Ok(Written {
        object: to_scale(rt, &w.object),
        ..w
    })
}

pub async fn update(
    core: &Core,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    body: Value,
    opts: &WriteOptions,
) -> ApiResult<Written> {
    scaled(core, rt, ns, name, opts, |_| Ok(body.clone())).await
}

pub async fn patch(
    core: &Core,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    kind: PatchKind,
    body: &[u8],
    opts: &WriteOptions,
) -> ApiResult<Written> {
    if kind == PatchKind::Apply {
        return Err(ApiError::unsupported_media(
            "server-side apply of /scale is not supported by kube-local",
        ));
    }
    let ti = TypeInfo::builtin("Scale");
    scaled(core, rt, ns, name, opts, |current| {
        patch::apply(kind, current, body, &ti)
    })
    .await
}
