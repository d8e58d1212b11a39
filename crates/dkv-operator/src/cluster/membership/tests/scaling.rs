//! Tests: scaling up through a learner and down from the highest ordinal, and never below quorum.

use super::*;

#[test]
fn scale_up_adds_the_next_ordinal_as_a_learner_for_every_size() {
    for n in 1..9 {
        for desired in (n + 1)..=9 {
            assert_eq!(
                next_step(&cluster(n, desired)),
                begin(OperationKind::AddLearner, n),
                "{n} -> {desired}"
            );
        }
    }
}

#[test]
fn scale_down_removes_the_highest_ordinal_for_every_size() {
    for n in 2..=9 {
        for desired in 1..n {
            assert_eq!(
                next_step(&cluster(n, desired)),
                begin(OperationKind::RemoveMember, n - 1),
                "{n} -> {desired}"
            );
        }
    }
}

#[test]
fn any_unhealthy_member_blocks_every_disruptive_step() {
    for n in 1..=9 {
        for sick in 0..n {
            for desired in 1..=9 {
                let mut obs = cluster(n, desired);
                obs.members.as_mut().unwrap()[sick as usize].healthy = false;
                obs.pods[sick as usize].ready = false;
                assert_eq!(
                    next_step(&obs),
                    Step::Wait(WaitReason::MemberUnhealthy { ordinal: sick }),
                    "size {n}, member {sick} down, desired {desired}"
                );
            }
        }
    }
}

#[test]
fn a_pinned_removal_never_breaks_quorum() {
    // Exhaustive over sizes and sets of unhealthy members.
    for n in 2..=9 {
        for mask in 0u32..(1 << n) {
            let mut obs = cluster(n, n - 1);
            for i in 0..n {
                if mask & (1 << i) != 0 {
                    obs.members.as_mut().unwrap()[i as usize].healthy = false;
                }
            }
            obs.members
                .as_mut()
                .unwrap()
                .iter_mut()
                .for_each(|m| m.leader = false);
            if let Some(first_healthy) =
                obs.members.as_mut().unwrap().iter_mut().find(|m| m.healthy)
            {
                first_healthy.leader = true;
            }
            obs.pinned = Some(Pinned {
                kind: OperationKind::RemoveMember,
                ordinal: n - 1,
            });
            let healthy_after = (0..n - 1).filter(|i| mask & (1 << i) == 0).count();
            let needed = quorum(n - 1) as usize;
            let expected = if healthy_after >= needed {
                Step::RemoveMember {
                    id: 100 + (n - 1) as u64,
                    ordinal: n - 1,
                }
            } else {
                Step::Wait(WaitReason::WouldBreakQuorum {
                    healthy: healthy_after,
                    needed,
                })
            };
            assert_eq!(
                next_step(&obs),
                expected,
                "size {n}, unhealthy mask {mask:b}"
            );
        }
    }
}

#[test]
fn a_removal_is_refused_while_it_would_break_quorum() {
    // 5 members, two down (0 and 1), scale to 4: removing healthy 4
    // leaves 2 healthy of 4 voters — below quorum 3.
    let mut obs = cluster(5, 4);
    obs.pinned = Some(Pinned {
        kind: OperationKind::RemoveMember,
        ordinal: 4,
    });
    for i in [0, 1] {
        obs.members.as_mut().unwrap()[i].healthy = false;
        obs.members.as_mut().unwrap()[i].leader = false;
    }
    obs.members.as_mut().unwrap()[2].leader = true;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::WouldBreakQuorum {
            healthy: 2,
            needed: 3
        })
    );
}

