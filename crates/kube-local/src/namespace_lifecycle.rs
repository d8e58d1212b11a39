//! Namespace lifecycle: a deleted namespace goes Terminating, its contents are purged, then the namespace disappears.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_error::ApiResult;
use crate::core::{Core, DeleteOptions, Propagation, Subresource};
use crate::meta;
use crate::registry::ResourceType;
use crate::store::ObjectKey;
use crate::views;

const FINALIZER: &str = "kubernetes";

/// PUT `namespaces/{name}/finalize`: replaces `spec.finalizers`.
pub async fn finalize(core: &Core, rt: &ResourceType, name: &str, body: Value) -> ApiResult<Value> {
    let finalizers = body
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or(json!([]));
    let written = core
        .internal_update(
            rt,
            "",
            name,
            Subresource::Main,
            "kube-apiserver",
            &mut |obj| {
                let root = meta::object_mut(obj);
                let spec = root.entry("spec").or_insert_with(|| json!({}));
                meta::object_mut(spec).insert("finalizers".into(), finalizers.clone());
                true
            },
        )
        .await?;
    match written {
        Some(w) => {
            remove_if_done(core, name);
            Ok(w.object)
        }
        None => core.get(rt, "", name),
    }
}

fn remove_if_done(core: &Core, name: &str) {
    let key = ObjectKey::namespace(name);
    if let Some(ns) = core.store.get(&key) {
        let spec_done = ns
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if meta::is_deleting(&ns) && spec_done && meta::finalizers(&ns).is_empty() {
            let _ = core.store.delete(&key, None);
        }
    }
}

/// One pass: purge contents of terminating namespaces; returns whether anything was done.
pub async fn reconcile(core: &Arc<Core>) -> bool {
    let mut acted = false;
    let all = core.store.all();
    let terminating: Vec<String> = all
        .iter()
        .filter(|(k, v)| {
            k.storage.group.is_empty() && k.storage.resource == "namespaces" && meta::is_deleting(v)
        })
        .map(|(k, _)| k.name.clone())
        .collect();
    for ns in terminating {
        let contents: Vec<(ObjectKey, Arc<Value>)> = all
            .iter()
            .filter(|(k, _)| k.namespace == ns)
            .cloned()
            .collect();
        if contents.is_empty() {
            let Some(rt) = core.registry.find("", "v1", "namespaces") else {
                continue;
            };
            let _ = core
                .internal_update(
                    &rt,
                    "",
                    &ns,
                    Subresource::Main,
                    "kube-controller-manager",
                    &mut |obj| {
                        let Some(fs) = obj
                            .pointer_mut("/spec/finalizers")
                            .and_then(Value::as_array_mut)
                        else {
                            return false;
                        };
                        let before = fs.len();
                        fs.retain(|f| f.as_str() != Some(FINALIZER));
                        fs.len() != before
                    },
                )
                .await;
            remove_if_done(core, &ns);
            acted = true;
            continue;
        }
        for (key, obj) in contents {
            if meta::is_deleting(&obj) {
                continue;
            }
            let Some(rt) = core.registry.storage_type(&key.storage) else {
                let _ = core.store.delete(&key, None);
                continue;
            };
            let view = views::to_view(&rt, &obj);
            let opts = DeleteOptions {
                propagation: Some(Propagation::Background),
                internal: true,
                ..Default::default()
            };
            if let Err(e) = core
                .delete(&rt, meta::namespace(&view), meta::name(&view), &opts)
                .await
                && e.code != 404
            {
                tracing::warn!(namespace = %ns, error = %e, "namespace purge failed");
            }
            acted = true;
        }
    }
    acted
}
