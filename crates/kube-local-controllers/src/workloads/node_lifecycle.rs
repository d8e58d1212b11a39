//! The node lifecycle controller, as kube-controller-manager runs it: it watches each node's heartbeat (its Lease in
//! `kube-node-lease`, and the `Ready` condition's heartbeat), and after the node monitor grace period without one:
//!
//! - the node's conditions go `Unknown` (`NodeStatusUnknown`, "Kubelet stopped posting node status.");
//! - the node gets the `node.kubernetes.io/unreachable` taints (`NoSchedule` and `NoExecute`), or the `not-ready` ones
//!   when the kubelet itself reports `Ready=False`; they go when the node is `Ready` again;
//! - its pods' `Ready` condition goes `False`, so Services stop sending them traffic;
//! - pods that do not tolerate a `NoExecute` taint are deleted at once, those that tolerate it for
//!   `tolerationSeconds` (300 s by default, from the DefaultTolerationSeconds admission) when that runs out. A deleted
//!   pod on a dead node stays `Terminating` until its kubelet returns to finish it, or someone force-deletes it — so a
//!   StatefulSet's pod there is not recreated elsewhere by Kubernetes alone.
//!
//! The decisions are pure functions of the observed state and the time ([`taints_for`], [`eviction_due`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use super::Context;

pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How often the heartbeats are looked at (upstream's `--node-monitor-period`, 5 s).
const MONITOR_PERIOD: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Monitor {
    /// Node → the last heartbeat seen, and when this controller first saw it (the grace period runs on this
    /// controller's clock, as upstream's does, so a skewed kubelet clock does not matter).
    seen: HashMap<String, (jiff::Timestamp, jiff::Timestamp)>,
}

/// The node's `Ready` condition status: `True`, `False` or `Unknown` (a node without one is not ready yet).
fn ready_status(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map_or("Unknown", |c| c.status.as_str())
}

/// The taints this controller owns that a node in this state carries (others' taints are left alone).
pub fn taints_for(ready: &str, existing: &[Taint], now: jiff::Timestamp) -> Vec<Taint> {
    let key = match ready {
        "True" => return Vec::new(),
        "False" => NOT_READY,
        _ => UNREACHABLE,
    };
    ["NoSchedule", "NoExecute"]
        .into_iter()
        .map(|effect| {
            existing
                .iter()
                .find(|t| t.key == key && t.effect == effect)
                .cloned()
                .unwrap_or_else(|| Taint {
                    key: key.into(),
                    effect: effect.into(),
                    time_added: (effect == "NoExecute").then_some(Time(now)),
                    value: None,
                })
        })
        .collect()
}

fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key_ok = match toleration.key.as_deref() {
        None | Some("") => toleration.operator.as_deref() == Some("Exists"),
        Some(k) => k == taint.key,
    };
    let value_ok = match toleration.operator.as_deref() {
        Some("Exists") => true,
        _ => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
    };
    effect_ok && key_ok && value_ok
}

/// When a pod on a node with these `NoExecute` taints is to be evicted: now (`Some(ZERO)`) when a taint is not
/// tolerated, after the shortest `tolerationSeconds` counted from when its taint was added, or never (`None`).
pub fn eviction_due(pod: &Pod, taints: &[Taint], now: jiff::Timestamp) -> Option<Duration> {
    let tolerations: &[Toleration] = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let mut due: Option<Duration> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> =
            tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Some(Duration::ZERO);
        }
        // Tolerated forever unless every matching toleration is bounded; the shortest bound wins.
        if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            continue;
        }
        let seconds = matching
            .iter()
            .filter_map(|t| t.toleration_seconds)
            .min()
            .unwrap_or(0)
            .max(0);
        let added = taint.time_added.as_ref().map_or(now, |t| t.0);
        let deadline = added
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .unwrap_or(added);
        let left = Duration::try_from(deadline.duration_since(now)).unwrap_or(Duration::ZERO);
        due = Some(due.map_or(left, |d: Duration| d.min(left)));
    }
    due
}

fn unknown_conditions(conditions: &[NodeCondition], now: jiff::Timestamp) -> Vec<NodeCondition> {
    let mut out: Vec<NodeCondition> = conditions.to_vec();
    if !out.iter().any(|c| c.type_ == "Ready") {
        out.push(NodeCondition {
            type_: "Ready".into(),
            ..NodeCondition::default()
        });
    }
    for c in &mut out {
        if c.status != "Unknown" {
            c.last_transition_time = Some(Time(now));
        }
        c.status = "Unknown".into();
        c.reason = Some("NodeStatusUnknown".into());
        c.message = Some("Kubelet stopped posting node status.".into());
    }
    out
}