#[test]
fn scale_up_walks_learner_pod_promotion_then_finishes() {
    let pinned = Pinned {
        kind: OperationKind::AddLearner,
        ordinal: 3,
    };
    let mut obs = cluster(3, 4);
    obs.pinned = Some(pinned);
    assert_eq!(
        next_step(&obs),
        Step::AddLearner { ordinal: 3 },
        "membership first"
    );

    let mut learner = member(3);
    learner.learner = true;
    learner.started = false;
    learner.healthy = false;
    learner.raft_index = 0;
    learner.leader = false;
    obs.members.as_mut().unwrap().push(learner.clone());
    assert_eq!(next_step(&obs), Step::SetReplicas(4), "then the pod");

    obs.replicas = 4;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 3 })
    );

    let m = obs.members.as_mut().unwrap().last_mut().unwrap();
    m.started = true;
    m.healthy = true;
    m.raft_index = 500;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::LearnerCatchingUp { ordinal: 3 })
    );

    obs.members.as_mut().unwrap().last_mut().unwrap().raft_index = 995;
    assert_eq!(
        next_step(&obs),
        Step::Promote {
            id: 103,
            ordinal: 3
        }
    );

    obs.members.as_mut().unwrap().last_mut().unwrap().learner = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 3 }),
        "promoted, but its pod does not serve yet"
    );
    obs.pods.push(pod(3));
    assert_eq!(next_step(&obs), Step::Finish(pinned));
}

#[test]
fn removing_the_leader_moves_leadership_first() {
    let mut obs = cluster(3, 2);
    obs.members.as_mut().unwrap()[0].leader = false;
    obs.members.as_mut().unwrap()[2].leader = true;
    obs.members.as_mut().unwrap()[1].raft_index = 1001;
    obs.pinned = Some(Pinned {
        kind: OperationKind::RemoveMember,
        ordinal: 2,
    });
    assert_eq!(
        next_step(&obs),
        Step::MoveLeader {
            from: 102,
            from_ordinal: 2,
            to: 101
        }
    );
    obs.members.as_mut().unwrap()[2].leader = false;
    obs.members.as_mut().unwrap()[1].leader = true;
    assert_eq!(
        next_step(&obs),
        Step::RemoveMember {
            id: 102,
            ordinal: 2
        }
    );
    obs.members.as_mut().unwrap().pop();
    assert_eq!(
        next_step(&obs),
        Step::SetReplicas(2),
        "membership first, then the pod"
    );
    obs.replicas = 2;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 2 })
    );
    obs.pods.pop();
    assert_eq!(
        next_step(&obs),
        Step::DeleteVolume { ordinal: 2 },
        "stale data never rejoins"
    );
}

#[test]
fn a_new_member_is_done_once_its_pod_serves_not_merely_once_promoted() {
    let mut obs = cluster(4, 4);
    let pinned = Pinned {
        kind: OperationKind::PromoteLearner,
        ordinal: 3,
    };
    obs.pinned = Some(pinned);
    // Promoted and healthy in etcd, but its pod is not Ready yet.
    obs.pods[3].ready = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 3 })
    );
    obs.pods[3].ready = true;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
}

#[test]
fn a_learner_whose_pod_refused_to_start_gets_its_pod_restarted() {
    let mut obs = cluster(1, 2);
    let mut learner = member(1);
    learner.learner = true;
    learner.started = false;
    learner.healthy = false;
    learner.leader = false;
    obs.members.as_mut().unwrap().push(learner);
    obs.pods.push(pod(1));
    obs.pods[1].init_refused = true;
    obs.pods[1].init_done = false;
    obs.pods[1].ready = false;
    obs.replicas = 2;
    obs.pinned = Some(Pinned {
        kind: OperationKind::AddLearner,
        ordinal: 1,
    });
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    obs.pods[1].init_refused = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 1 })
    );
}

#[test]
fn a_stray_learner_is_finished_before_anything_else() {
    let mut obs = cluster(3, 1);
    let mut learner = member(3);
    learner.learner = true;
    learner.leader = false;
    obs.members.as_mut().unwrap().push(learner);
    assert_eq!(next_step(&obs), begin(OperationKind::PromoteLearner, 3));
}
