//! With an operation pinned: its next step, until it is verified complete (then `Finish`), whatever the spec says
//! meanwhile.

use dkv_api::distributedkv::v1beta1::OperationKind;

use super::{DataPlacement, Observation, ObservedMember, Pinned, Step, WaitReason, caught_up};

/// The pinned operation's next step.
pub(super) fn continue_operation(obs: &Observation, pinned: Pinned) -> Step {
    if pinned.kind == OperationKind::RestoreFromBackup {
        return continue_restore(obs, pinned);
    }
    let Some(_) = &obs.members else {
        return Step::Wait(WaitReason::EtcdUnreachable);
    };
    let member = obs.member(pinned.ordinal);
    match pinned.kind {
        OperationKind::AddLearner | OperationKind::PromoteLearner => {
            continue_learner(obs, pinned, member)
        }
        OperationKind::RelocateMember => continue_relocation(obs, pinned, member),
        OperationKind::RemoveMember => continue_removal(obs, pinned, member),
        OperationKind::UpgradeMember
        | OperationKind::RenewCertificate
        | OperationKind::RestartMember => continue_restart(obs, pinned, member),
        OperationKind::RecoverQuorum => continue_recovery(obs, pinned, member),
        // Handled before etcd's view is required (see the top).
        OperationKind::RestoreFromBackup => continue_restore(obs, pinned),
        OperationKind::ReplaceMember => continue_replacement(obs, pinned, member),
    }
}

/// A scale-down: leadership moved off the member, the member removed, its
/// pod and then its volume deleted.
fn continue_removal(obs: &Observation, pinned: Pinned, member: Option<&ObservedMember>) -> Step {
    let ordinal = pinned.ordinal;
    match member {
        // The last voter is never removed, whatever the pin says (it can
        // only say so if someone wrote it into status by hand).
        Some(m) if !m.learner && obs.voters().len() == 1 => Step::Finish(pinned),
        Some(m) => match obs.safe_to_lose(m.id, true) {
            Err(reason) => Step::Wait(reason),
            Ok(()) => leadership_off_then_remove(obs, m, ordinal),
        },
        None if obs.replicas > ordinal => Step::SetReplicas(ordinal),
        None if obs.pod(ordinal).is_some() => Step::Wait(WaitReason::PodNotReady { ordinal }),
        None => Step::DeleteVolume { ordinal },
    }
}

/// A restart onto the current template: a new image (upgrade), a reissued
/// certificate, or any other template change. The member must be back in
/// service (healthy, Ready, caught up) before the operation ends and the
/// next member may go.
fn continue_restart(obs: &Observation, pinned: Pinned, member: Option<&ObservedMember>) -> Step {
    let ordinal = pinned.ordinal;
    let m = match member {
        None => return Step::Finish(pinned),
        // Its own node is lost and it is due to be relocated: the
        // relocation re-creates its pod (on the current template) anyway.
        Some(m) if obs.relocation_due(m.ordinal) => return Step::Finish(pinned),
        Some(m) => m,
    };
    let restarted = match restarted(obs, pinned) {
        Ok(restarted) => restarted,
        Err(wait) => return Step::Wait(wait),
    };
    if restarted {
        let done = obs.back_in_service(m)
            && (pinned.kind == OperationKind::RestartMember || obs.runs_desired_version(m));
        return if done {
            Step::Finish(pinned)
        } else if pinned.kind == OperationKind::UpgradeMember {
            Step::Wait(WaitReason::UpgradeInProgress { ordinal })
        } else {
            Step::Wait(WaitReason::RestartInProgress { ordinal })
        };
    }
    // Every member healthy before a restart; the restarted one may be down
    // only while all others serve: healthy in etcd, and Ready (the client
    // Service routes to them).
    if let Some(sick) = obs
        .voters()
        .into_iter()
        .find(|v| !v.healthy && v.id != m.id)
    {
        // Its node is lost and due to be replaced: this restart (not
        // begun; it would only wait for the node) yields, and is begun
        // again once the member is relocated.
        if obs.relocation_due(sick.ordinal) {
            return Step::Finish(pinned);
        }
        return Step::Wait(WaitReason::MemberUnhealthy {
            ordinal: sick.ordinal,
        });
    }
    if let Some(unready) = obs
        .voters()
        .into_iter()
        .find(|v| v.id != m.id && obs.pod(v.ordinal).is_some_and(|p| !p.ready))
    {
        return Step::Wait(WaitReason::PodNotReady {
            ordinal: unready.ordinal,
        });
    }
    // A move down a minor line still needs etcd's downgrade (the spec or
    // etcd may have changed since the pin).
    if pinned.kind == OperationKind::UpgradeMember
        && let Some(step) = obs.downgrade_step(m)
    {
        return if m.healthy {
            step
        } else {
            Step::Wait(WaitReason::MemberUnhealthy { ordinal })
        };
    }
    match obs.safe_to_lose(m.id, false) {
        Err(reason) => Step::Wait(reason),
        Ok(()) => match (m.leader, obs.healthy_follower(m.id)) {
            (true, Some(to)) => Step::MoveLeader {
                from: m.id,
                from_ordinal: m.ordinal,
                to: to.id,
            },
            _ => Step::RestartPod { ordinal },
        },
    }
}

