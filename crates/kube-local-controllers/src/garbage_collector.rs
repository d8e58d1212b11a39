//! Garbage collection by ownerReferences: background deletion of orphaned dependents, foreground and orphan finalizers.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use crate::core::{
    Core, DeleteOptions, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Subresource,
};
use crate::meta;
use crate::store::ObjectKey;
use crate::views;

const MANAGER: &str = "kube-controller-manager";

fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    meta::value_at(obj, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid")?.as_str()?.to_string();
                    Some((
                        uid,
                        r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn delete(core: &Core, key: &ObjectKey, obj: &Value, propagation: Propagation) {
    let Some(rt) = core.registry.storage_type(&key.storage) else {
        return;
    };
    let view = views::to_view(&rt, obj);
    let opts = DeleteOptions {
        propagation: Some(propagation),
        precondition_uid: Some(meta::uid(obj).to_string()),
        internal: true,
        ..Default::default()
    };
    if let Err(e) = core
        .delete(&rt, meta::namespace(&view), meta::name(&view), &opts)
        .await
        && e.code != 404
        && e.code != 409
    {
        tracing::warn!(name = %meta::name(obj), error = %e, "garbage collection delete failed");
    }
}

async fn update(core: &Core, key: &ObjectKey, f: &mut (dyn FnMut(&mut Value) -> bool + Send)) {
    let Some(rt) = core.registry.storage_type(&key.storage) else {
        return;
    };
    if let Err(e) = core
        .internal_update(
            &rt,
            &key.namespace,
            &key.name,
            Subresource::Main,
            MANAGER,
            f,
        )
        .await
        && e.code != 404
    {
        tracing::warn!(name = %key.name, error = %e, "garbage collection update failed");
    }
}

async fn remove_finalizer(core: &Core, key: &ObjectKey, finalizer: &str) {
    update(core, key, &mut |obj| {
        meta::remove_from_list(obj, "/metadata/finalizers", finalizer)
    })
    .await;
}

/// One pass over all objects; returns whether anything was done.
pub async fn reconcile(core: &Arc<Core>) -> bool {
    let all = core.store.all();
    let uids: HashSet<&str> = all.iter().map(|(_, v)| meta::uid(v)).collect();
    let mut acted = false;
    for (key, obj) in &all {
        let owners = owner_uids(obj);
        if owners.is_empty() || meta::is_deleting(obj) {
            continue;
        }
        let dangling: Vec<&String> = owners
            .iter()
            .map(|(u, _)| u)
            .filter(|u| !uids.contains(u.as_str()))
            .collect();
        if dangling.len() == owners.len() {
            delete(core, key, obj, Propagation::Background).await;
            acted = true;
        } else if !dangling.is_empty() {
            let gone: Vec<String> = dangling.into_iter().cloned().collect();
            update(core, key, &mut |o| {
                let Some(refs) = o
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                else {
                    return false;
                };
                refs.retain(|r| {
                    !gone
                        .iter()
                        .any(|g| r.get("uid").and_then(Value::as_str) == Some(g))
                });
                true
            })
            .await;
            acted = true;
        }
    }
    for (key, obj) in &all {
        if !meta::is_deleting(obj) {
            continue;
        }
        let finalizers = meta::finalizers(obj);
        let uid = meta::uid(obj);
        let dependents: Vec<&(ObjectKey, Arc<Value>)> = all
            .iter()
            .filter(|(_, d)| owner_uids(d).iter().any(|(u, _)| u == uid))
            .collect();
        if finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for (dkey, _) in &dependents {
                let owner = uid.to_string();
                update(core, dkey, &mut |o| {
                    let Some(refs) = o
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    else {
                        return false;
                    };
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner.as_str()));
                    if refs.is_empty()
                        && let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut)
                    {
                        m.remove("ownerReferences");
                    }
                    true
                })
                .await;
            }
            remove_finalizer(core, key, ORPHAN_FINALIZER).await;
            acted = true;
        } else if finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            let blocking = dependents
                .iter()
                .filter(|(_, d)| owner_uids(d).iter().any(|(u, block)| u == uid && *block))
                .count();
            for (dkey, d) in &dependents {
                if !meta::is_deleting(d) {
                    let has_own = all
                        .iter()
                        .any(|(_, x)| owner_uids(x).iter().any(|(u, _)| u == meta::uid(d)));
                    delete(
                        core,
                        dkey,
                        d,
                        if has_own {
                            Propagation::Foreground
                        } else {
                            Propagation::Background
                        },
                    )
                    .await;
                    acted = true;
                }
            }
            if blocking == 0 {
                remove_finalizer(core, key, FOREGROUND_FINALIZER).await;
                acted = true;
            }
        }
    }
    acted
}
