//! The `namespaces/{name}/finalize` subresource, and the removal of a terminating namespace once nothing holds it
//! (also done by the namespace lifecycle controller when it has purged the namespace's contents).

use serde_json::{Value, json};

use crate::api_error::ApiResult;
use crate::core::{Core, Subresource};
use crate::meta;
use crate::registry::ResourceType;
use crate::store::ObjectKey;

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

/// Removes the namespace `name` once it is being deleted and neither its `spec.finalizers` nor its
/// `metadata.finalizers` hold it any more.
pub fn remove_if_done(core: &Core, name: &str) {
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
