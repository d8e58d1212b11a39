//! Placement of a pod on a node, as a pure function of (pod, nodes, pods, volumes): the feasible nodes by kube-scheduler's
//! filters, the best of them by an approximation of its default scores, or the reasons no node fits, worded as
//! kube-scheduler words its `FailedScheduling` message.
//!
//! The filters run per node in the order of kube-scheduler's default plugins (NodeUnschedulable, NodeName,
//! TaintToleration, NodeAffinity, NodeResourcesFit, VolumeBinding, PodTopologySpread, InterPodAffinity), and as
//! there, a node is rejected by the first filter that fails, so each node counts under one filter's reasons.
//!
//! Nothing here reads the API or the clock: the caller hands in a snapshot (the kubelet's caches, or fixtures in the
//! tests) and binds, records the Event and sets `PodScheduled` itself.
//!
//! Not modelled: preemption (the message reports what kube-scheduler reports when no lower-priority pod could make
//! room, so a pod of higher priority waits where kube-scheduler would evict), `preemptionPolicy: Never`'s own
//! wording, NodePorts, the system default spread constraints kube-scheduler applies to pods without any, volume
//! limits, zones and restrictions beyond bound-volume node affinity, dynamic resource claims, scheduling gates and
//! `schedulerName` (the caller decides which pods are ours), and ImageLocality.

mod filters;
mod message;
mod pod_requests;
mod scores;
mod selectors;
mod volumes;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{Node, Pod};

pub use message::{Reason, Unschedulable};
pub use selectors::node_selector_term_matches;
pub use volumes::{ClaimFact, VolumeFacts};

/// Picks the node for `pod` among `nodes`, given the `pods` already in the cluster (bound or not; the pod itself,
/// if present, is ignored) and what is known of the pod's claims.
///
/// A pod whose `spec.nodeName` is already set is not placed again: its node is returned when it exists, as the kubelet
/// of that node would take it; when it does not exist, every node reports that it is not the requested one.
pub fn schedule(
    pod: &Pod,
    nodes: &[Node],
    pods: &[Pod],
    volumes: &VolumeFacts,
) -> Result<String, Unschedulable> {
    let snapshot = filters::Snapshot::new(pod, nodes, pods, volumes);
    if let Some(requested) = snapshot.requested_node_name()
        && nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(requested))
    {
        return Ok(requested.to_string());
    }
    let feasible = filters::feasible_nodes(&snapshot)?;
    Ok(scores::best_node(&snapshot, &feasible))
}
