//! `schedule` end to end: scores choosing among feasible nodes, the aggregated message, and dkv's members placed one
//! after the other.

use k8s_openapi::api::core::v1::{
    Affinity, Node, Pod, PodAffinityTerm, PodAntiAffinity, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};

use super::fixtures::{labelled, node, on, plain, pod, requesting, selector, taint, zoned};
use super::{Reason, VolumeFacts, schedule};

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn place(p: &Pod, nodes: &[Node], pods: &[Pod]) -> Result<String, super::Unschedulable> {
    schedule(p, nodes, pods, &VolumeFacts::new())
}

/// A member of a dkv cluster as the operator builds it: preferred anti-affinity on hostname, preferred spread over
/// zones, both over the cluster's pods.
fn member(name: &str) -> Pod {
    let mut p = labelled(pod(name), &[("app.kubernetes.io/instance", "orders")]);
    if let Some(s) = p.spec.as_mut() {
        s.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(selector(&[(
                                "app.kubernetes.io/instance",
                                "orders",
                            )])),
                            topology_key: HOST.into(),
                            ..PodAffinityTerm::default()
                        },
                    },
                ]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        });
        s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(selector(&[("app.kubernetes.io/instance", "orders")])),
            ..TopologySpreadConstraint::default()
        }]);
    }
    requesting(p, "100m", "256Mi")
}

/// Places the members one after the other, each seeing the ones before it.
fn place_members(nodes: &[Node], count: usize) -> Vec<String> {
    let mut placed: Vec<Pod> = Vec::new();
    let mut where_ = Vec::new();
    for i in 0..count {
        let m = member(&format!("orders-{i}"));
        let n = place(&m, nodes, &placed).expect("a member fits");
        placed.push(on(m, &n));
        where_.push(n);
    }
    where_
}

#[test]
fn dkv_members_land_on_three_nodes_in_three_zones() {
    let nodes = [
        zoned("node-1", "zone-a"),
        zoned("node-2", "zone-b"),
        zoned("node-3", "zone-c"),
    ];
    assert_eq!(place_members(&nodes, 3), ["node-1", "node-2", "node-3"]);
}

#[test]
fn dkv_members_spread_over_zones_before_nodes_of_one_zone() {
    // Two nodes per zone, listed zone by zone: hostname anti-affinity alone would take node-2 (zone-a) second.
    let nodes = [
        zoned("node-1", "zone-a"),
        zoned("node-2", "zone-a"),
        zoned("node-3", "zone-b"),
        zoned("node-4", "zone-b"),
        zoned("node-5", "zone-c"),
        zoned("node-6", "zone-c"),
    ];
    assert_eq!(place_members(&nodes, 3), ["node-1", "node-3", "node-5"]);
}

#[test]
fn dkv_members_all_fit_on_one_node() {
    let nodes = [zoned("kube-local", "zone-a")];
    assert_eq!(place_members(&nodes, 3), ["kube-local"; 3]);
}

#[test]
fn the_aggregated_message_for_mixed_reasons() {
    let mut cordoned = plain("node-1");
    cordoned
        .spec
        .iter_mut()
        .for_each(|s| s.unschedulable = Some(true));
    let nodes = [cordoned, plain("node-2"), plain("node-3")];
    let placed = [
        on(labelled(pod("x"), &[("app", "db")]), "node-2"),
        on(labelled(pod("y"), &[("app", "db")]), "node-3"),
    ];
    let mut p = labelled(pod("p"), &[("app", "db")]);
    if let Some(s) = p.spec.as_mut() {
        s.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(selector(&[("app", "db")])),
                    topology_key: HOST.into(),
                    ..PodAffinityTerm::default()
                }]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        });
    }
    let err = place(&p, &nodes, &placed).expect_err("nowhere to go");
    assert_eq!(err.per_node["node-1"], vec![Reason::Unschedulable]);
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match pod anti-affinity rules. \
         no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for \
         scheduling, 2 No preemption victims found for incoming pod."
    );
}

