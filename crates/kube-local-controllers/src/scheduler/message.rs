//! Why a pod fits nowhere, and kube-scheduler's `FailedScheduling` sentence for it.
//!
//! The wording follows kube-scheduler v1.34/v1.35 (the `FitError` message of its framework, the reason strings of
//! its default filter plugins, and the post-filter part): the per-node reasons are counted, each rendered
//! `"<count> <reason>"`, sorted as strings and joined with `", "`; then come the post-filter plugins' messages —
//! dynamic resource allocation's `no new claims to deallocate` (a pod without resource claims; the plugin is on by
//! default since v1.34) and preemption's own count of why evicting lower-priority pods would not help. Since the
//! v1.34 patch releases the taint reason names no taint (`node(s) had untolerated taint(s)`), and since v1.33 a
//! volume's node affinity reads `node(s) didn't match PersistentVolume's node affinity`.

use std::collections::BTreeMap;
use std::fmt;

/// Why one node was rejected: one reason of one of kube-scheduler's filter plugins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// NodeName: `spec.nodeName` names another node.
    NodeName,
    /// NodeUnschedulable: cordoned (`spec.unschedulable`) and the pod does not tolerate that.
    Unschedulable,
    /// TaintToleration: a NoSchedule or NoExecute taint the pod does not tolerate.
    UntoleratedTaint,
    /// NodeAffinity: `nodeSelector` or required node affinity.
    NodeAffinity,
    /// NodeResourcesFit: the node has no room left for the pod in one pod slot.
    TooManyPods,
    /// NodeResourcesFit: not enough of a resource left; `beyond_allocatable` when even an empty node would not have
    /// enough (then preemption cannot help).
    Insufficient {
        resource: String,
        beyond_allocatable: bool,
    },
    /// VolumeBinding: a bound PersistentVolume's node affinity excludes the node.
    VolumeNodeAffinity,
    /// PodTopologySpread: the node lacks a DoNotSchedule constraint's topology key.
    TopologySpreadMissingLabel,
    /// PodTopologySpread: placing the pod here would exceed a DoNotSchedule constraint's maxSkew.
    TopologySpread,
    /// InterPodAffinity: a pod already placed has required anti-affinity against this pod in this domain.
    ExistingPodsAntiAffinity,
    /// InterPodAffinity: the pod's required affinity finds no matching pod in this domain.
    PodAffinity,
    /// InterPodAffinity: the pod's required anti-affinity finds a matching pod in this domain.
    PodAntiAffinity,
}

impl Reason {
    /// The reason as kube-scheduler's plugins word it.
    pub fn text(&self) -> String {
        match self {
            Reason::NodeName => "node(s) didn't match the requested node name".into(),
            Reason::Unschedulable => "node(s) were unschedulable".into(),
            Reason::UntoleratedTaint => "node(s) had untolerated taint(s)".into(),
            Reason::NodeAffinity => "node(s) didn't match Pod's node affinity/selector".into(),
            Reason::TooManyPods => "Too many pods".into(),
            Reason::Insufficient { resource, .. } => format!("Insufficient {resource}"),
            Reason::VolumeNodeAffinity => {
                "node(s) didn't match PersistentVolume's node affinity".into()
            }
            Reason::TopologySpreadMissingLabel => {
                "node(s) didn't match pod topology spread constraints (missing required label)"
                    .into()
            }
            Reason::TopologySpread => "node(s) didn't match pod topology spread constraints".into(),
            Reason::ExistingPodsAntiAffinity => {
                "node(s) didn't satisfy existing pods anti-affinity rules".into()
            }
            Reason::PodAffinity => "node(s) didn't match pod affinity rules".into(),
            Reason::PodAntiAffinity => "node(s) didn't match pod anti-affinity rules".into(),
        }
    }

    /// Whether kube-scheduler's plugin rejects with `UnschedulableAndUnresolvable`: removing pods from the node could
    /// not change the answer, so preemption does not try it.
    fn unresolvable(&self) -> bool {
        match self {
            Reason::NodeName
            | Reason::Unschedulable
            | Reason::UntoleratedTaint
            | Reason::NodeAffinity
            | Reason::VolumeNodeAffinity
            | Reason::TopologySpreadMissingLabel
            | Reason::PodAffinity => true,
            Reason::Insufficient {
                beyond_allocatable, ..
            } => *beyond_allocatable,
            Reason::TooManyPods
            | Reason::TopologySpread
            | Reason::ExistingPodsAntiAffinity
            | Reason::PodAntiAffinity => false,
        }
    }
}

