//! NodeAffinity: the pod's `nodeSelector` and required node affinity must admit the node; preferred node affinity
//! only scores.

use k8s_openapi::api::core::v1::{Node, NodeAffinity, Pod};

use super::Snapshot;
use crate::scheduler::message::Reason;
use crate::scheduler::selectors::{node_labels, node_selector_matches, node_selector_term_matches};

fn node_affinity(pod: &Pod) -> Option<&NodeAffinity> {
    pod.spec.as_ref()?.affinity.as_ref()?.node_affinity.as_ref()
}

/// Whether the pod's nodeSelector (all pairs) and required node affinity (terms ORed) admit the node.
pub(crate) fn pod_node_affinity_admits(pod: &Pod, node: &Node) -> bool {
    let labels = node_labels(node);
    let selector_ok = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let required_ok = node_affinity(pod)
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_none_or(|required| node_selector_matches(required, node));
    selector_ok && required_ok
}

/// The sum of the weights of the preferred node affinity terms the node matches.
pub(crate) fn preferred_node_affinity_weight(pod: &Pod, node: &Node) -> i64 {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    node_affinity(pod)
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .filter(|t| node_selector_term_matches(&t.preference, name, node_labels(node)))
        .map(|t| i64::from(t.weight))
        .sum()
}

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    if pod_node_affinity_admits(snapshot.pod, node) {
        vec![]
    } else {
        vec![Reason::NodeAffinity]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{labels, pod, zoned};
    use crate::scheduler::volumes::VolumeFacts;
    use k8s_openapi::api::core::v1::{
        Affinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
    };

    fn zone_term(zones: &[&str]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "topology.kubernetes.io/zone".into(),
                operator: "In".into(),
                values: Some(zones.iter().map(|z| z.to_string()).collect()),
            }]),
            match_fields: None,
        }
    }

    fn with_affinity(a: NodeAffinity) -> Pod {
        let mut p = pod("p");
        if let Some(s) = p.spec.as_mut() {
            s.affinity = Some(Affinity {
                node_affinity: Some(a),
                ..Affinity::default()
            });
        }
        p
    }

    #[test]
    fn node_selector_keeps_matching_nodes() {
        let mut p = pod("p");
        if let Some(s) = p.spec.as_mut() {
            s.node_selector = Some(labels(&[("topology.kubernetes.io/zone", "zone-a")]));
        }
        let nodes = [zoned("a", "zone-a"), zoned("b", "zone-b")];
        let volumes = VolumeFacts::new();
        let snap = Snapshot::new(&p, &nodes, &[], &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
        assert_eq!(filter(&snap, &nodes[1]), vec![Reason::NodeAffinity]);
    }

    #[test]
    fn required_terms_are_ored() {
        let p = with_affinity(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![zone_term(&["zone-a"]), zone_term(&["zone-c"])],
            }),
            ..NodeAffinity::default()
        });
        assert!(pod_node_affinity_admits(&p, &zoned("a", "zone-a")));
        assert!(!pod_node_affinity_admits(&p, &zoned("b", "zone-b")));
        assert!(pod_node_affinity_admits(&p, &zoned("c", "zone-c")));
    }

    #[test]
    fn preferred_terms_add_their_weights() {
        let p = with_affinity(NodeAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                PreferredSchedulingTerm {
                    weight: 10,
                    preference: zone_term(&["zone-a", "zone-b"]),
                },
                PreferredSchedulingTerm {
                    weight: 5,
                    preference: zone_term(&["zone-a"]),
                },
            ]),
            ..NodeAffinity::default()
        });
        assert_eq!(
            preferred_node_affinity_weight(&p, &zoned("a", "zone-a")),
            15
        );
        assert_eq!(
            preferred_node_affinity_weight(&p, &zoned("b", "zone-b")),
            10
        );
        assert_eq!(preferred_node_affinity_weight(&p, &zoned("c", "zone-c")), 0);
    }
}
