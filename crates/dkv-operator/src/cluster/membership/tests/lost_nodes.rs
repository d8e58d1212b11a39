//! Tests: members on lost nodes, moved off only with the opt-in, only with quorum, one at a time.

use super::*;

const RELOCATE: Pinned = Pinned {
    kind: OperationKind::RelocateMember,
    ordinal: 1,
};

const REMOVE: Step = Step::RemoveMember {
    id: 101,
    ordinal: 1,
};

fn stranded(ordinal: i32, replace: bool, data: DataPlacement) -> Stranded {
    Stranded {
        ordinal,
        replace,
        data,
        pod_uid: Some(format!("pod-{ordinal}")),
        claim_uid: Some(format!("claim-{ordinal}")),
    }
}

/// Three members; member 1's node is lost: etcd cannot reach it, its pod is
/// not Ready.
fn node_lost(replace: bool, data: DataPlacement) -> Observation {
    let mut obs = cluster(3, 3);
    let m = &mut obs.members.as_mut().unwrap()[1];
    m.healthy = false;
    m.reachable = false;
    obs.pods[1].ready = false;
    obs.stranded = vec![stranded(1, replace, data)];
    obs
}

fn evict(claim: Option<&str>) -> Step {
    Step::EvictFromLostNode {
        ordinal: 1,
        pod_uid: Some("pod-1".into()),
        claim_uid: claim.map(str::to_owned),
    }
}

/// The re-created pod: on another node, its member-init refused to start
/// the member it found not listed yet.
fn recreated_pod(obs: &mut Observation) {
    obs.stranded.clear();
    obs.pods[1] = ObservedPod {
        ready: false,
        init_done: false,
        init_refused: true,
        ..pod(1)
    };
}

#[test]
fn without_the_opt_in_a_lost_member_is_reported_and_waited_for() {
    let obs = node_lost(false, DataPlacement::NodeBound);
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
    );
}

#[test]
fn a_member_bound_to_its_node_leaves_etcd_before_its_pod_and_claim_go_then_joins_empty() {
    let mut obs = node_lost(true, DataPlacement::NodeBound);
    assert_eq!(next_step(&obs), Step::Begin(RELOCATE));
    obs.pinned = Some(RELOCATE);
    // 1. Membership first: out of etcd (its data can never rejoin).
    assert_eq!(next_step(&obs), REMOVE);
    obs.members.as_mut().unwrap().remove(1);
    // 2. The claim bound to the node, then the stuck pod, go.
    assert_eq!(next_step(&obs), evict(Some("claim-1")));
    // 3. The StatefulSet re-creates the pod elsewhere; it joins as a learner.
    recreated_pod(&mut obs);
    assert_eq!(next_step(&obs), Step::AddLearner { ordinal: 1 });
    obs.members.as_mut().unwrap().insert(1, new_learner(1, 201));
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    obs.pods[1] = ObservedPod {
        ready: false,
        ..pod(1)
    };
    promote_started_learner(&mut obs, 1, 201);
    obs.pods[1].ready = true;
    assert_eq!(next_step(&obs), Step::Finish(RELOCATE));
}

#[test]
fn a_member_without_a_volume_is_replaced_the_same_way_with_no_claim_to_delete() {
    let mut obs = node_lost(true, DataPlacement::Ephemeral);
    obs.stranded[0].claim_uid = None;
    obs.pinned = Some(RELOCATE);
    assert!(matches!(next_step(&obs), Step::RemoveMember { .. }));
    obs.members.as_mut().unwrap().remove(1);
    assert_eq!(next_step(&obs), evict(None));
}

#[test]
fn a_member_whose_volume_follows_it_keeps_its_place_and_data_only_its_pod_moves() {
    let mut obs = node_lost(true, DataPlacement::FollowsPod);
    assert_eq!(next_step(&obs), Step::Begin(RELOCATE));
    obs.pinned = Some(RELOCATE);
    // Never removed from etcd; the claim stays for the volume to reattach.
    assert_eq!(next_step(&obs), evict(None));
    // Re-created elsewhere, the same member restarts from its data.
    obs.stranded.clear();
    obs.pods[1] = ObservedPod {
        ready: false,
        ..pod(1)
    };
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
    );
    obs.members.as_mut().unwrap()[1].healthy = true;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 1 })
    );
    obs.pods[1].ready = true;
    assert_eq!(next_step(&obs), Step::Finish(RELOCATE));
}

#[test]
fn a_member_that_still_serves_is_never_moved() {
    for data in [
        DataPlacement::NodeBound,
        DataPlacement::FollowsPod,
        DataPlacement::Ephemeral,
    ] {
        // The node says NotReady, but etcd's member answers and follows.
        let mut obs = cluster(3, 3);
        obs.stranded = vec![stranded(1, true, data)];
        assert_eq!(next_step(&obs), Step::Converged, "{data:?}");
    }
}

#[test]
fn nothing_is_moved_when_the_others_would_not_keep_quorum() {
    for data in [DataPlacement::NodeBound, DataPlacement::FollowsPod] {
        let mut obs = node_lost(true, data);
        obs.members.as_mut().unwrap()[2].healthy = false;
        assert!(
            matches!(
                next_step(&obs),
                Step::Wait(WaitReason::WouldBreakQuorum { .. })
            ),
            "{data:?}: {:?}",
            next_step(&obs)
        );
        // Pinned earlier (say, before member 2 fell ill): the removal waits.
        obs.pinned = Some(RELOCATE);
        if data == DataPlacement::NodeBound {
            assert!(matches!(
                next_step(&obs),
                Step::Wait(WaitReason::WouldBreakQuorum { .. })
            ));
        }
    }
}

