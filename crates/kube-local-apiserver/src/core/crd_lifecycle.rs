//! What the API server does after a CustomResourceDefinition is written or deleted, as upstream's apiextensions
//! controllers: registering its served versions, setting `NamesAccepted`/`Established`/`storedVersions`, and purging
//! its objects on delete.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Core, Subresource};
use crate::crd::resource_types;
use crate::meta;
use crate::registry::StorageResource;

fn condition(type_: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": "True", "lastTransitionTime": meta::now_time(), "reason": reason, "message": message})
}

/// Registers the CRD's versions and marks it established, as the apiextensions controllers do.
pub(super) async fn on_crd_written(core: &Core, crd: &Arc<Value>) {
    let name = meta::name(crd).to_string();
    if meta::is_deleting(crd) {
        return;
    }
    core.registry.set_custom(&name, resource_types(crd));
    let Some(crd_type) =
        core.registry
            .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return;
    };
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let storage_version = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name").cloned());
    let result = core
        .internal_update(
            &crd_type,
            "",
            &name,
            Subresource::Status,
            "kube-apiserver",
            &mut |obj| {
                let root = meta::object_mut(obj);
                let status = root.entry("status").or_insert_with(|| json!({}));
                let Some(st) = status.as_object_mut() else {
                    return false;
                };
                let mut accepted = names.clone();
                if let Some(a) = accepted.as_object_mut() {
                    if !a.contains_key("singular") {
                        let kind = a
                            .get("kind")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_ascii_lowercase();
                        a.insert("singular".into(), json!(kind));
                    }
                    if !a.contains_key("listKind") {
                        let kind = a
                            .get("kind")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string();
                        a.insert("listKind".into(), json!(format!("{kind}List")));
                    }
                }
                let mut changed = st.get("acceptedNames") != Some(&accepted);
                st.insert("acceptedNames".into(), accepted);
                let conditions = st.entry("conditions").or_insert_with(|| json!([]));
                if let Some(cs) = conditions.as_array_mut() {
                    for (t, reason, msg) in [
                        ("NamesAccepted", "NoConflicts", "no conflicts found"),
                        (
                            "Established",
                            "InitialNamesAccepted",
                            "the initial names have been accepted",
                        ),
                    ] {
                        if !cs
                            .iter()
                            .any(|c| c.get("type").and_then(Value::as_str) == Some(t))
                        {
                            cs.push(condition(t, reason, msg));
                            changed = true;
                        }
                    }
                }
                if let Some(sv) = &storage_version {
                    let stored = st.entry("storedVersions").or_insert_with(|| json!([]));
                    if let Some(list) = stored.as_array_mut()
                        && !list.contains(sv)
                    {
                        list.push(sv.clone());
                        changed = true;
                    }
                }
                changed
            },
        )
        .await;
    if let Err(e) = result {
        tracing::warn!(crd = %name, error = %e, "could not establish CRD");
    }
}

/// Deleting a CRD removes its objects and stops serving it.
pub(super) fn on_crd_deleted(core: &Core, crd: &Arc<Value>) {
    let name = meta::name(crd).to_string();
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    core.registry.set_custom(&name, Vec::new());
    let storage = StorageResource {
        group,
        resource: plural,
    };
    for (key, _) in core
        .store
        .all()
        .into_iter()
        .filter(|(k, _)| k.storage == storage)
    {
        let _ = core.store.delete(&key, None);
    }
}
