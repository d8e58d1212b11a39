//! Deletes of one object: preconditions, the propagation policy (foreground and orphan finalizers), and a deletion
//! that waits on finalizers.

use serde_json::{Value, json};

use super::{Core, DeleteOptions, Deleted, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation};
use crate::admission;
use crate::api_error::{ApiError, ApiResult};
use crate::meta;
use crate::registry::ResourceType;
use crate::store::{StoreError, rv_of};

impl Core {
    /// DELETE of one object.
    pub async fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let key = Self::key(rt, namespace, name);
        for _ in 0..32 {
            let Some(stored) = self.store.get(&key) else {
                return Err(ApiError::not_found(rt.subject(name)));
            };
            let current = self.served(rt, &stored, true).await?;
            if let Some(uid) = &opts.precondition_uid
                && uid != meta::uid(&current)
            {
                return Err(ApiError::conflict(
                    rt.subject(name),
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(&current)
                    ),
                ));
            }
            if let Some(rv) = &opts.precondition_rv
                && rv != meta::resource_version(&current)
            {
                return Err(ApiError::conflict(
                    rt.subject(name),
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta::resource_version(&current)
                    ),
                ));
            }
            if !opts.internal && !admission::exempt(rt) {
                let req = admission::Request {
                    rt,
                    subresource: None,
                    operation: "DELETE",
                    namespace,
                    name,
                    object: None,
                    old_object: Some(&current),
                    dry_run: opts.dry_run,
                };
                admission::validate(&self.store, &req, &mut Vec::new()).await?;
            }
            let mut finalizers = meta::finalizers(&current);
            let mut add = |f: &str| {
                if !finalizers.iter().any(|x| x == f) {
                    finalizers.push(f.to_string());
                }
            };
            match opts.propagation {
                Some(Propagation::Foreground) => add(FOREGROUND_FINALIZER),
                Some(Propagation::Orphan) => add(ORPHAN_FINALIZER),
                _ => {}
            }
            let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
            let graceful = is_namespace || !finalizers.is_empty();
            if !graceful {
                if opts.dry_run {
                    return Ok(Deleted::Now(current));
                }
                match self.store.delete(&key, Some(rv_of(&stored))) {
                    Ok(last) => {
                        self.after_delete(rt, &last).await;
                        return Ok(Deleted::Now(self.served(rt, &last, true).await?));
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound) => return Err(ApiError::not_found(rt.subject(name))),
                    Err(e) => return Err(ApiError::internal(e.to_string())),
                }
            }
            let mut new = current.clone();
            let already = meta::is_deleting(&current);
            if !already {
                meta::set_meta(&mut new, "deletionTimestamp", json!(meta::now_time()));
                meta::set_meta(
                    &mut new,
                    "deletionGracePeriodSeconds",
                    json!(opts.grace_period_seconds.unwrap_or(0).max(0)),
                );
                if let Some(g) = new.pointer("/metadata/generation").and_then(Value::as_i64)
                    && g > 0
                {
                    meta::set_meta(&mut new, "generation", json!(g + 1));
                }
            }
            if !finalizers.is_empty() {
                meta::set_meta(&mut new, "finalizers", json!(finalizers));
            }
            if is_namespace {
                let root = meta::object_mut(&mut new);
                root.insert("status".into(), json!({"phase": "Terminating"}));
            }
            if new == current || opts.dry_run {
                return Ok(Deleted::Pending(new));
            }
            let to_store = self.storable(rt, new).await?;
            match self.store.update(&key, rv_of(&stored), to_store) {
                Ok(saved) => {
                    self.after_write(rt, &saved).await;
                    return Ok(Deleted::Pending(self.served(rt, &saved, true).await?));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => return Err(ApiError::not_found(rt.subject(name))),
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        Err(ApiError::conflict(
            rt.subject(name),
            "too many concurrent writers",
        ))
    }
}
