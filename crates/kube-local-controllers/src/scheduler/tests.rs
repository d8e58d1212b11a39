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
    if let Some(s) = cordoned.spec.as_mut() {
        s.unschedulable = Some(true);
    }
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
    if let Some(s) = p.spec.as_mut() {
        s.node_name = Some("b".into());
    }
    assert_eq!(place(&p, &nodes, &[]).as_deref(), Ok("b"));
    if let Some(s) = p.spec.as_mut() {
        s.node_name = Some("gone".into());
    }
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

#[test]
fn schedule_anyway_spread_prefers_the_emptier_zone_but_never_filters() {
    let nodes = [zoned("a", "zone-a"), zoned("b", "zone-b")];
    let app = |name: &str, node: &str| on(labelled(pod(name), &[("app", "web")]), node);
    let mut p = labelled(pod("p"), &[("app", "web")]);
    if let Some(s) = p.spec.as_mut() {
        s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(selector(&[("app", "web")])),
            ..TopologySpreadConstraint::default()
        }]);
    }
    // zone-b holds two pods that request nothing, zone-a one that takes half its cpu: spread outweighs resources.
    let placed = [
        on(
            requesting(labelled(pod("x"), &[("app", "web")]), "2", "4Gi"),
            "a",
        ),
        app("y", "b"),
        app("z", "b"),
    ];
    assert_eq!(place(&p, &nodes, &placed).as_deref(), Ok("a"));
    // Skew far beyond maxSkew still places the pod.
    let only_b = [zoned("b", "zone-b")];
    assert_eq!(place(&p, &only_b, &placed[1..]).as_deref(), Ok("b"));
}

#[test]
fn a_placed_pods_preferred_anti_affinity_pushes_the_pod_away() {
    let nodes = [plain("a"), plain("b")];
    let mut loner = requesting(pod("loner"), "1", "2Gi");
    if let Some(s) = loner.spec.as_mut() {
        s.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(selector(&[("noisy", "yes")])),
                            topology_key: HOST.into(),
                            ..PodAffinityTerm::default()
                        },
                    },
                ]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        });
    }
    // Node a holds the loner and is otherwise emptier; the noisy pod still goes to b.
    let placed = [on(loner, "a"), on(requesting(pod("big"), "2", "4Gi"), "b")];
    let noisy = labelled(pod("p"), &[("noisy", "yes")]);
    assert_eq!(place(&noisy, &nodes, &placed).as_deref(), Ok("b"));
    let quiet = pod("q");
    assert_eq!(place(&quiet, &nodes, &placed).as_deref(), Ok("a"));
}

#[test]
fn a_tolerated_prefer_no_schedule_taint_costs_nothing() {
    use super::fixtures::toleration;
    let nodes = [
        node(
            "a",
            &[],
            vec![taint("spot", "", "PreferNoSchedule")],
            "4",
            "8Gi",
        ),
        node("b", &[], vec![], "4", "8Gi"),
    ];
    let placed = [on(requesting(pod("x"), "1", "1Gi"), "b")];
    let mut p = pod("p");
    if let Some(s) = p.spec.as_mut() {
        s.tolerations = Some(vec![toleration("spot", "Exists", "", "PreferNoSchedule")]);
    }
    assert_eq!(place(&p, &nodes, &placed).as_deref(), Ok("a"));
    assert_eq!(place(&pod("q"), &nodes, &placed).as_deref(), Ok("b"));
}

#[test]
fn every_filter_reason_in_one_message() {
    use super::ClaimFact;
    use super::fixtures::toleration;
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource,
        Volume,
    };
    let mut cordoned = zoned("cordoned", "zone-a");
    if let Some(s) = cordoned.spec.as_mut() {
        s.unschedulable = Some(true);
    }
    let nodes = [
        cordoned,
        node(
            "tainted",
            &[(ZONE, "zone-a"), ("disk", "ssd")],
            vec![taint("gpu", "", "NoExecute")],
            "4",
            "8Gi",
        ),
        node("hdd", &[(ZONE, "zone-a")], vec![], "4", "8Gi"),
        node(
            "small",
            &[(ZONE, "zone-a"), ("disk", "ssd")],
            vec![],
            "1",
            "8Gi",
        ),
        node(
            "elsewhere",
            &[(ZONE, "zone-b"), ("disk", "ssd")],
            vec![],
            "4",
            "8Gi",
        ),
        node("bare", &[("disk", "ssd")], vec![], "4", "8Gi"),
        node(
            "crowded",
            &[(ZONE, "zone-c"), ("disk", "ssd")],
            vec![],
            "4",
            "8Gi",
        ),
    ];
    let mut p = requesting(labelled(pod("p"), &[("app", "db")]), "2", "1Gi");
    if let Some(s) = p.spec.as_mut() {
        s.node_selector = Some(super::fixtures::labels(&[("disk", "ssd")]));
        s.tolerations = Some(vec![toleration("other", "Exists", "", "")]);
        s.volumes = Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: "data".into(),
                read_only: None,
            }),
            ..Volume::default()
        }]);
        s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "db")])),
            ..TopologySpreadConstraint::default()
        }]);
    }
    let mut volumes = VolumeFacts::new();
    volumes.insert(
        "default",
        "data",
        ClaimFact::Bound {
            node_affinity: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: ZONE.into(),
                        operator: "NotIn".into(),
                        values: Some(vec!["zone-b".into()]),
                    }]),
                    match_fields: None,
                }],
            }),
        },
    );
    let placed = [
        on(labelled(pod("x"), &[("app", "db")]), "crowded"),
        on(labelled(pod("y"), &[("app", "db")]), "crowded"),
    ];
    let err = schedule(&p, &nodes, &placed, &volumes).expect_err("nowhere to go");
    assert_eq!(
        err.message(),
        "0/7 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match PersistentVolume's node affinity, \
         1 node(s) didn't match Pod's node affinity/selector, 1 node(s) didn't match pod topology spread \
         constraints, 1 node(s) didn't match pod topology spread constraints (missing required label), 1 node(s) \
         had untolerated taint(s), 1 node(s) were unschedulable. no new claims to deallocate, preemption: 0/7 \
         nodes are available: 1 No preemption victims found for incoming pod, 6 Preemption is not helpful for \
         scheduling."
    );
}
