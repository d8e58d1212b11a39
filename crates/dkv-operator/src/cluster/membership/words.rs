//! The words users read for what the planner does: an operation in flight,
//! the step it is at, the reason it waits. Condition messages, Events and
//! `kubectl dkv` show these sentences, never a Rust rendering of the types.

use super::{Step, WaitReason};
use crate::parts::naming;

/// The step the planner takes next, as a phrase ("promote learner
/// orders-3"), or the reason it waits; `None` for the steps that only pin or
/// clear an operation, and for a converged cluster.
pub fn step(cluster: &str, step: &Step) -> Option<String> {
    let member = |ordinal: &i32| naming::member(cluster, *ordinal);
    Some(match step {
        Step::Begin(_) | Step::Finish(_) | Step::Converged => return None,
        Step::Wait(reason) => format!("waiting: {}", wait(cluster, reason)),
        Step::AddLearner { ordinal } => {
            format!("next: add {} to etcd as a learner", member(ordinal))
        }
        Step::SetReplicas(replicas) => {
            format!("next: set the members' StatefulSet to {replicas} replicas")
        }
        Step::Promote { ordinal, .. } => format!("next: promote learner {}", member(ordinal)),
        Step::MoveLeader {
            from_ordinal, to, ..
        } => format!(
            "next: move leadership from {} to member {to:x}",
            member(from_ordinal)
        ),
        Step::RemoveMember { ordinal, .. } => {
            format!("next: remove {} from etcd", member(ordinal))
        }
        Step::DeleteVolume { ordinal } => format!(
            "next: delete the volume claim of removed member {}",
            member(ordinal)
        ),
        Step::ReclaimSpace => "next: reclaim space (compact the history, defragment each member in turn, disarm the NOSPACE alarm)".to_owned(),
        Step::RestartPod { ordinal } => format!("next: restart pod {}", member(ordinal)),
        Step::EvictFromLostNode {
            ordinal, claim_uid, ..
        } => format!(
            "next: force-delete pod {} on its lost node{}",
            member(ordinal),
            if claim_uid.is_some() {
                ", after deleting its volume claim (its data is bound to that node)"
            } else {
                ""
            }
        ),
        Step::EnableDowngrade { target } => format!(
            "next: enable etcd's downgrade to {}.{}",
            target.major, target.minor
        ),
        Step::CancelDowngrade => "next: cancel the downgrade enabled in etcd".to_owned(),
    })
}

/// Why the planner waits, as a sentence.
pub fn wait(cluster: &str, reason: &WaitReason) -> String {
    match reason {
        WaitReason::EtcdUnreachable => {
            "no etcd member answers; waiting before any membership change".to_owned()
        }
        WaitReason::MemberUnhealthy { ordinal } => format!(
            "member {} is unhealthy; no member is added, removed or restarted until it recovers",
            naming::member(cluster, *ordinal)
        ),
        WaitReason::WouldBreakQuorum { healthy, needed } => format!(
            "the next step would leave {healthy} healthy voting members where quorum needs {needed}; waiting for members to recover"
        ),
        WaitReason::LearnerCatchingUp { ordinal } => format!(
            "learner {} is catching up",
            naming::member(cluster, *ordinal)
        ),
        WaitReason::PodNotReady { ordinal } => {
            format!("pod {} is not ready", naming::member(cluster, *ordinal))
        }
        WaitReason::UpgradeInProgress { ordinal } => format!(
            "member {} restarted on the new version and is not serving yet",
            naming::member(cluster, *ordinal)
        ),
        WaitReason::RestartInProgress { ordinal } => format!(
            "member {} restarted onto the current template and is not Ready and caught up yet",
            naming::member(cluster, *ordinal)
        ),
        WaitReason::PodTerminating { ordinal } => format!(
            "pod {} is stopping (deleted; its kubelet has not confirmed it stopped yet)",
            naming::member(cluster, *ordinal)
        ),
        WaitReason::TemplatePending => {
            "the StatefulSet's controller has not reported the revision of the members' new template yet".to_owned()
        }
        WaitReason::NoMembersRequested => "spec.size must be at least 1".to_owned(),
        WaitReason::QuorumLost { reachable, needed } => format!(
            "quorum lost: {reachable} voter(s) answer, {needed} needed; no member can be added, removed or restarted. Bring lost members back, or set spec.recovery.policy=ForceNewCluster to restart the most up-to-date survivor alone (writes only the lost members held are lost), or RestoreFromBackup to recreate the cluster from its newest backup (writes after it are lost)"
        ),
        WaitReason::RecoveryInProgress { ordinal } => format!(
            "quorum recovery: waiting for {} to restart alone",
            naming::member(cluster, *ordinal)
        ),
        WaitReason::DowngradeRefused { message } => format!(
            "etcd refuses the downgrade: {message}; no member was touched"
        ),
        WaitReason::DowngradeMigrating => {
            "etcd's downgrade is enabled; waiting for every member to rewrite its data for the older version before the first restarts on it".to_owned()
        }
        WaitReason::SnapshotBefore37(pending) => {
            let member = naming::member(cluster, pending.ordinal);
            let progress = match (pending.applied, pending.needed) {
                (Some(applied), Some(needed)) => format!(
                    "; it takes one within {} more entries (it has applied {applied} of {needed}). Writes get it there, or set spec.etcd.snapshotCount: 1 with the image back on 3.6 (see \"Upgrade etcd\" in docs/operations.md)",
                    needed.saturating_sub(applied)
                ),
                _ => String::new(),
            };
            format!(
                "member {member} has not taken a snapshot on 3.6 past the entries etcd 3.5 wrote, which etcd 3.7 cannot replay: it stays on 3.6 until it has{progress}"
            )
        }
        WaitReason::RestoreInProgress => {
            "recreating the cluster from its newest backup: waiting for every member to start from it (old data is moved aside, not deleted)".to_owned()
        }
    }
}