#[test]
fn a_node_counts_under_the_first_filter_that_rejects_it() {
    // Tainted and too small: TaintToleration runs before NodeResourcesFit, so only the taint is counted.
    let nodes = [node(
        "a",
        &[],
        vec![taint("dedicated", "x", "NoSchedule")],
        "1",
        "1Gi",
    )];
    let p = requesting(pod("p"), "2", "1Gi");
    let err = place(&p, &nodes, &[]).expect_err("nowhere to go");
    assert_eq!(
        err.message(),
        "0/1 nodes are available: 1 node(s) had untolerated taint(s). no new claims to deallocate, preemption: \
         0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
}

#[test]
fn insufficient_resources_beyond_allocatable_are_not_helped_by_preemption() {
    let nodes = [
        node("a", &[], vec![], "1", "1Gi"),
        node("b", &[], vec![], "4", "1Gi"),
    ];
    let placed = [on(requesting(pod("x"), "3", "0"), "b")];
    let p = requesting(pod("p"), "2", "0");
    let err = place(&p, &nodes, &placed).expect_err("nowhere to go");
    assert_eq!(
        err.message(),
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, preemption: 0/2 nodes are \
         available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
    );
}

#[test]
fn a_named_node_is_kept_and_a_missing_one_is_reported() {
    let nodes = [plain("a"), plain("b")];
    let mut p = pod("p");
    p.spec
        .iter_mut()
        .for_each(|s| s.node_name = Some("b".into()));
    assert_eq!(place(&p, &nodes, &[]).as_deref(), Ok("b"));
    p.spec
        .iter_mut()
        .for_each(|s| s.node_name = Some("gone".into()));
    let err = place(&p, &nodes, &[]).expect_err("no such node");
    assert!(
        err.message().starts_with(
            "0/2 nodes are available: 2 node(s) didn't match the requested node name."
        )
    );
}

#[test]
fn least_allocated_prefers_the_emptier_node() {
    let nodes = [plain("a"), plain("b")];
    let placed = [on(requesting(pod("x"), "2", "4Gi"), "a")];
    assert_eq!(place(&pod("p"), &nodes, &placed).as_deref(), Ok("b"));
}

#[test]
fn prefer_no_schedule_lowers_a_node() {
    let nodes = [
        node(
            "a",
            &[],
            vec![taint("spot", "", "PreferNoSchedule")],
            "4",
            "8Gi",
        ),
        plain("b"),
    ];
    assert_eq!(place(&pod("p"), &nodes, &[]).as_deref(), Ok("b"));
}

#[test]
fn preferred_node_affinity_outweighs_resources() {
    use k8s_openapi::api::core::v1::{
        NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
    };
    let nodes = [
        node("a", &[("disk", "hdd")], vec![], "4", "8Gi"),
        node("b", &[("disk", "ssd")], vec![], "4", "8Gi"),
    ];
    let placed = [on(requesting(pod("x"), "1", "2Gi"), "b")];
    let mut p = pod("p");
    if let Some(s) = p.spec.as_mut() {
        s.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    PreferredSchedulingTerm {
                        weight: 1,
                        preference: NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "disk".into(),
                                operator: "In".into(),
                                values: Some(vec!["ssd".into()]),
                            }]),
                            match_fields: None,
                        },
                    },
                ]),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        });
    }
    assert_eq!(place(&p, &nodes, &placed).as_deref(), Ok("b"));
}

#[test]
fn preferred_pod_affinity_draws_the_pod_to_its_peer() {
    use k8s_openapi::api::core::v1::PodAffinity;
    let nodes = [plain("a"), plain("b")];
    let placed = [on(
        requesting(labelled(pod("cache"), &[("app", "cache")]), "1", "2Gi"),
        "b",
    )];
    let mut p = pod("p");
    if let Some(s) = p.spec.as_mut() {
        s.affinity = Some(Affinity {
            pod_affinity: Some(PodAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 50,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(selector(&[("app", "cache")])),
                            topology_key: HOST.into(),
                            ..PodAffinityTerm::default()
                        },
                    },
                ]),
                ..PodAffinity::default()
            }),
            ..Affinity::default()
        });
    }
    assert_eq!(place(&p, &nodes, &placed).as_deref(), Ok("b"));
}

#[test]
fn equal_nodes_go_to_the_first_name() {
    let nodes = [plain("c"), plain("a"), plain("b")];
    assert_eq!(place(&pod("p"), &nodes, &[]).as_deref(), Ok("a"));
}

#[test]
fn no_nodes() {
    let err = place(&pod("p"), &[], &[]).expect_err("no nodes");
    assert_eq!(err.message(), "no nodes available to schedule pods");
}