impl Monitor {
    pub async fn pass(&mut self, ctx: &Context) -> Option<Duration> {
        let now = jiff::Timestamp::now();
        let leases: HashMap<String, jiff::Timestamp> =
            match Api::<Lease>::namespaced(ctx.client.clone(), LEASE_NAMESPACE)
                .list(&ListParams::default())
                .await
            {
                Ok(list) => list
                    .items
                    .into_iter()
                    .filter_map(|l| Some((l.metadata.name?, l.spec?.renew_time?.0)))
                    .collect(),
                Err(e) => {
                    tracing::debug!(error = %e, "listing node leases");
                    return Some(MONITOR_PERIOD);
                }
            };
        let nodes = ctx.caches.nodes.state();
        self.seen.retain(|name, _| {
            nodes
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some(name))
        });
        let mut next = Some(MONITOR_PERIOD);
        // (`Some` throughout: the heartbeats are polled, not watched.)
        for node in &nodes {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            let status_beat = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_heartbeat_time.as_ref().map(|t| t.0));
            let beat = [leases.get(&name).copied(), status_beat]
                .into_iter()
                .flatten()
                .max();
            let probe = self
                .seen
                .entry(name.clone())
                .or_insert((beat.unwrap_or(now), now));
            if let Some(beat) = beat
                && beat > probe.0
            {
                *probe = (beat, now);
            }
            let silent = Duration::try_from(now.duration_since(probe.1)).unwrap_or(Duration::ZERO);
            if silent > ctx.node_monitor_grace && ready_status(node) != "Unknown" {
                mark_unknown(ctx, node, now).await;
                continue;
            }
            sync_taints(ctx, node, now).await;
            if ready_status(node) != "True"
                && let Some(after) = handle_pods(ctx, node, now).await
            {
                next = next.map(|n| n.min(after));
            }
        }
        next
    }
}

async fn mark_unknown(ctx: &Context, node: &Node, now: jiff::Timestamp) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let patch = json!({"status": {"conditions": unknown_conditions(conditions, now)}});
    match Api::<Node>::all(ctx.client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => tracing::info!(node = name, "node stopped posting status: Ready=Unknown"),
        Err(e) => tracing::debug!(node = name, error = %e, "marking a node Unknown"),
    }
}

/// Adds or removes this controller's taints so they match the node's readiness; the node's resourceVersion guards
/// the write against other writers of the taint list (cordon's controller, users).
async fn sync_taints(ctx: &Context, node: &Node, now: jiff::Timestamp) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let existing: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let ours = |t: &Taint| t.key == UNREACHABLE || t.key == NOT_READY;
    let wanted = taints_for(ready_status(node), &existing, now);
    let current: Vec<Taint> = existing.iter().filter(|t| ours(t)).cloned().collect();
    if current == wanted {
        return;
    }
    let mut taints: Vec<Taint> = existing.into_iter().filter(|t| !ours(t)).collect();
    taints.extend(wanted);
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    });
    if let Err(e) = Api::<Node>::all(ctx.client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(node = name, error = %e, "updating a node's taints");
    }
}

/// The pods of a node that is not ready: `Ready=False`, and evicted when their tolerations run out. Returns when to
/// look again.
async fn handle_pods(ctx: &Context, node: &Node, now: jiff::Timestamp) -> Option<Duration> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let pods: Vec<Arc<Pod>> = ctx
        .caches
        .pods
        .state_filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name));
    let mut next: Option<Duration> = None;
    for pod in pods {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
        let ready_true = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready_true {
            let patch = json!({"status": {"conditions": [{
                "type": "Ready", "status": "False", "lastProbeTime": null,
                "lastTransitionTime": Time(now),
            }]}});
            if let Err(e) = api
                .patch_status(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!(pod = pod_name, error = %e, "marking a pod of a lost node not ready");
            }
        }
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match eviction_due(&pod, &taints, now) {
            Some(d) if d.is_zero() => {
                let dp = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        uid: pod.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(pod_name, &dp).await {
                    Ok(_) => tracing::info!(
                        pod = pod_name,
                        node = name,
                        "marking for deletion a pod of a node that is not ready"
                    ),
                    Err(e) => tracing::debug!(pod = pod_name, error = %e, "evicting a pod"),
                }
            }
            Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
            None => {}
        }
    }
    next.map(|d| d.max(Duration::from_millis(200)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    fn pod_tolerating(tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "tolerations": tolerations},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_ready_node_carries_none_of_these_taints() {
        assert!(taints_for("True", &[], at(0)).is_empty());
    }

    #[test]
    fn an_unknown_node_is_unreachable_and_keeps_the_time_its_taint_was_added() {
        let first = taints_for("Unknown", &[], at(0));
        let keys: Vec<(&str, &str)> = first
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            keys,
            [(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")]
        );
        let again = taints_for("Unknown", &first, at(100));
        assert_eq!(again, first);
        let not_ready = taints_for("False", &first, at(100));
        assert!(not_ready.iter().all(|t| t.key == NOT_READY));
    }

    #[test]
    fn the_default_tolerations_evict_after_300_seconds() {
        let pod = pod_tolerating(json!([
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ]));
        let taints = taints_for("Unknown", &[], at(0));
        assert_eq!(
            eviction_due(&pod, &taints, at(0)),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            eviction_due(&pod, &taints, at(299)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(eviction_due(&pod, &taints, at(301)), Some(Duration::ZERO));
    }

    #[test]
    fn a_pod_without_a_toleration_goes_at_once_and_an_unbounded_one_stays() {
        let taints = taints_for("Unknown", &[], at(0));
        assert_eq!(
            eviction_due(&pod_tolerating(json!([])), &taints, at(0)),
            Some(Duration::ZERO)
        );
        let forever = pod_tolerating(json!([{"operator": "Exists"}]));
        assert_eq!(eviction_due(&forever, &taints, at(10_000)), None);
        let shortest = pod_tolerating(json!([
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        ]));
        assert_eq!(
            eviction_due(&shortest, &taints, at(0)),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn a_lost_node_reports_every_condition_unknown() {
        let ready = NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..NodeCondition::default()
        };
        let out = unknown_conditions(&[ready], at(5));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, "Unknown");
        assert_eq!(out[0].reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(out[0].last_transition_time, Some(Time(at(5))));
    }
}
