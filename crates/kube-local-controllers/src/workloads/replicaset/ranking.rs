//! Which pods a ReplicaSet removes first when it scales down, after upstream's `ActivePodsWithRanks`: unscheduled
//! before scheduled, pending before running, not ready before ready, lower `controller.kubernetes.io/pod-deletion-cost`
//! first, pods doubled up on a node before lone ones, the most recently ready first, more restarts first, and the
//! newest first.

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::workloads::endpoints::is_pod_ready;

const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn node(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Pending 0 < Unknown 1 < Running 2 (anything else counts as pending, as upstream's map lookup does).
fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ready_since(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().map(|c| c.restart_count).max())
        .unwrap_or(0)
}

fn created(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Upstream's `afterOrZero`: a missing time sorts first, then the later time.
fn later_first(a: Option<jiff::Timestamp>, b: Option<jiff::Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// Orders `a` before `b` when `a` should go first; `rank` is how many of the pods share a pod's node.
fn compare(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize) -> Ordering {
    let (na, nb) = (node(a), node(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    let (ready_a, ready_b) = (is_pod_ready(a), is_pod_ready(b));
    phase_rank(a)
        .cmp(&phase_rank(b))
        .then(ready_a.cmp(&ready_b))
        .then(deletion_cost(a).cmp(&deletion_cost(b)))
        .then(rank_b.cmp(&rank_a))
        .then_with(|| {
            if ready_a && ready_b {
                later_first(ready_since(a), ready_since(b))
            } else {
                Ordering::Equal
            }
        })
        .then(max_restarts(b).cmp(&max_restarts(a)))
        .then(later_first(created(a), created(b)))
        .then_with(|| b.metadata.name.cmp(&a.metadata.name))
}

/// The `count` pods to delete from `pods`, in the order upstream would pick them.
pub fn pods_to_delete<'a>(pods: &[&'a Pod], count: usize) -> Vec<&'a Pod> {
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for p in pods {
        let n = node(p);
        if !n.is_empty() {
            *per_node.entry(n).or_default() += 1;
        }
    }
    let rank = |p: &Pod| per_node.get(node(p)).copied().unwrap_or(0);
    let mut ranked: Vec<&Pod> = pods.to_vec();
    ranked.sort_by(|a, b| compare(a, rank(a), b, rank(b)));
    ranked.truncate(count);
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str, ready_at: Option<&str>, created: &str) -> Pod {
        let mut conditions = vec![];
        if let Some(t) = ready_at {
            conditions.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": t}));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": "local", "containers": []},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .expect("a pod")
    }

    #[test]
    fn not_ready_then_newest_go_first() {
        let old_ready = pod(
            "a",
            "Running",
            Some("2026-01-01T00:01:00Z"),
            "2026-01-01T00:00:00Z",
        );
        let new_ready = pod(
            "b",
            "Running",
            Some("2026-01-01T00:05:00Z"),
            "2026-01-01T00:04:00Z",
        );
        let pending = pod("c", "Pending", None, "2026-01-01T00:00:00Z");
        let running_not_ready = pod("d", "Running", None, "2026-01-01T00:00:00Z");
        let all = [&old_ready, &new_ready, &pending, &running_not_ready];
        let names: Vec<_> = pods_to_delete(&all, 4)
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["c", "d", "b", "a"]);
        assert_eq!(pods_to_delete(&all, 1).len(), 1);
    }
}