/// No node fits the pod: the reasons per node, or one reason for all of them found before any node was looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Unschedulable {
    /// How many nodes the cluster has.
    pub node_count: usize,
    /// A reason that holds for every node (kube-scheduler's PreFilter), e.g. a claim that does not exist.
    pub prefilter: Option<String>,
    /// Each rejected node's reasons (one filter's, the first that failed).
    pub per_node: BTreeMap<String, Vec<Reason>>,
}

/// `"<count> <text>"` per distinct text, sorted as kube-scheduler sorts them (as strings, so "10 …" before "2 …").
fn histogram<'a>(texts: impl Iterator<Item = String> + 'a) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in texts {
        *counts.entry(t).or_default() += 1;
    }
    let mut entries: Vec<String> = counts
        .into_iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    entries.sort();
    entries.join(", ")
}

impl Unschedulable {
    /// kube-scheduler's FailedScheduling message (also the PodScheduled condition's message).
    pub fn message(&self) -> String {
        let n = self.node_count;
        if n == 0 {
            return "no nodes available to schedule pods".into();
        }
        let mut message = format!("0/{n} nodes are available:");
        match &self.prefilter {
            Some(reason) => message.push_str(&format!(" {reason}.")),
            None => {
                let reasons = self.per_node.values().flatten().map(Reason::text);
                message.push_str(&format!(" {}.", histogram(reasons)));
            }
        }
        // Preemption looks at each node once: hopeless when the node's rejection is unresolvable, otherwise it finds
        // no victims, since this scheduler never preempts (all pods count as equal priority).
        let verdict = |hopeless: bool| {
            if hopeless {
                "Preemption is not helpful for scheduling".to_string()
            } else {
                "No preemption victims found for incoming pod".to_string()
            }
        };
        let preemption: Vec<String> = match self.prefilter {
            Some(_) => (0..n).map(|_| verdict(true)).collect(),
            None => self
                .per_node
                .values()
                .map(|reasons| verdict(reasons.iter().any(Reason::unresolvable)))
                .collect(),
        };
        message.push_str(&format!(
            " no new claims to deallocate, preemption: 0/{n} nodes are available: {}.",
            histogram(preemption.into_iter())
        ));
        message
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unschedulable(per_node: &[(&str, Vec<Reason>)]) -> Unschedulable {
        Unschedulable {
            node_count: per_node.len(),
            prefilter: None,
            per_node: per_node
                .iter()
                .map(|(n, r)| (n.to_string(), r.clone()))
                .collect(),
        }
    }

    #[test]
    fn mixed_reasons_are_counted_sorted_and_followed_by_preemption() {
        let u = unschedulable(&[
            ("node-1", vec![Reason::Unschedulable]),
            ("node-2", vec![Reason::PodAntiAffinity]),
            ("node-3", vec![Reason::PodAntiAffinity]),
        ]);
        assert_eq!(
            u.to_string(),
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match pod anti-affinity \
             rules. no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful \
             for scheduling, 2 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn several_resources_of_one_node_each_count() {
        let short = |resource: &str| Reason::Insufficient {
            resource: resource.into(),
            beyond_allocatable: false,
        };
        let u = unschedulable(&[
            ("a", vec![short("cpu"), short("memory")]),
            ("b", vec![short("cpu")]),
            ("c", vec![Reason::UntoleratedTaint]),
        ]);
        assert_eq!(
            u.message(),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 2 Insufficient \
             cpu. no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for \
             scheduling, 2 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn counts_sort_as_strings() {
        let mut per_node: Vec<(String, Vec<Reason>)> = (0..10)
            .map(|i| (format!("a{i:02}"), vec![Reason::NodeAffinity]))
            .collect();
        per_node.push(("b1".into(), vec![Reason::Unschedulable]));
        per_node.push(("b2".into(), vec![Reason::Unschedulable]));
        let u = Unschedulable {
            node_count: 12,
            prefilter: None,
            per_node: per_node.into_iter().collect(),
        };
        assert!(u.message().starts_with(
            "0/12 nodes are available: 10 node(s) didn't match Pod's node affinity/selector, 2 node(s) were \
             unschedulable."
        ));
        assert!(
            u.message()
                .ends_with(": 12 Preemption is not helpful for scheduling.")
        );
    }

    #[test]
    fn a_reason_for_all_nodes_replaces_the_counts() {
        let u = Unschedulable {
            node_count: 2,
            prefilter: Some("persistentvolumeclaim \"data\" not found".into()),
            per_node: BTreeMap::new(),
        };
        assert_eq!(
            u.message(),
            "0/2 nodes are available: persistentvolumeclaim \"data\" not found. no new claims to deallocate, \
             preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn no_nodes_at_all() {
        let u = unschedulable(&[]);
        assert_eq!(u.message(), "no nodes available to schedule pods");
    }
}
