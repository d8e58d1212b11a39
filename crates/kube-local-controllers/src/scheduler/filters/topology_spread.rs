//! PodTopologySpread: `topologySpreadConstraints` with `whenUnsatisfiable: DoNotSchedule` reject a node where the
//! pod would make its domain exceed `maxSkew` over the least-populated domain; `ScheduleAnyway` constraints only
//! score (see `scores`).
//!
//! As in kube-scheduler: pods are counted in the pod's namespace, by the constraint's labelSelector (with the pod's
//! own values of `matchLabelKeys` added), on the nodes that the pod's nodeSelector and required node affinity admit
//! (`nodeAffinityPolicy: Honor`, the default; `Ignore` counts every node), whose taints the pod tolerates only with
//! `nodeTaintsPolicy: Honor` (the default `Ignore` counts tainted nodes too), and that carry every constraint's
//! topology key; a node lacking a DoNotSchedule key is rejected as missing the label;
//! terminating pods are not counted; with fewer domains than `minDomains` the global minimum is 0.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::Snapshot;
use super::node_affinity::pod_node_affinity_admits;
use super::taints::taints_tolerated;
use crate::scheduler::message::Reason;
use crate::scheduler::selectors::{label_selector_selects, node_labels, pod_labels};

/// The pod's constraints with the given `whenUnsatisfiable`.
pub(crate) fn spread_constraints<'a>(
    snapshot: &Snapshot<'a>,
    when: &str,
) -> Vec<&'a TopologySpreadConstraint> {
    snapshot
        .pod
        .spec
        .iter()
        .flat_map(|s| s.topology_spread_constraints.iter().flatten())
        .filter(|c| c.when_unsatisfiable == when)
        .collect()
}

/// The constraint's selector with the pod's own values of its `matchLabelKeys`.
fn effective_selector(
    snapshot: &Snapshot<'_>,
    c: &TopologySpreadConstraint,
) -> Option<LabelSelector> {
    let mut selector = c.label_selector.clone()?;
    let own = pod_labels(snapshot.pod);
    for key in c.match_label_keys.iter().flatten() {
        if let Some(value) = own.get(key) {
            selector
                .match_labels
                .get_or_insert_with(BTreeMap::new)
                .insert(key.clone(), value.clone());
        }
    }
    Some(selector)
}

/// Whether the node's pods count for constraint `c`: it carries the keys of all the pod's constraints of that kind,
/// and passes the pod's node affinity and taints as the constraint's policies say (Honor and Ignore by default).
fn counted_node(
    snapshot: &Snapshot<'_>,
    constraints: &[&TopologySpreadConstraint],
    c: &TopologySpreadConstraint,
    node: &Node,
) -> bool {
    let labels = node_labels(node);
    let affinity_ok = c.node_affinity_policy.as_deref() == Some("Ignore")
        || pod_node_affinity_admits(snapshot.pod, node);
    let taints_ok =
        c.node_taints_policy.as_deref() != Some("Honor") || taints_tolerated(snapshot.pod, node);
    affinity_ok
        && taints_ok
        && constraints
            .iter()
            .all(|k| labels.contains_key(&k.topology_key))
}

/// Matching pods per domain of the constraint, over the counted nodes (every domain of a counted node present, 0
/// when it holds none).
fn counts_by_domain(
    snapshot: &Snapshot<'_>,
    constraints: &[&TopologySpreadConstraint],
    c: &TopologySpreadConstraint,
) -> BTreeMap<String, i64> {
    let selector = effective_selector(snapshot, c);
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for node in snapshot.nodes {
        if counted_node(snapshot, constraints, c, node)
            && let Some(domain) = node_labels(node).get(&c.topology_key)
        {
            counts.entry(domain.clone()).or_default();
        }
    }
    for (pod, node) in &snapshot.placed {
        let counts_here = pod.metadata.namespace.as_deref().unwrap_or("default")
            == snapshot.namespace
            && pod.metadata.deletion_timestamp.is_none()
            && label_selector_selects(selector.as_ref(), pod_labels(pod))
            && counted_node(snapshot, constraints, c, node);
        if counts_here && let Some(domain) = node_labels(node).get(&c.topology_key) {
            *counts.entry(domain.clone()).or_default() += 1;
        }
    }
    counts
}

