//! Tests of the membership planner: fixtures for observed clusters, and the tests of each concern in the
//! submodules.

mod downgrades;
mod etcd37;
mod invariants;
mod lost_nodes;
mod recovery;
mod restarts;
mod rollbacks;
mod scaling;

use super::fixtures::{member, pod};
use super::*;

const V35: EtcdVersion = EtcdVersion::new(3, 5, 16);
const V34: EtcdVersion = EtcdVersion::new(3, 4, 23);

/// A learner just added as member `ordinal` with `id`: its process has not
/// started yet.
fn new_learner(ordinal: i32, id: u64) -> ObservedMember {
    ObservedMember {
        id,
        learner: true,
        started: false,
        healthy: false,
        leader: false,
        ..member(ordinal)
    }
}

fn cluster(size: i32, desired: i32) -> Observation {
    Observation {
        desired_size: desired,
        desired_version: V35,
        members: Some((0..size).map(member).collect()),
        pods: (0..size).map(pod).collect(),
        replicas: size,
        pinned: None,
        space_alarm: false,
        recovery_allowed: false,
        restore_allowed: false,
        desired_tls_serial: None,
        update_revision: Some("rev-1".to_owned()),
        settled_template: None,
        stranded: Vec::new(),
        terminating: Vec::new(),
        corrupt: Vec::new(),
        replace_corrupt: false,
        downgrade: DowngradeGate::Open,
        unsnapshotted: Vec::new(),
    }
}

/// Three healthy voters whose pods and etcd alike run `version`.
fn cluster_on(version: EtcdVersion) -> Observation {
    let mut obs = cluster(3, 3);
    for m in obs.members.as_mut().unwrap() {
        m.version = Some(version);
    }
    for p in &mut obs.pods {
        p.version = Some(version);
    }
    obs
}

fn begin(kind: OperationKind, ordinal: i32) -> Step {
    Step::Begin(Pinned { kind, ordinal })
}

/// Checks that replacing the member at `ordinal` begins next and pins that
/// operation in `obs`; returns the pin.
fn begin_replacing(obs: &mut Observation, ordinal: i32) -> Pinned {
    let pinned = Pinned {
        kind: OperationKind::ReplaceMember,
        ordinal,
    };
    assert_eq!(next_step(obs), Step::Begin(pinned));
    obs.pinned = Some(pinned);
    pinned
}

/// Checks that the member at `ordinal` (etcd id `old_id`) is removed next
/// and then a learner added in its place, applying both to `obs` (the new
/// learner gets `new_id`): how a lost or corrupt member is replaced.
fn remove_then_add_learner(obs: &mut Observation, ordinal: i32, old_id: u64, new_id: u64) {
    assert_eq!(
        next_step(obs),
        Step::RemoveMember {
            id: old_id,
            ordinal
        }
    );
    let index = usize::try_from(ordinal).unwrap();
    obs.members.as_mut().unwrap().remove(index);
    assert_eq!(next_step(obs), Step::AddLearner { ordinal });
    obs.members
        .as_mut()
        .unwrap()
        .insert(index, new_learner(ordinal, new_id));
}

/// Pins the scale-up to a fourth member at its learner step and checks
/// that the learner, member 3 (etcd id 103), is promoted next.
fn assert_pinned_scale_up_promotes_member_3(obs: &mut Observation) {
    obs.pinned = Some(Pinned {
        kind: OperationKind::AddLearner,
        ordinal: 3,
    });
    assert_eq!(
        next_step(obs),
        Step::Promote {
            id: 103,
            ordinal: 3
        }
    );
}

/// Marks the learner at `ordinal` (etcd id `id`) started and healthy,
/// checks that it is promoted next, and makes it a voter in `obs`.
fn promote_started_learner(obs: &mut Observation, ordinal: i32, id: u64) {
    let index = usize::try_from(ordinal).unwrap();
    let m = &mut obs.members.as_mut().unwrap()[index];
    m.started = true;
    m.healthy = true;
    assert_eq!(next_step(obs), Step::Promote { id, ordinal });
    obs.members.as_mut().unwrap()[index].learner = false;
}

#[test]
fn converged_clusters_of_every_size_do_nothing() {
    for n in 1..=9 {
        assert_eq!(next_step(&cluster(n, n)), Step::Converged, "size {n}");
    }
}

#[test]
fn an_unreachable_cluster_gets_no_step() {
    let mut obs = cluster(3, 5);
    obs.members = None;
    assert_eq!(next_step(&obs), Step::Wait(WaitReason::EtcdUnreachable));
    obs.pinned = Some(Pinned {
        kind: OperationKind::AddLearner,
        ordinal: 3,
    });
    assert_eq!(next_step(&obs), Step::Wait(WaitReason::EtcdUnreachable));
}

#[test]
fn a_hand_edited_statefulset_is_realigned_to_membership() {
    let mut obs = cluster(3, 3);
    obs.replicas = 1;
    assert_eq!(next_step(&obs), Step::SetReplicas(3));
}

#[test]
fn a_full_backend_is_reclaimed_before_anything_else() {
    let mut obs = cluster(3, 5);
    obs.space_alarm = true;
    assert_eq!(next_step(&obs), Step::ReclaimSpace);
    obs.members = None;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::EtcdUnreachable),
        "not without quorum"
    );
}

#[test]
fn quorum_is_a_strict_majority() {
    let table = [
        (1, 1),
        (2, 2),
        (3, 2),
        (4, 3),
        (5, 3),
        (6, 4),
        (7, 4),
        (8, 5),
        (9, 5),
    ];
    for (voters, expected) in table {
        assert_eq!(quorum(voters), expected, "quorum of {voters}");
    }
}

#[test]
fn a_spec_edit_during_an_operation_waits_for_it() {
    // Scale-up 3 -> 5 in flight at its learner step; the spec now asks
    // for 3 again. The pinned step is finished first.
    let mut obs = cluster(3, 3);
    let mut learner = member(3);
    learner.learner = true;
    learner.leader = false;
    learner.raft_index = 1000;
    obs.members.as_mut().unwrap().push(learner);
    obs.replicas = 4;
    assert_pinned_scale_up_promotes_member_3(&mut obs);
}
