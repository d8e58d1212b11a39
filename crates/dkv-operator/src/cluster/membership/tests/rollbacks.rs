//! Rollbacks (`spec.rollout.onFailure: Rollback`): once status records one,
//! the cluster is validated and built from the spec that last ran on every
//! member, so the planner sees the members on the new template as the ones
//! to restart — one at a time, the failed one first (its operation is the
//! one pinned), never while another member is down.

use super::*;

const V36: EtcdVersion = EtcdVersion::new(3, 6, 5);

/// A 3-member cluster rolled back to 3.5 (template `rev-1` again) while
/// an upgrade to 3.6 (`rev-2`) was under way: each member in `moved` was
/// restarted onto 3.6; the first of them, pinned, never served there.
fn rolled_back(moved: &[i32]) -> Observation {
    let mut obs = cluster(3, 3);
    for &ordinal in moved {
        let i = usize::try_from(ordinal).unwrap();
        obs.pods[i].version = Some(V36);
        obs.pods[i].revision = Some("rev-2".to_owned());
        obs.members.as_mut().unwrap()[i].version = Some(V36);
    }
    let failed = usize::try_from(moved[0]).unwrap();
    obs.pods[failed].ready = false;
    obs.members.as_mut().unwrap()[failed].healthy = false;
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: moved[0],
    });
    obs
}

/// Member `ordinal` back on 3.5 and `rev-1`, serving.
fn moved_back(obs: &mut Observation, ordinal: i32) {
    let i = usize::try_from(ordinal).unwrap();
    obs.pods[i] = pod(ordinal);
    obs.members.as_mut().unwrap()[i] = member(ordinal);
}

#[test]
fn the_failed_member_moves_back_first_then_each_member_the_rollout_reached() {
    // Member 2 upgraded and served; member 1 never did.
    let mut obs = rolled_back(&[1, 2]);
    let pinned = obs.pinned.unwrap();
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    moved_back(&mut obs, 1);
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    obs.pinned = None;
    // Then member 2, which runs what the cluster no longer asks for.
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    });
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    moved_back(&mut obs, 2);
    assert_eq!(
        next_step(&obs),
        Step::Finish(Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: 2
        })
    );
    obs.pinned = None;
    assert_eq!(next_step(&obs), Step::Converged);
}

#[test]
fn no_member_moves_back_while_another_is_down() {
    // The failed member may be down: the others keep quorum. Another one
    // down too, and restarting would leave one voter of three.
    let mut obs = rolled_back(&[2]);
    obs.members.as_mut().unwrap()[0].healthy = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 0 })
    );
    let mut obs = rolled_back(&[2]);
    obs.pods[1].ready = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 1 })
    );
    // The leader moves back last, its leadership handed over first.
    let mut obs = rolled_back(&[2, 1, 0]);
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 0,
    });
    obs.pods[2].ready = true;
    obs.members.as_mut().unwrap()[2].healthy = true;
    obs.pods[0].ready = true;
    obs.members.as_mut().unwrap()[0].healthy = true;
    assert!(matches!(
        next_step(&obs),
        Step::MoveLeader {
            from_ordinal: 0,
            ..
        }
    ));
}

#[test]
fn a_template_rollback_waits_for_the_old_revision_then_restarts_the_member_on_the_new_one() {
    // An edit of the pod template (no version change) rolled back: member
    // 2 runs `rev-2`, which crash-loops.
    let mut obs = cluster(3, 3);
    obs.pods[2].revision = Some("rev-2".to_owned());
    obs.pods[2].ready = false;
    obs.members.as_mut().unwrap()[2].healthy = false;
    let pinned = Pinned {
        kind: OperationKind::RestartMember,
        ordinal: 2,
    };
    obs.pinned = Some(pinned);
    // Until the StatefulSet's controller reports the template it now has
    // (the old one, whose revision it reuses), nothing restarts.
    obs.update_revision = None;
    assert_eq!(next_step(&obs), Step::Wait(WaitReason::TemplatePending));
    obs.update_revision = Some("rev-1".to_owned());
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    moved_back(&mut obs, 2);
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    obs.pinned = None;
    assert_eq!(next_step(&obs), Step::Converged);
}
