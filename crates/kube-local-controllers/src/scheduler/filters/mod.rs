//! The filters: which nodes can take the pod, each a small function of (snapshot, node) returning the reasons the
//! node is rejected (none: it passes), in the order kube-scheduler's default plugins run.

mod node_affinity;
mod node_name;
mod pod_affinity;
mod resources;
mod taints;
mod topology_spread;
mod unschedulable;
mod volume_affinity;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};

use super::message::{Reason, Unschedulable};
use super::volumes::VolumeFacts;

pub(super) use node_affinity::preferred_node_affinity_weight;
pub(super) use pod_affinity::{affinity_term_selects, same_domain};
pub(super) use taints::untolerated_prefer_no_schedule;
pub(super) use topology_spread::{matching_pods_in_domain, spread_constraints};

/// The cluster as one placement sees it.
pub(super) struct Snapshot<'a> {
    pub pod: &'a Pod,
    pub namespace: &'a str,
    pub nodes: &'a [Node],
    /// The pods that hold a place on a node of `nodes`: bound and not finished (Succeeded or Failed pods hold
    /// nothing, as kube-scheduler's cache drops them), the pod being placed excepted.
    pub placed: Vec<(&'a Pod, &'a Node)>,
    pub volumes: &'a VolumeFacts,
}

fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl<'a> Snapshot<'a> {
    pub fn new(pod: &'a Pod, nodes: &'a [Node], pods: &'a [Pod], volumes: &'a VolumeFacts) -> Self {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let same = |p: &Pod| {
            p.metadata.namespace.as_deref().unwrap_or("default") == namespace
                && p.metadata.name == pod.metadata.name
        };
        let placed = pods
            .iter()
            .filter(|p| !same(p) && !is_finished(p))
            .filter_map(|p| {
                let bound = p.spec.as_ref()?.node_name.as_deref()?;
                let node = nodes
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(bound))?;
                Some((p, node))
            })
            .collect();
        Snapshot {
            pod,
            namespace,
            nodes,
            placed,
            volumes,
        }
    }

    /// `spec.nodeName`, when the pod names its node.
    pub fn requested_node_name(&self) -> Option<&'a str> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// The pods placed on `node`.
    pub fn pods_on<'s>(&'s self, node: &'s Node) -> impl Iterator<Item = &'a Pod> + 's {
        self.placed
            .iter()
            .filter(move |(_, n)| n.metadata.name == node.metadata.name)
            .map(|(p, _)| *p)
    }
}

type Filter = fn(&Snapshot<'_>, &Node) -> Vec<Reason>;

/// kube-scheduler's default filter plugins that this scheduler implements, in their order.
const FILTERS: [Filter; 8] = [
    unschedulable::filter,
    node_name::filter,
    taints::filter,
    node_affinity::filter,
    resources::filter,
    volume_affinity::filter,
    topology_spread::filter,
    pod_affinity::filter,
];

/// The nodes that pass every filter, or why none does.
pub(super) fn feasible_nodes<'a>(snapshot: &Snapshot<'a>) -> Result<Vec<&'a Node>, Unschedulable> {
    let node_count = snapshot.nodes.len();
    if let Some(reason) = volume_affinity::prefilter(snapshot) {
        return Err(Unschedulable {
            node_count,
            prefilter: Some(reason),
            per_node: BTreeMap::new(),
        });
    }
    let mut feasible = Vec::new();
    let mut per_node = BTreeMap::new();
    for node in snapshot.nodes {
        let rejection = FILTERS
            .iter()
            .map(|filter| filter(snapshot, node))
            .find(|reasons| !reasons.is_empty());
        match rejection {
            None => feasible.push(node),
            Some(reasons) => {
                per_node.insert(node.metadata.name.clone().unwrap_or_default(), reasons);
            }
        }
    }
    if feasible.is_empty() {
        return Err(Unschedulable {
            node_count,
            prefilter: None,
            per_node,
        });
    }
    Ok(feasible)
}
