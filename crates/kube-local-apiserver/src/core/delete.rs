//! Deletes of one object: preconditions, the propagation policy (foreground and orphan finalizers), a deletion that
//! waits on finalizers, and the graceful deletion of pods (see [`pod_grace_period`]).

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
            match opts.propagation.or_else(|| default_propagation(rt)) {
                Some(Propagation::Foreground) => add(FOREGROUND_FINALIZER),
                Some(Propagation::Orphan) => add(ORPHAN_FINALIZER),
                _ => {}
            }
            let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
            let pod_grace = (rt.group.is_empty() && rt.plural == "pods")
                .then(|| pod_grace_period(&current, opts.grace_period_seconds))
                .flatten();
            let graceful = is_namespace || !finalizers.is_empty() || pod_grace.is_some();
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
            // A pod already terminating gets a shorter grace period, never a longer one.
            let shortened = pod_grace.filter(|g| {
                already
                    && current
                        .pointer("/metadata/deletionGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .is_some_and(|had| *g < had)
            });
            if let Some(grace) = shortened {
                meta::set_meta(&mut new, "deletionTimestamp", json!(time_in(grace)));
                meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(grace));
            }
            if !already {
                let grace = pod_grace.unwrap_or(opts.grace_period_seconds.unwrap_or(0).max(0));
                let at = if pod_grace.is_some() {
                    time_in(grace)
                } else {
                    meta::now_time()
                };
                meta::set_meta(&mut new, "deletionTimestamp", json!(at));
                meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(grace));
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

/// What a DELETE without a propagation policy does to dependents, where upstream's strategy keeps the old default:
/// batch/v1 Jobs orphan their pods (the `orphan` finalizer), as they did before garbage collection existed. Every
/// other kind deletes its dependents in the background.
fn default_propagation(rt: &ResourceType) -> Option<Propagation> {
    (rt.group == "batch" && rt.plural == "jobs").then_some(Propagation::Orphan)
}

/// How long a pod being deleted has to stop, as kube-apiserver's pod strategy decides: the request's
/// `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds` (30 s by default). `None` — deleted at once —
/// for a grace period of 0 (a force delete), a pod no node runs (unscheduled), and a pod that has finished. Otherwise
/// the pod stays, `Terminating`, until its node's kubelet has stopped it and deletes it for good — or forever when that
/// node is gone, until someone force-deletes it.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> Option<i64> {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    let grace = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0);
    (scheduled && !finished && grace > 0).then_some(grace)
}

/// RFC 3339 time `seconds` from now, as metadata times are written.
fn time_in(seconds: i64) -> String {
    let now = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(now.saturating_add(seconds))
        .map(|t| t.to_string())
        .unwrap_or_else(|_| meta::now_time())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_pod_is_deleted_gracefully_and_others_at_once() {
        let running = json!({"spec": {"nodeName": "node-1", "terminationGracePeriodSeconds": 10}, "status": {"phase": "Running"}});
        assert_eq!(pod_grace_period(&running, None), Some(10));
        assert_eq!(pod_grace_period(&running, Some(3)), Some(3));
        assert_eq!(pod_grace_period(&running, Some(0)), None, "force delete");
        let default = json!({"spec": {"nodeName": "node-1"}});
        assert_eq!(pod_grace_period(&default, None), Some(30));
        let pending = json!({"spec": {"terminationGracePeriodSeconds": 10}});
        assert_eq!(pod_grace_period(&pending, None), None, "unscheduled");
        let done = json!({"spec": {"nodeName": "node-1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(pod_grace_period(&done, None), None, "finished");
    }
}
