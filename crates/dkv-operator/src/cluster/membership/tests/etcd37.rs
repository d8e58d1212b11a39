//! Tests: a member moves from 3.6 onto 3.7 only once its log since its
//! newest snapshot holds no entry etcd 3.5 wrote; other moves never wait
//! for that.

use super::*;

const V36: EtcdVersion = EtcdVersion::new(3, 6, 16);
const V37: EtcdVersion = EtcdVersion::new(3, 7, 3);

/// Three healthy voters on 3.6 (pods and etcd alike); the spec asks for
/// 3.7; member 2 has not taken its snapshot past 3.5's entries.
fn upgrading_to_3_7() -> Observation {
    let mut obs = cluster_on(V36);
    obs.desired_version = V37;
    obs.unsnapshotted = vec![SnapshotPending {
        ordinal: 2,
        applied: Some(5000),
        needed: Some(10_101),
    }];
    obs
}

#[test]
fn a_member_short_of_its_snapshot_waits_and_others_do_not_go_first() {
    let obs = upgrading_to_3_7();
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::SnapshotBefore37(obs.unsnapshotted[0]))
    );
    // Once it has taken one, the upgrade starts with it, as any upgrade.
    let mut ready = obs.clone();
    ready.unsnapshotted.clear();
    assert_eq!(next_step(&ready), begin(OperationKind::UpgradeMember, 2));
    // Member 2 on 3.7 already: member 1 is next, and it has its snapshot.
    let mut half = ready;
    half.members.as_mut().unwrap()[2].version = Some(V37);
    half.pods[2].version = Some(V37);
    half.unsnapshotted = vec![SnapshotPending {
        ordinal: 2,
        applied: Some(5000),
        needed: Some(10_101),
    }];
    assert_eq!(next_step(&half), begin(OperationKind::UpgradeMember, 1));
}

#[test]
fn moves_that_do_not_reach_3_7_never_wait_for_a_snapshot() {
    // 3.5 -> 3.6: the record is open, every member is listed; no matter.
    let mut obs = cluster_on(V35);
    obs.unsnapshotted = upgrading_to_3_7().unsnapshotted;
    obs.desired_version = V36;
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
    // Other restarts on 3.6 (a new template) neither.
    let mut restart = upgrading_to_3_7();
    restart.desired_version = V36;
    restart.pods[2].revision = Some("rev-0".to_owned());
    assert_eq!(next_step(&restart), begin(OperationKind::RestartMember, 2));
}

#[test]
fn no_member_joins_on_3_7_while_the_leader_s_log_may_hold_3_5_s_entries() {
    // Held for the leader's snapshot: a scale-up waits too (the learner
    // would be sent the leader's log since its snapshot).
    let mut obs = upgrading_to_3_7();
    obs.desired_size = 4;
    obs.unsnapshotted[0].ordinal = 0;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::SnapshotBefore37(obs.unsnapshotted[0]))
    );
    // Only a follower short of its snapshot: the learner may join.
    obs.unsnapshotted[0].ordinal = 2;
    assert_eq!(next_step(&obs), begin(OperationKind::AddLearner, 3));
}
