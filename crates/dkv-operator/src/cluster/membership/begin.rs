//! With no operation pinned: which operation to begin, in order of precedence (restore, quorum recovery, space
//! reclaim, member replacement (lost data, corrupt data, then lost nodes), learners, scaling, upgrades, certificate and template restarts), or why to wait.

use dkv_api::distributedkv::v1beta1::OperationKind;

use super::{DowngradeGate, Observation, ObservedMember, Pinned, Step, WaitReason, quorum_lost};

/// The next step with no operation pinned: an operation to begin (in order of precedence), an alignment of the
/// StatefulSet, a reason to wait, or convergence.
pub(super) fn unpinned_step(obs: &Observation) -> Step {
    // Quorum lost for good and the policy says to restore: etcd need not
    // answer at all (every member may be gone).
    if obs.restore_allowed && obs.desired_size >= 1 {
        return Step::Begin(Pinned {
            kind: OperationKind::RestoreFromBackup,
            ordinal: 0,
        });
    }
    if obs.desired_size < 1 {
        return Step::Wait(WaitReason::NoMembersRequested);
    }
    let Some(members) = &obs.members else {
        return Step::Wait(WaitReason::EtcdUnreachable);
    };
    service_step(obs)
        .or_else(|| replacement_step(obs))
        .or_else(|| membership_step(obs, members))
        .or_else(|| restart_step(obs))
        .unwrap_or_else(|| alignment_step(obs))
}

/// What must come before any membership change: a quorum recovery (or a
/// wait when the policy does not allow one), freeing a full backend.
fn service_step(obs: &Observation) -> Option<Step> {
    // Quorum lost: no leader, and too few voters answer for one to be
    // elected. Nothing can change membership; a recovery policy may force
    // a new cluster from the most up-to-date survivor.
    if let Some(lost) = quorum_lost(obs) {
        return Some(match (obs.recovery_allowed, obs.survivor()) {
            (true, Some(survivor)) => Step::Begin(Pinned {
                kind: OperationKind::RecoverQuorum,
                ordinal: survivor.ordinal,
            }),
            _ => Step::Wait(lost),
        });
    }
    // A full backend refuses every write: restoring service comes before
    // any membership change (which would itself need writes to succeed).
    obs.space_alarm.then_some(Step::ReclaimSpace)
}

/// Replacing a member that cannot come back by itself: lost data, corrupt
/// data, then a lost node.
fn replacement_step(obs: &Observation) -> Option<Step> {
    let begin_or_wait = |kind, ordinal, safe: Result<(), WaitReason>| match safe {
        Ok(()) => Step::Begin(Pinned { kind, ordinal }),
        Err(reason) => Step::Wait(reason),
    };
    // A member whose volume was lost is replaced first — it cannot recover by
    // itself — provided the others keep quorum meanwhile.
    if let Some(lost) = obs.pods.iter().find(|p| p.data_lost)
        && let Some(member) = obs.member(lost.ordinal)
    {
        return Some(begin_or_wait(
            OperationKind::ReplaceMember,
            lost.ordinal,
            obs.safe_to_lose(member.id, true),
        ));
    }

    // A member whose data differs from its peers', once
    // `spec.recovery.corruptMember` says to replace it: from the others,
    // only while they agree and keep quorum without it.
    if obs.replace_corrupt
        && let Some(member) = obs
            .corrupt
            .iter()
            .filter_map(|ordinal| obs.member(*ordinal))
            .filter(|m| !m.learner)
            .min_by_key(|m| m.ordinal)
    {
        return Some(begin_or_wait(
            OperationKind::ReplaceMember,
            member.ordinal,
            obs.safe_to_replace_corrupt(member.id),
        ));
    }

    // A member on a lost node, once `spec.recovery.lostNode` says to
    // replace it: never while it still serves (its node may only be
    // flapping), and only while the others keep quorum without it.
    let stranded = obs.stranded.iter().find(|s| s.replace)?;
    let member = obs.member(stranded.ordinal).filter(|m| !m.healthy)?;
    let removed = stranded.data != super::DataPlacement::FollowsPod;
    Some(begin_or_wait(
        OperationKind::RelocateMember,
        stranded.ordinal,
        obs.safe_to_lose(member.id, removed),
    ))
}