#[test]
fn nothing_is_moved_without_quorum() {
    let mut obs = node_lost(true, DataPlacement::NodeBound);
    for i in [0, 2] {
        let m = &mut obs.members.as_mut().unwrap()[i];
        m.healthy = false;
        m.reachable = false;
    }
    assert!(matches!(
        next_step(&obs),
        Step::Wait(WaitReason::QuorumLost { .. })
    ));
    obs.members = None;
    assert_eq!(next_step(&obs), Step::Wait(WaitReason::EtcdUnreachable));
}

#[test]
fn another_operation_in_flight_is_finished_first() {
    // A learner being added when member 1's node is lost: the scale-up goes
    // on (it needs no member but a quorum), nothing is relocated meanwhile.
    let mut obs = node_lost(true, DataPlacement::NodeBound);
    obs.desired_size = 4;
    obs.members.as_mut().unwrap().push(ObservedMember {
        raft_index: 1000,
        started: true,
        healthy: true,
        ..new_learner(3, 103)
    });
    obs.pods.push(pod(3));
    obs.replicas = 4;
    assert_pinned_scale_up_promotes_member_3(&mut obs);
}

#[test]
fn a_restart_waiting_on_a_member_due_for_relocation_yields_to_it() {
    // Member 2's restart (an upgrade, a template change) is pinned and has
    // not begun: it waits for every other member to be healthy, which
    // member 1 on its lost node will not be. Without the opt-in it waits;
    // with it, it yields, and the relocation begins next.
    for (replace, yields) in [(false, false), (true, true)] {
        let mut obs = node_lost(replace, DataPlacement::NodeBound);
        let restart = Pinned {
            kind: OperationKind::RestartMember,
            ordinal: 2,
        };
        obs.pinned = Some(restart);
        obs.pods[2].revision = Some("rev-0".to_owned());
        let expected = if yields {
            Step::Finish(restart)
        } else {
            Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
        };
        assert_eq!(next_step(&obs), expected, "replace: {replace}");
        obs.pinned = None;
        if yields {
            assert_eq!(next_step(&obs), Step::Begin(RELOCATE));
        }
    }
}

#[test]
fn lost_members_are_moved_one_at_a_time_lowest_ordinal_first() {
    let mut obs = cluster(5, 5);
    for i in [1, 3] {
        let m = &mut obs.members.as_mut().unwrap()[i];
        m.healthy = false;
        m.reachable = false;
    }
    obs.stranded = vec![
        stranded(1, true, DataPlacement::NodeBound),
        stranded(3, true, DataPlacement::NodeBound),
    ];
    assert_eq!(next_step(&obs), Step::Begin(RELOCATE));
    obs.pinned = Some(RELOCATE);
    assert_eq!(next_step(&obs), REMOVE);
}

#[test]
fn a_node_back_before_the_member_left_ends_the_relocation() {
    let mut obs = node_lost(true, DataPlacement::NodeBound);
    obs.pinned = Some(RELOCATE);
    let m = &mut obs.members.as_mut().unwrap()[1];
    m.healthy = true;
    m.reachable = true;
    obs.pods[1].ready = true;
    assert_eq!(next_step(&obs), Step::Finish(RELOCATE));
}

#[test]
fn a_node_back_after_the_member_left_still_loses_the_old_pod_and_claim() {
    // Removed from etcd, then the node returned with the old pod: that pod
    // holds the data of a member etcd has forgotten. It is still listed
    // (it predates the pin), so it goes with its claim before the member
    // is added again.
    let mut obs = node_lost(true, DataPlacement::NodeBound);
    obs.pinned = Some(RELOCATE);
    obs.members.as_mut().unwrap().remove(1);
    obs.stranded[0].replace = false;
    assert_eq!(next_step(&obs), evict(Some("claim-1")));
}

#[test]
fn a_restart_of_the_member_on_the_lost_node_itself_yields_too() {
    // Restarted onto the new template just before its node died: the
    // restart would wait for it forever.
    let mut obs = node_lost(true, DataPlacement::NodeBound);
    let upgrade = Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 1,
    };
    obs.pinned = Some(upgrade);
    assert_eq!(next_step(&obs), Step::Finish(upgrade));
    obs.stranded[0].replace = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::UpgradeInProgress { ordinal: 1 })
    );
}

#[test]
fn a_learner_whose_node_is_lost_mid_scale_up_is_relocated_instead_of_waited_for() {
    let add = Pinned {
        kind: OperationKind::AddLearner,
        ordinal: 3,
    };
    let mut obs = cluster(3, 4);
    obs.members.as_mut().unwrap().push(new_learner(3, 203));
    obs.pods.push(ObservedPod {
        ready: false,
        ..pod(3)
    });
    obs.replicas = 4;
    obs.pinned = Some(add);
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 3 })
    );
    // Without the opt-in it waits for the node.
    obs.stranded = vec![stranded(3, false, DataPlacement::NodeBound)];
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 3 })
    );
    // With it, the scale-up yields and the learner is relocated.
    obs.stranded = vec![stranded(3, true, DataPlacement::NodeBound)];
    assert_eq!(next_step(&obs), Step::Finish(add));
    obs.pinned = None;
    let relocate = Pinned {
        kind: OperationKind::RelocateMember,
        ordinal: 3,
    };
    assert_eq!(next_step(&obs), Step::Begin(relocate));
    obs.pinned = Some(relocate);
    assert_eq!(
        next_step(&obs),
        Step::RemoveMember {
            id: 203,
            ordinal: 3
        }
    );
}
