//! `pods/{name}/eviction`: deleting a pod only as far as the PodDisruptionBudget that selects it allows, with
//! kube-apiserver's rules and answers.
//!
//! The order is what makes a budget hold under concurrent evictions: the budget is taken first, by a compare-and-swap
//! of its status on its resourceVersion (one disruption fewer, the pod recorded in `disruptedPods`), and only then is
//! the pod deleted. Two evictions racing for a budget's last disruption both read it, one wins the swap, the other
//! re-reads the budget and is refused with 429. The disruption controller (`workloads::disruption`) counts a pod in
//! `disruptedPods` as gone until it is deleted or two minutes have passed.
//!
//! Pods that cannot count against a budget (terminal, Pending, already being deleted) are deleted without it, pinned
//! to the resourceVersion that was judged so a pod that turns Ready meanwhile is not deleted unguarded; so is an
//! unready pod when its budget is healthy enough or says `unhealthyPodEvictionPolicy: AlwaysAllow`.

use serde_json::{Map, Value, json};

use super::{Core, DeleteOptions};
use crate::admission;
use crate::api_error::{ApiError, ApiResult, Subject};
use crate::meta;
use crate::registry::{ResourceType, StorageResource};
use crate::selector::LabelSelector;
use crate::store::{ObjectKey, StoreError, rv_of};

/// Conflicting writes are retried this often (upstream's `EvictionsRetry` has 20 steps).
const ATTEMPTS: usize = 20;

/// Upstream's `MaxDisruptedPodSize`: a budget with more unconfirmed evictions refuses new ones.
const MAX_DISRUPTED_PODS: usize = 2000;

const TOO_MANY_BUDGETS: &str = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
const WOULD_VIOLATE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// What a pod's state lets an eviction do before any budget is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodState {
    /// Terminal or already being deleted: deleted as asked.
    Gone,
    /// Pending: deleted, pinned to the version judged.
    Pending,
    /// Running (or unknown): the budget decides.
    Guarded,
}

fn pod_state(pod: &Value) -> PodState {
    if meta::is_deleting(pod) {
        return PodState::Gone;
    }
    match meta::str_at(pod, &["status", "phase"]) {
        Some("Succeeded" | "Failed") => PodState::Gone,
        Some("Pending") => PodState::Pending,
        _ => PodState::Guarded,
    }
}