/// Membership towards `spec.size`: wait for an unwell member, finish a
/// learner, add one member or remove one.
fn membership_step(obs: &Observation, members: &[ObservedMember]) -> Option<Step> {
    // No disruptive step while any member is unwell: it may be a pod
    // restarting, and it must come back, not be scaled away.
    if let Some(sick) = members
        .iter()
        .filter(|m| !m.healthy)
        .min_by_key(|m| m.ordinal)
    {
        return Some(Step::Wait(WaitReason::MemberUnhealthy {
            ordinal: sick.ordinal,
        }));
    }
    // A learner left behind (e.g. a scale-up whose pin was lost) is finished
    // before anything else.
    if let Some(learner) = members.iter().find(|m| m.learner) {
        return Some(Step::Begin(Pinned {
            kind: OperationKind::PromoteLearner,
            ordinal: learner.ordinal,
        }));
    }

    let voters = i32::try_from(obs.voters().len()).unwrap_or(i32::MAX);
    if voters < obs.desired_size {
        // The lowest free ordinal: after a quorum recovery from a survivor
        // other than member 0, the members below it are re-added.
        let ordinal = (0..).find(|o| obs.member(*o).is_none()).unwrap_or(voters);
        // A new member on 3.7 would be sent the leader's log since its
        // newest snapshot: not while that may hold an entry 3.5 wrote.
        if let Some(reason) = obs.leader().and_then(|l| obs.snapshot_wait(l)) {
            return Some(Step::Wait(reason));
        }
        return Some(Step::Begin(Pinned {
            kind: OperationKind::AddLearner,
            ordinal,
        }));
    }
    if voters > obs.desired_size {
        let highest = voters - 1;
        return Some(match obs.member(highest) {
            Some(member) => match obs.safe_to_lose(member.id, true) {
                Ok(()) => Step::Begin(Pinned {
                    kind: OperationKind::RemoveMember,
                    ordinal: highest,
                }),
                Err(reason) => Step::Wait(reason),
            },
            None => Step::Converged,
        });
    }
    None
}

/// Restarting members one at a time onto what the spec asks for: a
/// downgrade's cancellation first, then the version, certificates, and any
/// other change to the pod template. Followers first (highest ordinal
/// first), the leader last.
fn restart_step(obs: &Observation) -> Option<Step> {
    // A downgrade enabled in etcd that the spec no longer asks for (undone,
    // or rolled back): cancelled before members move back up, so that the
    // cluster version follows them.
    if obs.downgrade == DowngradeGate::Stale {
        return Some(Step::CancelDowngrade);
    }
    let next = |needs_restart: &dyn Fn(&ObservedMember) -> bool| {
        obs.voters()
            .into_iter()
            .filter(|m| needs_restart(m))
            .min_by_key(|m| (m.leader, -m.ordinal))
    };

    // Upgrade (or downgrade). A member moving down a minor line waits for
    // etcd's downgrade to let it.
    if let Some(next) = next(&|m| !obs.runs_desired_version(m)) {
        if let Some(step) = obs.downgrade_step(next) {
            return Some(step);
        }
        if let Some(reason) = obs.snapshot_wait(next) {
            return Some(Step::Wait(reason));
        }
        return Some(Step::Begin(Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: next.ordinal,
        }));
    }

    // Certificate renewal: the same order and the same one-restart-at-a-time
    // rule as an upgrade.
    if let Some(next) = next(&|m| !obs.has_current_certificate(m.ordinal)) {
        return Some(Step::Begin(Pinned {
            kind: OperationKind::RenewCertificate,
            ordinal: next.ordinal,
        }));
    }

    // Any other change to the members' pod template (resources, pod
    // overrides, etcd flags, `dkv.io/restartedAt`): the same order, the same
    // rule. The target revision is the StatefulSet's, as its controller
    // reports it; until it does, nothing is restarted.
    obs.update_revision.as_ref()?;
    let next = next(&|m| obs.pod(m.ordinal).is_some() && !obs.on_current_template(m.ordinal))?;
    Some(Step::Begin(Pinned {
        kind: OperationKind::RestartMember,
        ordinal: next.ordinal,
    }))
}

/// Membership is right; the StatefulSet's replicas are aligned with it
/// (someone edited them, or a previous pass stopped between the two), or
/// the cluster has converged.
fn alignment_step(obs: &Observation) -> Step {
    let pods_needed = obs
        .voters()
        .iter()
        .map(|m| m.ordinal + 1)
        .max()
        .unwrap_or(0);
    if obs.replicas != pods_needed {
        Step::SetReplicas(pods_needed)
    } else {
        Step::Converged
    }
}
