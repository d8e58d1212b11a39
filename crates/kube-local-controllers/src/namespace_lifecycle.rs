//! Namespace lifecycle: a deleted namespace goes Terminating, its contents are purged, then the namespace disappears.

use std::sync::Arc;

use serde_json::Value;

use crate::core::{Core, DeleteOptions, Propagation, Subresource};
use crate::meta;
use crate::namespace_finalize::remove_if_done;
use crate::store::ObjectKey;
use crate::views;

const FINALIZER: &str = "kubernetes";

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
                    &mut |obj| meta::remove_from_list(obj, "/spec/finalizers", FINALIZER),
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