/// How many pods the constraint counts in the node's domain, among the pod's constraints of the same kind; `None`
/// when the node lacks the topology key.
pub(crate) fn matching_pods_in_domain(
    snapshot: &Snapshot<'_>,
    constraints: &[&TopologySpreadConstraint],
    c: &TopologySpreadConstraint,
    node: &Node,
) -> Option<i64> {
    let domain = node_labels(node).get(&c.topology_key)?;
    Some(
        counts_by_domain(snapshot, constraints, c)
            .get(domain)
            .copied()
            .unwrap_or(0),
    )
}

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    let constraints = spread_constraints(snapshot, "DoNotSchedule");
    let labels = node_labels(node);
    if constraints
        .iter()
        .any(|c| !labels.contains_key(&c.topology_key))
    {
        return vec![Reason::TopologySpreadMissingLabel];
    }
    for c in &constraints {
        let counts = counts_by_domain(snapshot, &constraints, c);
        let too_few_domains = c
            .min_domains
            .is_some_and(|min| (counts.len() as i64) < i64::from(min));
        let global_min = if too_few_domains {
            0
        } else {
            counts.values().copied().min().unwrap_or(0)
        };
        let selector = effective_selector(snapshot, c);
        let self_match = i64::from(label_selector_selects(
            selector.as_ref(),
            pod_labels(snapshot.pod),
        ));
        let here = labels
            .get(&c.topology_key)
            .and_then(|d| counts.get(d))
            .copied()
            .unwrap_or(0);
        if here + self_match - global_min > i64::from(c.max_skew) {
            return vec![Reason::TopologySpread];
        }
    }
    vec![]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{labelled, on, plain, pod, selector, zoned};
    use crate::scheduler::volumes::VolumeFacts;
    use k8s_openapi::api::core::v1::Pod;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn spread(max_skew: i32, when: &str, min_domains: Option<i32>) -> Pod {
        let mut p = labelled(pod("p"), &[("app", "db")]);
        if let Some(s) = p.spec.as_mut() {
            s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
                max_skew,
                topology_key: ZONE.into(),
                when_unsatisfiable: when.into(),
                label_selector: Some(selector(&[("app", "db")])),
                min_domains,
                ..TopologySpreadConstraint::default()
            }]);
        }
        p
    }

    fn db(name: &str, node: &str) -> Pod {
        on(labelled(pod(name), &[("app", "db")]), node)
    }

    #[test]
    fn max_skew_rejects_the_crowded_zone() {
        let nodes = [
            zoned("a", "zone-a"),
            zoned("b", "zone-b"),
            zoned("c", "zone-c"),
        ];
        let placed = [db("x", "a"), db("y", "b")];
        let volumes = VolumeFacts::new();
        let p = spread(1, "DoNotSchedule", None);
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::TopologySpread]);
        assert_eq!(filter(&snap, &nodes[1]), vec![Reason::TopologySpread]);
        assert!(filter(&snap, &nodes[2]).is_empty());
    }

    #[test]
    fn pods_of_other_namespaces_and_selectors_do_not_count() {
        let nodes = [zoned("a", "zone-a"), zoned("b", "zone-b")];
        let mut elsewhere = db("x", "a");
        elsewhere.metadata.namespace = Some("other".into());
        let placed = [elsewhere, on(labelled(pod("w"), &[("app", "web")]), "a")];
        let volumes = VolumeFacts::new();
        let p = spread(1, "DoNotSchedule", None);
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }

    #[test]
    fn a_node_without_the_key_is_rejected_for_do_not_schedule_only() {
        let nodes = [zoned("a", "zone-a"), plain("bare")];
        let volumes = VolumeFacts::new();
        let hard = spread(1, "DoNotSchedule", None);
        let snap = Snapshot::new(&hard, &nodes, &[], &volumes);
        assert_eq!(
            filter(&snap, &nodes[1]),
            vec![Reason::TopologySpreadMissingLabel]
        );
        let soft = spread(1, "ScheduleAnyway", None);
        let snap = Snapshot::new(&soft, &nodes, &[], &volumes);
        assert!(filter(&snap, &nodes[1]).is_empty());
    }

    #[test]
    fn min_domains_counts_missing_domains_as_empty() {
        // Two zones hold one pod each: the global minimum is 1, so a second pod in zone-a is skew 1, allowed ...
        let nodes = [zoned("a", "zone-a"), zoned("b", "zone-b")];
        let placed = [db("x", "a"), db("y", "b")];
        let volumes = VolumeFacts::new();
        let p = spread(1, "DoNotSchedule", None);
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
        // ... unless three domains are demanded: then the minimum is 0 and skew 2 exceeds 1.
        let p = spread(1, "DoNotSchedule", Some(3));
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::TopologySpread]);
    }

    #[test]
    fn nodes_the_pod_cannot_use_do_not_count() {
        // zone-c is excluded by the pod's nodeSelector, so its empty domain does not pin the minimum to 0.
        let nodes = [
            crate::scheduler::fixtures::node(
                "a",
                &[(ZONE, "zone-a"), ("pool", "db")],
                vec![],
                "4",
                "8Gi",
            ),
            crate::scheduler::fixtures::node(
                "b",
                &[(ZONE, "zone-b"), ("pool", "db")],
                vec![],
                "4",
                "8Gi",
            ),
            zoned("c", "zone-c"),
        ];
        let placed = [db("x", "a"), db("y", "b")];
        let volumes = VolumeFacts::new();
        let mut p = spread(1, "DoNotSchedule", None);
        if let Some(s) = p.spec.as_mut() {
            s.node_selector = Some(crate::scheduler::fixtures::labels(&[("pool", "db")]));
        }
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }

    #[test]
    fn match_label_keys_narrow_the_count_to_the_pods_own_revision() {
        let nodes = [zoned("a", "zone-a"), zoned("b", "zone-b")];
        let old =
            |name: &str, node: &str| on(labelled(pod(name), &[("app", "db"), ("rev", "1")]), node);
        let placed = [old("x", "a"), old("y", "a")];
        let volumes = VolumeFacts::new();
        let mut p = spread(1, "DoNotSchedule", None);
        p.metadata.labels = Some(crate::scheduler::fixtures::labels(&[
            ("app", "db"),
            ("rev", "2"),
        ]));
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::TopologySpread]);
        if let Some(c) = p
            .spec
            .as_mut()
            .and_then(|s| s.topology_spread_constraints.as_mut())
            .and_then(|cs| cs.first_mut())
        {
            c.match_label_keys = Some(vec!["rev".into()]);
        }
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }

    #[test]
    fn terminating_pods_are_not_counted() {
        let nodes = [zoned("a", "zone-a"), zoned("b", "zone-b")];
        let mut leaving = db("x", "a");
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let placed = [leaving, db("y", "a")];
        let volumes = VolumeFacts::new();
        let p = spread(1, "DoNotSchedule", None);
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        // One counted pod in zone-a, none in zone-b: a second in zone-a is skew 2.
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::TopologySpread]);
        let placed = [db("y", "b")];
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }

    #[test]
    fn node_taints_policy_honor_leaves_untolerated_nodes_out_of_the_count() {
        use crate::scheduler::fixtures::{node, taint};
        // zone-c exists only on a tainted node; counted, its empty domain makes zone-a too crowded.
        let nodes = [
            zoned("a", "zone-a"),
            zoned("b", "zone-b"),
            node(
                "c",
                &[(ZONE, "zone-c")],
                vec![taint("gpu", "", "NoSchedule")],
                "4",
                "8Gi",
            ),
        ];
        let placed = [db("x", "a"), db("y", "b")];
        let volumes = VolumeFacts::new();
        let mut p = spread(1, "DoNotSchedule", None);
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::TopologySpread]);
        if let Some(c) = p
            .spec
            .as_mut()
            .and_then(|s| s.topology_spread_constraints.as_mut())
            .and_then(|cs| cs.first_mut())
        {
            c.node_taints_policy = Some("Honor".into());
        }
        let snap = Snapshot::new(&p, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }
}