/// Whether the pinned member's pod has restarted onto what the restart is
/// for, or what to wait for before that can be told.
fn restarted(obs: &Observation, pinned: Pinned) -> Result<bool, WaitReason> {
    let ordinal = pinned.ordinal;
    if pinned.kind == OperationKind::RestartMember {
        if obs.update_revision.is_none() {
            // The template changed again: wait for its revision before
            // deciding anything.
            return Err(WaitReason::TemplatePending);
        }
        return Ok(obs.on_current_template(ordinal));
    }
    // The pod runs the new image and certificate. An image whose tag names
    // no version (a digest, `spec.version` saying what it holds) is judged
    // by the template the pod was created from: a pod still on an image the
    // spec no longer names (set back after it failed) is restarted, not
    // waited for.
    let untagged = obs.pod(ordinal).is_some_and(|p| p.version.is_none());
    if untagged && obs.update_revision.is_none() {
        // The template changed again: wait for its revision before
        // deciding anything.
        return Err(WaitReason::TemplatePending);
    }
    Ok(obs.has_current_certificate(ordinal)
        && obs.pod(ordinal).is_some_and(|p| match p.version {
            Some(v) => v == obs.desired_version,
            None => obs.on_current_template(ordinal),
        }))
}

/// A quorum recovery from one survivor: restarted alone with
/// `--force-new-cluster`, then once more without it; done once it serves.
fn continue_recovery(obs: &Observation, pinned: Pinned, member: Option<&ObservedMember>) -> Step {
    let ordinal = pinned.ordinal;
    let Some(m) = member else {
        return Step::Wait(WaitReason::RecoveryInProgress { ordinal });
    };
    let Some(pod) = obs.pod(ordinal).filter(|p| p.init_done) else {
        // The survivor's pod is (re)starting.
        return Step::Wait(WaitReason::RecoveryInProgress { ordinal });
    };
    let others = obs.voters().iter().filter(|v| v.id != m.id).count();
    if others > 0 {
        // 1. Restart the survivor so that it starts alone...
        if pod.forced_new_cluster {
            Step::Wait(WaitReason::RecoveryInProgress { ordinal })
        } else {
            Step::RestartPod { ordinal }
        }
    } else if pod.forced_new_cluster {
        // 2. ...then once more without the flag: if etcd restarted
        //    with it after members rejoined, it would drop them again.
        Step::RestartPod { ordinal }
    } else if m.healthy {
        Step::Finish(pinned)
    } else {
        Step::Wait(WaitReason::RecoveryInProgress { ordinal })
    }
}

/// A member replaced from its peers (its data lost, or corrupt): removed,
/// re-added as a learner, its pod restarted, caught up and promoted.
fn continue_replacement(
    obs: &Observation,
    pinned: Pinned,
    member: Option<&ObservedMember>,
) -> Step {
    let ordinal = pinned.ordinal;
    let leader_index = obs.leader().map_or(0, |l| l.raft_index);
    let lost = obs.pod(ordinal).is_some_and(|p| p.data_lost);
    let corrupt = obs.corrupt.contains(&ordinal);
    // The pod still runs what it ran before the member was re-added: its
    // member-init has run, but not for this replacement.
    let stale_pod = obs
        .pod(ordinal)
        .is_some_and(|p| (p.init_done || p.init_refused) && !p.replaced);
    match member {
        // The stale member (its data is gone, or differs from its peers')
        // is removed first...
        Some(m) if m.started && !m.learner && corrupt => match obs.safe_to_replace_corrupt(m.id) {
            Err(reason) => Step::Wait(reason),
            Ok(()) => leadership_off_then_remove(obs, m, ordinal),
        },
        Some(m) if m.started && !m.learner && lost => match obs.safe_to_lose(m.id, true) {
            Ok(()) => Step::RemoveMember { id: m.id, ordinal },
            Err(reason) => Step::Wait(reason),
        },
        // ...then re-added as a learner, and the pod restarts: empty, or
        // with its old data set aside by member-init.
        None => Step::AddLearner { ordinal },
        Some(m) if m.learner && !m.started && (lost || stale_pod) => Step::RestartPod { ordinal },
        Some(m) if m.learner => {
            if caught_up(m, leader_index) {
                Step::Promote { id: m.id, ordinal }
            } else {
                Step::Wait(WaitReason::LearnerCatchingUp { ordinal })
            }
        }
        Some(m) if m.healthy && !lost => Step::Finish(pinned),
        Some(_) => Step::Wait(WaitReason::MemberUnhealthy { ordinal }),
    }
}

