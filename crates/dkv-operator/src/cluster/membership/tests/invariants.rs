//! Tests: no step breaks the planner's rules, for any mix of member states.

use super::*;

/// Every cluster of 1..=9 members where each member is a healthy voter,
/// an unhealthy voter, a healthy learner or an unhealthy learner, for
/// every desired size, fresh and with each kind of operation pinned on
/// every ordinal: no step the planner chooses may break quorum, start a
/// second operation, remove or restart a leader, promote a learner that
/// has not caught up, or change etcd's downgrade while a member is unwell.
#[test]
fn no_step_breaks_the_rules_for_any_mix_of_member_states() {
    const KINDS: [OperationKind; 6] = [
        OperationKind::AddLearner,
        OperationKind::PromoteLearner,
        OperationKind::RemoveMember,
        OperationKind::UpgradeMember,
        OperationKind::ReplaceMember,
        OperationKind::RelocateMember,
    ];
    const PLACEMENTS: [DataPlacement; 3] = [
        DataPlacement::NodeBound,
        DataPlacement::FollowsPod,
        DataPlacement::Ephemeral,
    ];
    let mut checked = 0u64;
    for n in 1..=9i32 {
        for mix in 0..4u32.pow(n as u32) {
            let mut obs = cluster(n, n);
            let members = obs.members.as_mut().unwrap();
            let mut code = mix;
            for m in members.iter_mut() {
                let state = code % 4;
                code /= 4;
                m.learner = state >= 2;
                m.healthy = state % 2 == 0;
                m.leader = false;
                if m.learner {
                    m.raft_index = 500;
                }
            }
            if let Some(leader) = members.iter_mut().find(|m| !m.learner && m.healthy) {
                leader.leader = true;
            }
            for (pod, m) in obs.pods.iter_mut().zip(members.iter()) {
                pod.ready = m.healthy;
            }
            // Every third mix: a downgrade from 3.6, at one of etcd's steps.
            if mix % 3 == 2 {
                for m in members.iter_mut() {
                    m.version = Some(EtcdVersion::new(3, 6, 16));
                }
                obs.downgrade = [DowngradeGate::Validated, DowngradeGate::Stale]
                    [(mix / 3 % 2) as usize]
                    .clone();
            }
            // Every other mix: the unwell members are on lost nodes, due
            // for replacement, their data placed each way in turn.
            if mix % 2 == 1 {
                let data = PLACEMENTS[(mix / 2 % 3) as usize];
                obs.stranded = members
                    .iter()
                    .filter(|m| !m.healthy)
                    .map(|m| Stranded {
                        ordinal: m.ordinal,
                        replace: true,
                        data,
                        pod_uid: Some(format!("pod-{}", m.ordinal)),
                        claim_uid: Some(format!("claim-{}", m.ordinal)),
                    })
                    .collect();
            }
            // Sampling the desired sizes and pins keeps the run short;
            // every mix still meets every desired size and pin kind
            // across the ordinals.
            for desired in [1, n.max(2) - 1, n, (n + 1).min(9), 9] {
                obs.desired_size = desired;
                obs.pinned = None;
                check_rules(&obs, next_step(&obs));
                checked += 1;
            }
            obs.desired_size = n;
            for kind in KINDS {
                for ordinal in 0..n {
                    obs.pinned = Some(Pinned { kind, ordinal });
                    check_rules(&obs, next_step(&obs));
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1_000_000, "{checked} observations checked");
}

fn check_rules(obs: &Observation, step: Step) {
    let members = obs.members.as_deref().unwrap_or_default();
    let voters: Vec<&ObservedMember> = members.iter().filter(|m| !m.learner).collect();
    let healthy_voters = |except: u64| {
        voters
            .iter()
            .filter(|m| m.healthy && m.id != except)
            .count()
    };
    let quorum_of = |n: usize| n / 2 + 1;
    let context = || format!("{step:?} for {obs:?}");
    match &step {
        Step::Begin(p) => {
            assert!(obs.pinned.is_none(), "a second operation: {}", context());
            let replacing_lost_volume = p.kind == OperationKind::ReplaceMember;
            if p.kind == OperationKind::RelocateMember {
                let target = members.iter().find(|m| m.ordinal == p.ordinal);
                assert!(
                    target.is_some_and(|m| !m.healthy)
                        && obs
                            .stranded
                            .iter()
                            .any(|s| s.ordinal == p.ordinal && s.replace),
                    "relocating a member that serves or is not due: {}",
                    context()
                );
            } else if !replacing_lost_volume {
                assert!(
                    members.iter().all(|m| m.healthy),
                    "an operation began while a member is unwell: {}",
                    context()
                );
            }
        }
        Step::RemoveMember { id, .. } => {
            let m = members.iter().find(|m| m.id == *id).unwrap();
            assert!(!m.leader, "removing the leader: {}", context());
            if !m.learner && voters.len() > 1 {
                assert!(
                    healthy_voters(*id) >= quorum_of(voters.len() - 1),
                    "removal breaks quorum: {}",
                    context()
                );
            }
        }
        Step::RestartPod { ordinal } => {
            if let Some(m) = members.iter().find(|m| m.ordinal == *ordinal) {
                assert!(!m.leader, "restarting the leader: {}", context());
                if !m.learner && voters.len() > 1 {
                    assert!(
                        healthy_voters(m.id) >= quorum_of(voters.len()),
                        "restart breaks quorum: {}",
                        context()
                    );
                }
            }
        }
        Step::EvictFromLostNode {
            ordinal, claim_uid, ..
        } => {
            assert!(
                obs.pinned.is_some_and(
                    |p| p.kind == OperationKind::RelocateMember && p.ordinal == *ordinal
                ),
                "a pod evicted outside its relocation: {}",
                context()
            );
            let stranded = obs.stranded.iter().find(|s| s.ordinal == *ordinal);
            let Some(stranded) = stranded else {
                panic!("evicting a pod not on a lost node: {}", context());
            };
            if let Some(m) = members.iter().find(|m| m.ordinal == *ordinal) {
                assert!(
                    !m.healthy && stranded.data == DataPlacement::FollowsPod,
                    "a member's pod went while it serves or before its node-bound data left etcd: {}",
                    context()
                );
            }
            assert_eq!(
                claim_uid.is_some(),
                stranded.data == DataPlacement::NodeBound,
                "a claim deleted that was not bound to the node, or kept that was: {}",
                context()
            );
        }
        Step::EnableDowngrade { .. } | Step::CancelDowngrade => {
            assert!(
                members.iter().all(|m| m.healthy),
                "etcd's downgrade changed while a member is unwell: {}",
                context()
            );
        }
        Step::MoveLeader { from, to, .. } => {
            let from = members.iter().find(|m| m.id == *from).unwrap();
            let to = members.iter().find(|m| m.id == *to).unwrap();
            assert!(
                from.leader,
                "moving leadership from a follower: {}",
                context()
            );
            assert!(
                to.healthy && !to.learner,
                "leadership to an unwell member or a learner: {}",
                context()
            );
        }
        Step::Promote { id, .. } => {
            let m = members.iter().find(|m| m.id == *id).unwrap();
            let leader_index = members
                .iter()
                .find(|m| m.leader)
                .map_or(0, |l| l.raft_index);
            assert!(m.learner && caught_up(m, leader_index), "{}", context());
        }
        Step::AddLearner { .. } => {
            assert!(
                obs.pinned.is_some(),
                "membership change without a pin: {}",
                context()
            );
            assert!(
                members.iter().filter(|m| m.learner).count() == 0,
                "a second learner: {}",
                context()
            );
        }
        Step::Finish(_)
        | Step::SetReplicas(_)
        | Step::DeleteVolume { .. }
        | Step::ReclaimSpace
        | Step::Wait(_)
        | Step::Converged => {}
    }
}
