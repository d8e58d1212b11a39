//! The service account controller: every active namespace has a `default`
//! ServiceAccount (pods without `serviceAccountName` run as it), as upstream's.

use std::sync::Arc;

use serde_json::json;

use crate::core::{Core, WriteOptions};
use crate::meta;
use crate::registry::StorageResource;

/// The account pods run as when they name none.
pub const DEFAULT: &str = "default";

/// One pass: creates the missing `default` accounts; returns whether it created any.
pub async fn reconcile(core: &Arc<Core>) -> bool {
    let namespaces = StorageResource {
        group: String::new(),
        resource: "namespaces".into(),
    };
    let accounts = StorageResource {
        group: String::new(),
        resource: "serviceaccounts".into(),
    };
    let Some(rt) = core.registry.storage_type(&accounts) else {
        return false;
    };
    let mut acted = false;
    for ns in core.store.list(&namespaces, None).objects {
        if meta::is_deleting(&ns) {
            continue;
        }
        let name = meta::name(&ns);
        let present = core
            .store
            .list(&accounts, Some(name))
            .objects
            .iter()
            .any(|sa| meta::name(sa) == DEFAULT);
        if present {
            continue;
        }
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT, "namespace": name}});
        match core
            .create(
                &rt,
                name,
                account,
                &WriteOptions::internal("kube-controller-manager"),
            )
            .await
        {
            Ok(_) => acted = true,
            Err(e) if e.reason == "AlreadyExists" => {}
            // A namespace being deleted refuses new objects; the next pass skips it.
            Err(e) => tracing::debug!(namespace = %name, error = %e, "default service account"),
        }
    }
    acted
}
