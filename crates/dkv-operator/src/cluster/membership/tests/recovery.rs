//! Tests: lost volumes, quorum loss and its recovery, restore from backup.

use super::*;

#[test]
fn a_lost_volume_is_replaced_remove_add_restart_promote() {
    let mut obs = cluster(3, 3);
    obs.members.as_mut().unwrap()[1].healthy = false;
    obs.pods[1].ready = false;
    obs.pods[1].data_lost = true;
    let pinned = begin_replacing(&mut obs, 1);
    remove_then_add_learner(&mut obs, 1, 101, 201);
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    obs.pods[1].data_lost = false;
    obs.members.as_mut().unwrap()[1].raft_index = 1000;
    promote_started_learner(&mut obs, 1, 201);
    assert_eq!(next_step(&obs), Step::Finish(pinned));
}

#[test]
fn a_corrupt_member_is_replaced_only_with_the_opt_in_remove_add_restart_promote() {
    // Member 1's initial corruption check refuses its data: it crash-loops.
    let mut obs = cluster(3, 3);
    obs.members.as_mut().unwrap()[1].healthy = false;
    obs.pods[1].ready = false;
    obs.corrupt = vec![1];
    // Reported only: nothing disruptive while it is unwell.
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
    );
    obs.replace_corrupt = true;
    let pinned = begin_replacing(&mut obs, 1);
    remove_then_add_learner(&mut obs, 1, 101, 201);
    // Its pod still runs the old data: it restarts, member-init sets the
    // data aside.
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    // The new pod initialising: waited for, not restarted again.
    obs.pods[1] = ObservedPod {
        ready: false,
        init_done: false,
        ..pod(1)
    };
    obs.corrupt.clear();
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::LearnerCatchingUp { ordinal: 1 })
    );
    obs.pods[1].init_done = true;
    obs.pods[1].replaced = true;
    promote_started_learner(&mut obs, 1, 201);
    obs.pods[1].ready = true;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
}

#[test]
fn a_corrupt_member_is_replaced_only_from_a_sound_majority() {
    // Two of three flagged (a corrupt leader disagrees with both
    // followers): no majority agrees, nobody is replaced.
    let mut obs = cluster(3, 3);
    obs.replace_corrupt = true;
    obs.corrupt = vec![1, 2];
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::WouldBreakQuorum {
            healthy: 1,
            needed: 2
        })
    );
    // One flagged while another member is down: the rest is no quorum.
    obs.corrupt = vec![1];
    obs.members.as_mut().unwrap()[2].healthy = false;
    assert!(matches!(
        next_step(&obs),
        Step::Wait(WaitReason::WouldBreakQuorum { .. })
    ));
    // Two members: no majority to copy from.
    let mut pair = cluster(2, 2);
    pair.replace_corrupt = true;
    pair.corrupt = vec![1];
    assert!(matches!(
        next_step(&pair),
        Step::Wait(WaitReason::WouldBreakQuorum { .. })
    ));
    // A corrupt leader hands leadership over before it is removed.
    let mut obs = cluster(3, 3);
    obs.replace_corrupt = true;
    obs.corrupt = vec![0];
    obs.pinned = Some(Pinned {
        kind: OperationKind::ReplaceMember,
        ordinal: 0,
    });
    assert!(matches!(
        next_step(&obs),
        Step::MoveLeader { from: 100, .. }
    ));
}

#[test]
fn a_lost_volume_is_not_replaced_when_quorum_would_break() {
    let mut obs = cluster(3, 3);
    for i in [1, 2] {
        obs.members.as_mut().unwrap()[i].healthy = false;
    }
    obs.pods[1].data_lost = true;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::WouldBreakQuorum {
            healthy: 1,
            needed: 2
        })
    );
}

/// Members 1 and 2 of 3 gone for good: 0 answers but has no leader.
fn quorum_lost_cluster() -> Observation {
    let mut obs = cluster(3, 3);
    for m in obs.members.as_mut().unwrap() {
        m.healthy = false;
        m.leader = false;
        m.reachable = m.ordinal == 0;
    }
    for p in &mut obs.pods {
        p.ready = false;
    }
    obs
}