/// Upstream's `IsPodReady`: the `Ready` condition is `True`.
fn is_ready(pod: &Value) -> bool {
    meta::value_at(pod, &["status", "conditions"])
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

fn budget_storage() -> StorageResource {
    StorageResource {
        group: "policy".into(),
        resource: "poddisruptionbudgets".into(),
    }
}

fn budget_key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        storage: budget_storage(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Whether the budget selects the pod, as the eviction handler decides it: a missing, empty or invalid selector
/// selects nothing (unlike the disruption controller, where an empty policy/v1 selector selects every pod).
fn selects(budget: &Value, pod: &Value) -> bool {
    let Some(selector) = meta::value_at(budget, &["spec", "selector"]).filter(|s| !s.is_null())
    else {
        return false;
    };
    match LabelSelector::from_object(selector) {
        Ok(s) => !s.is_empty() && s.matches(pod),
        Err(_) => false,
    }
}

fn status_i64(budget: &Value, field: &str) -> i64 {
    meta::value_at(budget, &["status", field])
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// 429 while the budget's status is not computed for its current spec (upstream's `createTooManyRequestsError`).
fn budget_being_processed(name: &str) -> ApiError {
    ApiError::too_many_requests(WOULD_VIOLATE, 10).with_causes(vec![json!({
        "reason": "DisruptionBudget",
        "message": format!("The disruption budget {name} is still being processed by the server."),
    })])
}

/// The budget with one disruption taken for `pod`, or why it cannot be (upstream's `checkAndDecrement`).
fn take_disruption(budget: &Value, pod: &str, dry_run: bool) -> ApiResult<Value> {
    let name = meta::name(budget);
    let generation = meta::value_at(budget, &["metadata", "generation"])
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let observed = status_i64(budget, "observedGeneration");
    if observed < generation {
        return Err(budget_being_processed(name));
    }
    let subject = Subject {
        group: "policy",
        resource: "poddisruptionbudget",
        name,
    };
    let allowed = status_i64(budget, "disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden(
            subject,
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted = meta::value_at(budget, &["status", "disruptedPods"])
        .and_then(Value::as_object)
        .map_or(0, Map::len);
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(ApiError::forbidden(
            subject,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(
            ApiError::too_many_requests(WOULD_VIOLATE, 0).with_causes(vec![json!({
                "reason": "DisruptionBudget",
                "message": format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    status_i64(budget, "desiredHealthy"),
                    status_i64(budget, "currentHealthy"),
                ),
            })]),
        );
    }
    let mut taken = budget.clone();
    let root = meta::object_mut(&mut taken);
    let status = root
        .entry("status")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| {
            ApiError::internal(format!(
                "status of PodDisruptionBudget {name} is not an object"
            ))
        })?;
    status.insert("disruptionsAllowed".into(), json!(allowed - 1));
    if allowed == 1 {
        set_disruption_allowed_false(status, observed);
    }
    if !dry_run {
        let pods = status.entry("disruptedPods").or_insert_with(|| json!({}));
        if !pods.is_object() {
            *pods = json!({});
        }
        if let Some(pods) = pods.as_object_mut() {
            pods.insert(pod.to_string(), json!(meta::now_time()));
        }
    }
    Ok(taken)
}

/// The `DisruptionAllowed` condition turned `False`/`InsufficientPods` (its transition time kept when it already was).
fn set_disruption_allowed_false(status: &mut Map<String, Value>, observed_generation: i64) {
    let wanted = json!({
        "type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
        "observedGeneration": observed_generation, "lastTransitionTime": meta::now_time(),
    });
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed"))
    {
        Some(existing) => {
            let transition = if existing.get("status").and_then(Value::as_str) == Some("False") {
                existing.get("lastTransitionTime").cloned()
            } else {
                None
            };
            let mut new = wanted;
            if let (Some(t), Some(o)) = (transition, new.as_object_mut()) {
                o.insert("lastTransitionTime".into(), t);
            }
            *existing = new;
        }
        None => list.push(wanted),
    }
}

/// The `DisruptionTarget` condition upstream adds to a pod it evicts, before deleting it.
fn with_disruption_target(pod: &Value) -> Value {
    let mut pod = pod.clone();
    let condition = json!({
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastProbeTime": null, "lastTransitionTime": meta::now_time(),
    });
    let root = meta::object_mut(&mut pod);
    let status = root.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(status) = status.as_object_mut() else {
        return pod;
    };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Some(list) = conditions.as_array_mut() {
        match list
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionTarget"))
        {
            Some(existing) if existing.get("status").and_then(Value::as_str) == Some("True") => {
                if let (Some(e), Some(c)) = (existing.as_object_mut(), condition.as_object()) {
                    for k in ["reason", "message"] {
                        if let Some(v) = c.get(k) {
                            e.insert(k.into(), v.clone());
                        }
                    }
                }
            }
            Some(existing) => *existing = condition,
            None => list.push(condition),
        }
    }
    pod
}

fn precondition_failed(
    pods: &ResourceType,
    name: &str,
    what: &str,
    wanted: &str,
    actual: &str,
) -> ApiError {
    ApiError::conflict(
        pods.subject(name),
        format!(
            "Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"
        ),
    )
}

impl Core {
    /// POST of `pods/{name}/eviction`: `eviction` is the (policy/v1 or v1beta1) Eviction, `delete` its
    /// `deleteOptions` with the request's dry-run folded in. `Ok` once the pod is deleted (or would be, in a dry
    /// run); 429 when its budget allows no disruption; 500 when more than one budget selects it.
    pub async fn evict(
        &self,
        pods: &ResourceType,
        namespace: &str,
        name: &str,
        eviction: &Value,
        delete: DeleteOptions,
    ) -> ApiResult<()> {
        let admitted = admission::Request {
            rt: pods,
            subresource: Some("eviction"),
            operation: "CREATE",
            namespace,
            name,
            object: Some(eviction),
            old_object: None,
            dry_run: delete.dry_run,
        };
        admission::validate(&self.store, &admitted, &mut Vec::new()).await?;

        let pinned_by_caller = delete.precondition_rv.is_some();
        let mut attempt = 0;
        let pod = loop {
            attempt += 1;
            let pod = self.get(pods, namespace, name)?;
            let state = pod_state(&pod);
            if state == PodState::Guarded {
                break pod;
            }
            let mut opts = delete.clone();
            if state == PodState::Pending && !pinned_by_caller {
                opts.precondition_rv = Some(meta::resource_version(&pod).to_string());
            }
            match self.delete_evicted(pods, namespace, name, opts).await {
                Err(e) if e.code == 409 && !pinned_by_caller && attempt < ATTEMPTS => continue,
                other => return other,
            }
        };

        let budgets: Vec<Value> = self
            .store
            .list(&budget_storage(), Some(namespace))
            .objects
            .iter()
            .filter(|b| selects(b, &pod))
            .map(|b| (**b).clone())
            .collect();
        let budget = match budgets.as_slice() {
            [] => return self.delete_evicted(pods, namespace, name, delete).await,
            [one] => one,
            _ => return Err(ApiError::unreasoned(500, TOO_MANY_BUDGETS)),
        };
        let budget_name = meta::name(budget).to_string();

        // An unready pod is no disruption the budget counts: deleting it takes nothing from the budget.
        let unguarded = !is_ready(&pod)
            && (meta::str_at(budget, &["spec", "unhealthyPodEvictionPolicy"])
                == Some("AlwaysAllow")
                || (status_i64(budget, "currentHealthy") >= status_i64(budget, "desiredHealthy")
                    && status_i64(budget, "desiredHealthy") > 0));
        if !unguarded {
            self.take_budget(namespace, &budget_name, name, delete.dry_run)
                .await?;
        }

        let mut opts = delete.clone();
        if unguarded {
            opts.precondition_rv = Some(meta::resource_version(&pod).to_string());
        }
        match self.delete_evicted(pods, namespace, name, opts).await {
            // The unready pod changed since it was judged (it may be Ready now): the caller tries again.
            Err(e) if e.code == 409 && unguarded && !pinned_by_caller => {
                Err(budget_being_processed(&budget_name))
            }
            other => other,
        }
    }

    /// Takes one disruption from the budget `namespace/name` for `pod`, by compare-and-swap on its version.
    async fn take_budget(
        &self,
        namespace: &str,
        name: &str,
        pod: &str,
        dry_run: bool,
    ) -> ApiResult<()> {
        let key = budget_key(namespace, name);
        for _ in 0..ATTEMPTS {
            let Some(stored) = self.store.get(&key) else {
                return Err(ApiError::not_found(Subject {
                    group: "policy",
                    resource: "poddisruptionbudgets",
                    name,
                }));
            };
            let taken = take_disruption(&stored, pod, dry_run)?;
            if dry_run {
                return Ok(());
            }
            match self.store.update(&key, rv_of(&stored), taken) {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => continue,
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        let mut e = ApiError::timeout(format!(
            "couldn't update PodDisruptionBudget {name:?} due to conflicts"
        ));
        e.details = Some(Box::new(json!({"retryAfterSeconds": 10})));
        Err(e)
    }

    /// Marks the pod a disruption target, then deletes it with `opts` (its preconditions hold for both steps).
    async fn delete_evicted(
        &self,
        pods: &ResourceType,
        namespace: &str,
        name: &str,
        mut opts: DeleteOptions,
    ) -> ApiResult<()> {
        if !opts.dry_run {
            let key = Self::key(pods, namespace, name);
            let mut written = false;
            for _ in 0..ATTEMPTS {
                let Some(stored) = self.store.get(&key) else {
                    return Err(ApiError::not_found(pods.subject(name)));
                };
                if let Some(uid) = opts.precondition_uid.as_deref().filter(|u| !u.is_empty())
                    && uid != meta::uid(&stored)
                {
                    return Err(precondition_failed(
                        pods,
                        name,
                        "UID",
                        uid,
                        meta::uid(&stored),
                    ));
                }
                if let Some(rv) = opts.precondition_rv.as_deref().filter(|r| !r.is_empty())
                    && rv != meta::resource_version(&stored)
                {
                    return Err(precondition_failed(
                        pods,
                        name,
                        "ResourceVersion",
                        rv,
                        meta::resource_version(&stored),
                    ));
                }
                let marked = with_disruption_target(&stored);
                if marked == *stored {
                    written = true;
                    break;
                }
                match self.store.update(&key, rv_of(&stored), marked) {
                    Ok(saved) => {
                        if opts.precondition_rv.is_some() {
                            opts.precondition_rv = Some(meta::resource_version(&saved).to_string());
                        }
                        written = true;
                        break;
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound) => {
                        return Err(ApiError::not_found(pods.subject(name)));
                    }
                    Err(e) => return Err(ApiError::internal(e.to_string())),
                }
            }
            if !written {
                return Err(ApiError::conflict(
                    pods.subject(name),
                    "too many concurrent writers",
                ));
            }
        }
        // The eviction was admitted as itself; the deletion it causes is not admitted again (as upstream).
        opts.internal = true;
        self.delete(pods, namespace, name, &opts).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn budget(status: Value) -> Value {
        json!({"metadata": {"name": "b", "generation": 1}, "spec": {"selector": {"matchLabels": {"app": "a"}}}, "status": status})
    }

    #[test]
    fn a_budget_with_no_disruption_left_refuses_with_upstreams_words() {
        let b = budget(
            json!({"observedGeneration": 1, "disruptionsAllowed": 0, "desiredHealthy": 2, "currentHealthy": 2}),
        );
        let e = take_disruption(&b, "p", false).unwrap_err();
        assert_eq!(e.code, 429);
        let status = e.to_status();
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["message"], WOULD_VIOLATE);
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "DisruptionBudget", "message": "The disruption budget b needs 2 healthy pods and has 2 currently"}])
        );
    }

    #[test]
    fn taking_the_last_disruption_records_the_pod_and_flips_the_condition() {
        let b = budget(
            json!({"observedGeneration": 1, "disruptionsAllowed": 1, "desiredHealthy": 2, "currentHealthy": 3,
            "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods"}]}),
        );
        let taken = take_disruption(&b, "p", false).unwrap();
        assert_eq!(taken["status"]["disruptionsAllowed"], 0);
        assert!(taken["status"]["disruptedPods"]["p"].is_string());
        assert_eq!(taken["status"]["conditions"][0]["status"], "False");
        assert_eq!(
            taken["status"]["conditions"][0]["reason"],
            "InsufficientPods"
        );
        let dry = take_disruption(&b, "p", true).unwrap();
        assert!(dry["status"].get("disruptedPods").is_none());
    }

    #[test]
    fn a_budget_not_yet_observed_is_still_being_processed() {
        let b = budget(json!({"observedGeneration": 0, "disruptionsAllowed": 5}));
        let e = take_disruption(&b, "p", false).unwrap_err();
        assert_eq!(e.code, 429);
        assert_eq!(e.retry_after_seconds(), Some(10));
        assert_eq!(
            e.to_status()["details"]["causes"][0]["message"],
            "The disruption budget b is still being processed by the server."
        );
        let negative = budget(json!({"observedGeneration": 1, "disruptionsAllowed": -1}));
        assert_eq!(
            take_disruption(&negative, "p", false).unwrap_err().code,
            403
        );
    }

    #[test]
    fn empty_and_missing_selectors_select_nothing() {
        let pod = json!({"metadata": {"labels": {"app": "a"}}});
        assert!(selects(&budget(json!({})), &pod));
        assert!(!selects(&json!({"spec": {"selector": {}}}), &pod));
        assert!(!selects(&json!({"spec": {}}), &pod));
        assert!(!selects(
            &json!({"spec": {"selector": {"matchLabels": {"app": "b"}}}}),
            &pod
        ));
    }

    #[test]
    fn pod_states() {
        assert_eq!(
            pod_state(&json!({"status": {"phase": "Failed"}})),
            PodState::Gone
        );
        assert_eq!(
            pod_state(&json!({"status": {"phase": "Pending"}})),
            PodState::Pending
        );
        assert_eq!(
            pod_state(&json!({"status": {"phase": "Running"}})),
            PodState::Guarded
        );
        assert_eq!(
            pod_state(
                &json!({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}})
            ),
            PodState::Gone
        );
    }
}
