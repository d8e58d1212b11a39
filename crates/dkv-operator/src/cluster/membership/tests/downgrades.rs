//! Tests: downgrades by one minor version go through etcd's downgrade API
//! (validated, enabled, data rewritten) before the first member restarts on
//! the older version; then like an upgrade, one member at a time, the
//! leader last.

use super::*;

const V36: EtcdVersion = EtcdVersion::new(3, 6, 16);

/// Three healthy voters on 3.6 (pods and etcd alike); the spec asks for
/// 3.5; etcd's side of the downgrade is `gate`.
fn downgrading(gate: DowngradeGate) -> Observation {
    let mut obs = cluster_on(V36);
    obs.downgrade = gate;
    obs
}

#[test]
fn no_member_moves_down_before_etcd_lets_it() {
    assert_eq!(
        next_step(&downgrading(DowngradeGate::Validated)),
        Step::EnableDowngrade { target: V35 }
    );
    for gate in [DowngradeGate::Migrating, DowngradeGate::Unknown] {
        assert_eq!(
            next_step(&downgrading(gate)),
            Step::Wait(WaitReason::DowngradeMigrating)
        );
    }
    assert_eq!(
        next_step(&downgrading(DowngradeGate::Refused("too old".to_owned()))),
        Step::Wait(WaitReason::DowngradeRefused {
            message: "too old".to_owned()
        })
    );
    // Every member healthy first, as etcd's downgrade guide asks.
    let mut sick = downgrading(DowngradeGate::Validated);
    sick.members.as_mut().unwrap()[1].healthy = false;
    let waits = next_step(&sick);
    assert!(
        matches!(waits, Step::Wait(WaitReason::MemberUnhealthy { .. })),
        "{waits:?}"
    );
}

#[test]
fn once_open_members_move_down_followers_first_and_the_leader_last() {
    let mut obs = downgrading(DowngradeGate::Open);
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
    for i in [1, 2] {
        obs.members.as_mut().unwrap()[i].version = Some(V35);
        obs.pods[i].version = Some(V35);
    }
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 0));
}

#[test]
fn a_pinned_move_down_not_begun_waits_for_etcd_again() {
    // Pinned while open; then the downgrade was cancelled behind dkv's back
    // (or the operator restarted onto a cluster where it is not enabled).
    let mut obs = downgrading(DowngradeGate::Validated);
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    });
    assert_eq!(next_step(&obs), Step::EnableDowngrade { target: V35 });
    obs.downgrade = DowngradeGate::Open;
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
}

#[test]
fn a_downgrade_no_longer_asked_for_is_cancelled_first() {
    // Rolled back half way: members 1 and 2 run 3.5, the spec asks for 3.6
    // again; etcd still has the downgrade enabled.
    let mut obs = downgrading(DowngradeGate::Stale);
    obs.desired_version = V36;
    for i in [1, 2] {
        obs.members.as_mut().unwrap()[i].version = Some(V35);
        obs.pods[i].version = Some(V35);
    }
    assert_eq!(next_step(&obs), Step::CancelDowngrade);
    obs.downgrade = DowngradeGate::Open;
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
}
