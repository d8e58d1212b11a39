//! The words of the Progressing condition: its reason for each operation kind, the step an operation is at, and
//! what the planner waits for.

use dkv_api::conditions::reasons;
use dkv_api::distributedkv::v1beta1::OperationKind;

use crate::cluster::membership::{Step, WaitReason};
use crate::cluster::naming;

pub(super) fn operation_reason(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::AddLearner => reasons::SCALING_UP,
        OperationKind::PromoteLearner => reasons::PROMOTING_LEARNER,
        OperationKind::RemoveMember => reasons::REMOVING_MEMBER,
        OperationKind::UpgradeMember => reasons::ROLLING_UPGRADE,
        OperationKind::RenewCertificate => reasons::RENEWING_CERTIFICATES,
        OperationKind::ReplaceMember => reasons::REPLACING_MEMBER,
        OperationKind::RecoverQuorum => reasons::RECOVERING_QUORUM,
        OperationKind::RestoreFromBackup => reasons::RESTORING,
        OperationKind::RestartMember => reasons::ROLLING_OUT,
        OperationKind::RelocateMember => reasons::RELOCATING_MEMBER,
    }
}

pub(super) fn step_detail(step: &Step) -> String {
    match step {
        Step::Wait(reason) => format!(": waiting ({reason:?})"),
        Step::Finish(_) | Step::Converged | Step::Begin(_) => String::new(),
        other => format!(": {other:?}"),
    }
}

pub(super) fn wait_message(cluster: &str, reason: &WaitReason) -> String {
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