/// A learner being added (scale-up, or a relocated member joining again):
/// added, its pod started, caught up, promoted, then done once it serves.
fn continue_learner(obs: &Observation, pinned: Pinned, member: Option<&ObservedMember>) -> Step {
    let ordinal = pinned.ordinal;
    let leader_index = obs.leader().map_or(0, |l| l.raft_index);
    match member {
        // Crashed between pinning and adding: add now (idempotent: the
        // member is looked up by ordinal first).
        None => Step::AddLearner { ordinal },
        // Its own node is lost and it is due to be relocated: waiting would
        // last as long as the node is gone; the relocation takes it out of
        // etcd and adds it again from another node.
        Some(m) if !m.healthy && obs.relocation_due(ordinal) => Step::Finish(pinned),
        Some(m) if m.learner => {
            if obs.replicas <= ordinal {
                Step::SetReplicas(ordinal + 1)
            } else if !m.started && obs.pod(ordinal).is_some_and(|p| p.init_refused) {
                // Its pod refused to start before the member was added
                // (e.g. a member re-added after a quorum recovery): a
                // restart makes it read the record now, not after its
                // backoff.
                Step::RestartPod { ordinal }
            } else if caught_up(m, leader_index) {
                Step::Promote { id: m.id, ordinal }
            } else if obs.pod(ordinal).is_none_or(|p| !p.ready) && !m.started {
                Step::Wait(WaitReason::PodNotReady { ordinal })
            } else {
                Step::Wait(WaitReason::LearnerCatchingUp { ordinal })
            }
        }
        // Promoted: done once it serves clients too (a learner's pod
        // turns Ready only after its promotion).
        Some(m) if m.healthy && obs.pod(ordinal).is_some_and(|p| p.ready) => Step::Finish(pinned),
        Some(m) if m.healthy => Step::Wait(WaitReason::PodNotReady { ordinal }),
        Some(_) => Step::Wait(WaitReason::MemberUnhealthy { ordinal }),
    }
}

/// `RelocateMember`: while the target's old pod is still there (bound to the
/// lost node, or back on it; see [`super::Stranded`]), it is moved off — membership first: a member
/// whose data stays with the node leaves etcd before its pod and claim go,
/// so that data can never rejoin; one whose volume follows its pod keeps
/// its place and its data. Then a member that left joins again as a learner.
fn continue_relocation(obs: &Observation, pinned: Pinned, member: Option<&ObservedMember>) -> Step {
    let ordinal = pinned.ordinal;
    let Some(stranded) = obs.stranded(ordinal) else {
        return continue_learner(obs, pinned, member);
    };
    match member {
        // Its node came back and it serves again: nothing left to move.
        Some(m) if m.healthy => Step::Finish(pinned),
        // An unhealthy member is no leader: there is no leadership to move.
        Some(m) if stranded.data != DataPlacement::FollowsPod => {
            match obs.safe_to_lose(m.id, true) {
                Ok(()) => Step::RemoveMember { id: m.id, ordinal },
                Err(reason) => Step::Wait(reason),
            }
        }
        _ => Step::EvictFromLostNode {
            ordinal,
            pod_uid: stranded.pod_uid.clone(),
            claim_uid: stranded
                .claim_uid
                .clone()
                .filter(|_| stranded.data == DataPlacement::NodeBound),
        },
    }
}

/// `RestoreFromBackup`: every member pod restarts once onto the restore
/// template (its old data is set aside by `member-init`, the backup becomes
/// its data); the operation is done when all members of the new cluster
/// serve. Quorum is already lost, so no restart here can cost any.
fn continue_restore(obs: &Observation, pinned: Pinned) -> Step {
    // A pod that ran member-init before this restore (or whose member-init
    // refuses) restarts; one still initialising is left to finish.
    if let Some(stale) = obs
        .pods
        .iter()
        .filter(|p| p.ordinal < obs.desired_size)
        .find(|p| !p.restored && (p.init_done || p.init_refused))
    {
        return Step::RestartPod {
            ordinal: stale.ordinal,
        };
    }
    let restored = |ordinal: i32| obs.pod(ordinal).is_some_and(|p| p.restored);
    let serving = obs.members.as_ref().is_some_and(|members| {
        members.len() == usize::try_from(obs.desired_size).unwrap_or(0)
            && members
                .iter()
                .all(|m| m.started && m.healthy && !m.learner && restored(m.ordinal))
    });
    if serving {
        Step::Finish(pinned)
    } else {
        Step::Wait(WaitReason::RestoreInProgress)
    }
}

/// Removing member `m` (pod `ordinal`): its leadership moved to a healthy
/// follower first, when it leads and there is one.
fn leadership_off_then_remove(obs: &Observation, m: &ObservedMember, ordinal: i32) -> Step {
    match (m.leader, obs.healthy_follower(m.id)) {
        (true, Some(to)) => Step::MoveLeader {
            from: m.id,
            from_ordinal: m.ordinal,
            to: to.id,
        },
        _ => Step::RemoveMember { id: m.id, ordinal },
    }
}
