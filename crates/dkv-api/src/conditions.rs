//! The condition vocabulary of `DistributedKV` status: types and reasons.
//!
//! Reasons are PascalCase machine-readable strings (they surface in `kubectl
//! get dkv`'s Status column and in alerts), so they live here as constants and
//! never inline at call sites.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The condition of `type_` in `conditions` if its status is `True`.
pub fn find_true<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status::TRUE)
}

/// Whether the condition of `type_` is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find_true(conditions, type_).is_some()
}

/// The values of a condition's status.
pub mod status {
    pub const TRUE: &str = "True";
    pub const FALSE: &str = "False";
    pub const UNKNOWN: &str = "Unknown";
}

/// Condition types.
pub mod types {
    /// Quorum is healthy and every voting member serves.
    pub const AVAILABLE: &str = "Available";
    /// An operation is in flight; the reason names it.
    pub const PROGRESSING: &str = "Progressing";
    /// Something needs attention; the reason names it.
    pub const DEGRADED: &str = "Degraded";
}

/// Condition reasons.
pub mod reasons {
    // Available
    pub const QUORUM_HEALTHY: &str = "QuorumHealthy";
    pub const MEMBERS_NOT_READY: &str = "MembersNotReady";
    pub const CREATING: &str = "Creating";
    /// Enough members are healthy, but the client Service routes to fewer
    /// than quorum of them yet: a client would not reach the cluster.
    pub const ENDPOINTS_NOT_READY: &str = "EndpointsNotReady";
    /// As `QuorumHealthy`, for a standby (`spec.standby`): it serves reads
    /// and refuses writes until promoted.
    pub const STANDBY: &str = "Standby";
    // Progressing
    pub const CONVERGED: &str = "Converged";
    pub const CREATING_CLUSTER: &str = "CreatingCluster";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const SCALING_UP: &str = "ScalingUp";
    pub const PROMOTING_LEARNER: &str = "PromotingLearner";
    pub const REMOVING_MEMBER: &str = "RemovingMember";
    pub const ROLLING_UPGRADE: &str = "RollingUpgrade";
    /// etcd's downgrade by one minor version: enabled, members rewriting
    /// their data for it, or restarting one at a time onto the older image.
    pub const DOWNGRADING: &str = "Downgrading";
    /// etcd refuses the downgrade the spec asks for (`downgrade validate`);
    /// no member is touched.
    pub const DOWNGRADE_REFUSED: &str = "DowngradeRefused";
    /// Members restart one at a time onto a reissued TLS certificate.
    pub const RENEWING_CERTIFICATES: &str = "RenewingCertificates";
    pub const REPLACING_MEMBER: &str = "ReplacingMember";
    /// A member on a lost node is moved to another (`spec.recovery.lostNode`).
    pub const RELOCATING_MEMBER: &str = "RelocatingMember";
    pub const RECOVERING_QUORUM: &str = "RecoveringQuorum";
    pub const RESTORING: &str = "Restoring";
    pub const PAUSED: &str = "ReconcilePaused";
    /// A change is due but waits for a safe moment (a member unhealthy,
    /// quorum at risk); the message says what it waits for.
    pub const WAITING: &str = "WaitingForSafety";
    /// A member waits on 3.6 for a snapshot past the entries etcd 3.5
    /// wrote before it may move onto 3.7.
    pub const WAITING_FOR_SNAPSHOT: &str = "WaitingForSnapshot";
    /// Member volumes are growing to `spec.storage.size`.
    pub const EXPANDING_VOLUMES: &str = "ExpandingVolumes";
    /// cert-manager has not issued a certificate the members need yet.
    pub const WAITING_FOR_CERTIFICATES: &str = "WaitingForCertificates";
    /// A member restarted onto the new spec has not become Ready and
    /// healthy within `spec.rollout.progressDeadline`, and
    /// `spec.rollout.onFailure` is `Pause`: the rollout stops there.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// (Progressing and Degraded) a rollout missed its deadline and
    /// `spec.rollout.onFailure: Rollback` moved the members back onto the
    /// spec that last ran on every member; the message names the pod that
    /// failed and why. It lasts until the spec is edited again.
    pub const ROLLED_BACK: &str = "RolledBack";
    // Degraded
    pub const AS_EXPECTED: &str = "AsExpected";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const QUORUM_LOST: &str = "QuorumLost";
    pub const MEMBER_UNHEALTHY: &str = "MemberUnhealthy";
    /// etcd's corruption checks found a member's data differs from its
    /// peers' (the CORRUPT alarm, or its initial check refusing to start
    /// it): the message names it.
    pub const MEMBER_CORRUPT: &str = "MemberCorrupt";
    /// A member's pod is on a node Kubernetes has lost (`Ready` not `True`,
    /// tainted unreachable, or gone): it cannot serve until the node is back
    /// or the member is moved off it.
    pub const MEMBER_NODE_LOST: &str = "MemberNodeLost";
    /// Continuous backup has stored nothing for a while (its agent keeps
    /// failing): the recovery point falls behind.
    pub const CONTINUOUS_BACKUP_FAILING: &str = "ContinuousBackupFailing";
    /// A standby does not follow its source: reading or applying fails,
    /// or the source's store no longer holds its next change.
    pub const STANDBY_NOT_FOLLOWING: &str = "StandbyNotFollowing";
    pub const BACKUP_FAILED: &str = "BackupFailed";
    /// `spec.bootstrap.restore` cannot be carried out: the source is missing
    /// or incomplete, or a member's restore step failed (a checksum mismatch,
    /// unreadable credentials, ...). Nothing is started from the artifact.
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// A TLS Secret the members need is missing, unreadable or holds a
    /// certificate members would refuse; or cert-manager is not installed.
    pub const TLS_FAILED: &str = "TLSFailed";
    /// etcd's backend reached its quota and refuses writes.
    pub const NO_SPACE: &str = "NoSpace";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    /// A member's image cannot be pulled (`ErrImagePull`,
    /// `ImagePullBackOff`, `InvalidImageName`).
    pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
    /// A member's etcd container keeps failing or cannot be created
    /// (`CrashLoopBackOff`, `CreateContainerConfigError`, ...).
    pub const MEMBER_CRASH_LOOPING: &str = "MemberCrashLooping";
    /// A member volume cannot grow to `spec.storage.size` (its StorageClass
    /// does not allow expansion).
    pub const VOLUME_EXPANSION_FAILED: &str = "VolumeExpansionFailed";
    /// A member pod cannot be scheduled onto any node.
    pub const MEMBER_UNSCHEDULABLE: &str = "MemberUnschedulable";
    /// A member's volume claim has had no volume for a while (its
    /// StorageClass's provisioner does not create one).
    pub const VOLUME_PENDING: &str = "VolumePending";
    pub const UNSUPPORTED_CHANGE: &str = "UnsupportedChange";
    // Hibernation (`spec.hibernation`)
    /// The members are stopped, their volumes and membership kept
    /// (Available and Progressing, both False).
    pub const HIBERNATED: &str = "Hibernated";
    /// Hibernation was asked for: the members are stopping, or the
    /// cluster waits for a consistent point (no operation under way, every
    /// member healthy) to stop them; the message says which.
    pub const HIBERNATING: &str = "Hibernating";
    /// Hibernation was turned off: the same members start again on their
    /// volumes.
    pub const WAKING: &str = "Waking";
    /// `spec.bootstrap.join`: dkv refused to join the running cluster
    /// (Degraded; the message says what is wrong and the fix).
    pub const JOIN_REFUSED: &str = "JoinRefused";
    /// dkv's members are joining the running cluster, one at a time.
    pub const TAKING_OVER: &str = "TakingOver";
    /// dkv's members are all voters; the members that were there before
    /// stay (`oldMembers: Keep`).
    pub const TAKEN_OVER: &str = "TakenOver";
    /// The members that were there before dkv are being removed.
    pub const OLD_MEMBERS_LEAVING: &str = "OldMembersLeaving";
    /// The DistributedKV is deleted before it was adopted: dkv's members
    /// leave the running cluster first.
    pub const BACKING_OUT: &str = "BackingOut";
}