#[test]
fn quorum_loss_is_reported_and_only_a_policy_recovers() {
    let mut obs = quorum_lost_cluster();
    let lost = Step::Wait(WaitReason::QuorumLost {
        reachable: 1,
        needed: 2,
    });
    assert_eq!(next_step(&obs), lost);
    obs.desired_size = 1;
    assert_eq!(next_step(&obs), lost, "not even a scale-down");
    obs.recovery_allowed = true;
    assert_eq!(next_step(&obs), begin(OperationKind::RecoverQuorum, 0));
    // The survivor is the one with the most of the log.
    let members = obs.members.as_mut().unwrap();
    members[2].reachable = true;
    members[2].raft_index = 2000;
    obs.members.as_mut().unwrap()[0].reachable = false;
    assert_eq!(next_step(&obs), begin(OperationKind::RecoverQuorum, 2));
}

#[test]
fn a_restore_from_backup_restarts_every_member_once_then_waits_for_all_to_serve() {
    let mut obs = quorum_lost_cluster();
    obs.restore_allowed = true;
    assert_eq!(next_step(&obs), begin(OperationKind::RestoreFromBackup, 0));
    // Even when no member answers at all.
    obs.members = None;
    assert_eq!(next_step(&obs), begin(OperationKind::RestoreFromBackup, 0));

    let pinned = Pinned {
        kind: OperationKind::RestoreFromBackup,
        ordinal: 0,
    };
    obs.pinned = Some(pinned);
    obs.restore_allowed = false;
    // Pods that ran before the restore restart, lowest first; a pod
    // still initialising (its restore steps running) is left alone.
    obs.pods[0].init_done = false;
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    obs.pods[1].init_done = false;
    obs.pods[2].init_done = false;
    obs.pods[2].init_refused = true;
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    let waiting = Step::Wait(WaitReason::RestoreInProgress);
    obs.pods[2].init_refused = false;
    assert_eq!(next_step(&obs), waiting);

    // The restored members come up as the new cluster.
    for p in &mut obs.pods {
        p.init_done = true;
        p.restored = true;
        p.ready = true;
    }
    let mut members: Vec<ObservedMember> = (0..3).map(member).collect();
    members[2].healthy = false;
    obs.members = Some(members);
    assert_eq!(next_step(&obs), waiting, "one member does not serve yet");
    obs.members.as_mut().unwrap()[2].healthy = true;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    // A member still running old data (not restored) keeps it open.
    obs.pods[1].restored = false;
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
}

#[test]
fn an_election_is_not_quorum_loss() {
    // Nobody follows a live leader yet, but every voter answers.
    let mut obs = quorum_lost_cluster();
    for m in obs.members.as_mut().unwrap() {
        m.reachable = true;
    }
    obs.recovery_allowed = true;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 0 })
    );
}

#[test]
fn a_recovery_restarts_the_survivor_alone_then_once_more_without_the_flag() {
    let mut obs = quorum_lost_cluster();
    let pinned = Pinned {
        kind: OperationKind::RecoverQuorum,
        ordinal: 0,
    };
    obs.pinned = Some(pinned);
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 0 });
    // The new pod is starting: never deleted again meanwhile.
    obs.pods[0].init_done = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::RecoveryInProgress { ordinal: 0 })
    );
    obs.pods[0].init_done = true;
    obs.pods[0].forced_new_cluster = true;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::RecoveryInProgress { ordinal: 0 })
    );
    // etcd lists the survivor alone, leading itself.
    let mut survivor = obs.members.as_ref().unwrap()[0].clone();
    survivor.healthy = true;
    survivor.leader = true;
    obs.members = Some(vec![survivor]);
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 0 });
    obs.pods[0].forced_new_cluster = false;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    // Then it grows back, re-adding the lost ordinals.
    obs.pinned = None;
    assert_eq!(next_step(&obs), begin(OperationKind::AddLearner, 1));
}

#[test]
fn after_a_recovery_from_a_higher_member_the_lower_ordinals_are_re_added() {
    let mut obs = cluster(3, 3);
    let mut survivor = member(2);
    survivor.leader = true;
    obs.members = Some(vec![survivor]);
    assert_eq!(next_step(&obs), begin(OperationKind::AddLearner, 0));
}
