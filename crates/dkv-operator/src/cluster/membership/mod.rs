//! The membership planner (pure): from what etcd and the pods report, and the
//! operation pinned in status, choose the one next step for a cluster.
//!
//! It encodes the etcd invariants the operator must never break:
//! - at most one disruptive operation at a time; it is pinned in
//!   `status.operation` before it starts and resumed — never interleaved with
//!   another — until it is verified complete, whatever the spec says meanwhile;
//! - no step may leave fewer healthy voters than quorum;
//! - membership first, pods second: a learner is added before its pod
//!   exists, a member is removed before its pod goes;
//! - a leader is never removed or restarted while it leads: leadership moves
//!   to a healthy follower first;
//! - a member moves down a minor line only once etcd's downgrade lets it
//!   ([`DowngradeGate::Open`]), and onto 3.7 only once its log holds no
//!   entry etcd 3.5 wrote ([`Observation::unsnapshotted`]);
//! - a missing or unready pod is waited for, never scaled away.
//!
//! Members are identified by ordinal: member `k` is pod `<cluster>-k`, whose
//! peer URL names it. Ordinals are contiguous from 0; scale-up adds the next
//! ordinal and scale-down removes the highest, matching the StatefulSet.
//!
//! This module holds what the planner sees and decides (the observation, the
//! steps, the reasons to wait) and the quorum arithmetic; `begin` chooses
//! the operation to start when none is pinned, `resume` carries a pinned one
//! through to its end.

mod begin;
pub(crate) mod etcd35_log;
pub mod observe;
mod resume;
pub mod words;

use dkv_api::distributedkv::v1beta1::OperationKind;

use crate::etcd_version::EtcdVersion;

/// One etcd member as observed this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedMember {
    pub id: u64,
    pub ordinal: i32,
    pub learner: bool,
    /// The member process has started and announced its name.
    pub started: bool,
    /// Its status call succeeded and reported no errors, and it follows a
    /// leader that is alive.
    pub healthy: bool,
    /// Its status call succeeded (it runs and answers, leader or not).
    pub reachable: bool,
    pub leader: bool,
    pub raft_index: u64,
    /// The index of the last entry it applied (what its snapshots follow).
    pub applied_index: u64,
    pub version: Option<EtcdVersion>,
    /// etcd's cluster ID as the member reports it (0: it did not answer).
    pub cluster_id: u64,
    /// The version of its data files (etcd 3.6 and later; `None` before,
    /// or when it did not answer). During a downgrade it drops to the
    /// target once the member has rewritten its data for it.
    pub storage_version: Option<EtcdVersion>,
    /// The version an enabled downgrade goes to, as the member reports it
    /// (etcd 3.6 and later).
    pub downgrade_target: Option<EtcdVersion>,
}

/// One member pod as observed this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    pub ordinal: i32,
    pub ready: bool,
    /// `member-init` found no data although the cluster lists this member
    /// as started: its volume was lost and the member must be replaced.
    pub data_lost: bool,
    /// The etcd version of the pod's image.
    pub version: Option<EtcdVersion>,
    /// `member-init` finished for the pod's current run.
    pub init_done: bool,
    /// ... and configured etcd to restart alone with `--force-new-cluster`.
    pub forced_new_cluster: bool,
    /// `member-init` refuses to start the member (it is retried with backoff;
    /// a restart makes it read the current membership record at once).
    pub init_refused: bool,
    /// `member-init` started this member from the backup of the restore
    /// pinned now (`RestoreFromBackup`).
    pub restored: bool,
    /// The member certificate the pod was started with (the serial of its
    /// template); `None` without TLS.
    pub tls_serial: Option<String>,
    /// The StatefulSet revision of the template the pod was created from
    /// (its `controller-revision-hash` label).
    pub revision: Option<String>,
    /// The member-side hash its template was stamped with (see
    /// [`crate::cluster::upgrade::member_side`]).
    pub member_side: Option<String>,
    /// `member-init` started this member for the `ReplaceMember` pinned now
    /// (its data from before set aside).
    pub replaced: bool,
    /// The `--snapshot-count` its member-init passes to etcd, if set.
    pub snapshot_count: Option<u64>,
}

impl ObservedPod {
    /// Whether the pod runs the StatefulSet's template of `revision`:
    /// created from it, or, once that template runs no restore steps (its
    /// member-side hash `settled`), from one that differed only by them.
    /// The restore steps run once, before a member first starts; dropping
    /// them from the template restarts no member.
    pub fn runs_template(&self, revision: &str, settled: Option<&str>) -> bool {
        self.revision.as_deref() == Some(revision)
            || settled.is_some_and(|hash| self.member_side.as_deref() == Some(hash))
    }
}

/// A member whose pod is bound to a lost node (see
/// [`crate::cluster::recovery::lost_node`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranded {
    pub ordinal: i32,
    /// `spec.recovery.lostNode` asks for replacement and its grace has
    /// passed.
    pub replace: bool,
    /// Where the member's data lives.
    pub data: DataPlacement,
    /// The uid of the pod left on the node: only that pod is ever deleted,
    /// never one the StatefulSet created since.
    pub pod_uid: Option<String>,
    /// The uid of its volume claim, if it has one.
    pub claim_uid: Option<String>,
}

/// Where a member's data lives, which decides how it is moved off a lost
/// node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPlacement {
    /// On a volume bound to the node (a local disk): unreachable with the
    /// node. The member is removed, its claim deleted, and a new empty
    /// member joins.
    NodeBound,
    /// On a volume that attaches wherever the pod runs (a network disk): the
    /// member keeps its identity and data; only its pod is moved.
    FollowsPod,
    /// In an emptyDir (no `spec.storage`): gone with the node. The member is
    /// removed and a new empty member joins; there is no claim.
    Ephemeral,
}

/// The pinned operation, as stored in status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    pub kind: OperationKind,
    pub ordinal: i32,
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Member count the spec asks for.
    pub desired_size: i32,
    /// etcd version the spec asks for.
    pub desired_version: EtcdVersion,
    /// `None` when no member answered (etcd unreachable or not formed yet).
    pub members: Option<Vec<ObservedMember>>,
    pub pods: Vec<ObservedPod>,
    /// `spec.replicas` of the StatefulSet.
    pub replicas: i32,
    pub pinned: Option<Pinned>,
    /// etcd raised NOSPACE: the backend hit its quota and writes are refused.
    pub space_alarm: bool,
    /// The recovery policy allows forcing a new cluster from a survivor now
    /// (quorum has been lost for longer than the policy's grace period).
    pub recovery_allowed: bool,
    /// The recovery policy allows recreating the cluster from its newest
    /// backup now (quorum lost for longer than the grace period, and a
    /// completed backup exists).
    pub restore_allowed: bool,
    /// The serial of the current member certificate (`spec.tls`); pods
    /// started with another restart onto it, one at a time.
    pub desired_tls_serial: Option<String>,
    /// The StatefulSet's current template revision (`status.updateRevision`),
    /// once its controller has seen the latest spec; `None` while it has not
    /// (the rollout's target is not known yet). Pods on another revision
    /// restart onto it, one at a time.
    pub update_revision: Option<String>,
    /// The member-side hash of that template once it runs no restore steps
    /// ([`crate::cluster::plan::settled_template`]): a pod started with the
    /// restore steps and otherwise the same template runs it already.
    pub settled_template: Option<String>,
    /// Members whose pod is bound to a lost node.
    pub stranded: Vec<Stranded>,
    /// Ordinals whose member pod is being deleted (`deletionTimestamp` set):
    /// it is stopping, and `pods` does not list it.
    pub terminating: Vec<i32>,
    /// Members whose data differs from their peers' (see
    /// [`crate::cluster::recovery::corruption`]).
    pub corrupt: Vec<i32>,
    /// `spec.recovery.corruptMember: Replace`: such members are replaced.
    pub replace_corrupt: bool,
    /// etcd's side of a downgrade (see `cluster/upgrade/downgrade.rs`).
    pub downgrade: DowngradeGate,
    /// The voters whose log since their newest snapshot may still hold an
    /// entry etcd 3.5 wrote: none moves onto 3.7 (see
    /// `cluster/membership/etcd35_log.rs`).
    pub unsnapshotted: Vec<SnapshotPending>,
}

/// A voter that may still replay an entry etcd 3.5 wrote, which etcd 3.7
/// cannot: it must take a snapshot on 3.6 first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPending {
    pub ordinal: i32,
    /// The entries it has applied (`None` while a voter still runs 3.5 and
    /// where 3.5's entries end is not known yet).
    pub applied: Option<u64>,
    /// The applied index by which it has surely taken one.
    pub needed: Option<u64>,
}

/// Whether members may restart onto an older minor version, as etcd's
/// downgrade API says (see `cluster/upgrade/downgrade.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DowngradeGate {
    /// No member runs a newer minor line than the spec asks for, or every
    /// one that does has rewritten its data for the spec's: they may
    /// restart onto it.
    #[default]
    Open,
    /// etcd validated a downgrade to the spec's minor line: enable it next.
    Validated,
    /// etcd refuses a downgrade to the spec's minor line, with its message.
    Refused(String),
    /// The downgrade is enabled; some member has not rewritten its data for
    /// the target yet.
    Migrating,
    /// etcd could not be asked.
    Unknown,
    /// A downgrade to an older minor line than the spec's is enabled (a
    /// downgrade undone, or rolled back): cancel it before members restart
    /// onto the spec's version.
    Stale,
}

/// The one thing to do this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Pin a new operation in status (the next pass starts executing it).
    Begin(Pinned),
    /// The pinned operation is verified complete: clear it from status.
    Finish(Pinned),
    /// Add member `ordinal` to etcd as a learner.
    AddLearner { ordinal: i32 },
    /// Set the StatefulSet's replicas.
    SetReplicas(i32),
    /// Promote a caught-up learner.
    Promote { id: u64, ordinal: i32 },
    /// Transfer leadership from `from` (member `from_ordinal`, the leader)
    /// to `to` (member IDs).
    MoveLeader {
        from: u64,
        from_ordinal: i32,
        to: u64,
    },
    /// Remove a member from etcd.
    RemoveMember { id: u64, ordinal: i32 },
    /// Delete the PVC of a removed member (its data is stale).
    DeleteVolume { ordinal: i32 },
    /// Reclaim backend space after a NOSPACE alarm: compact the history,
    /// defragment each member in turn, disarm the alarm.
    ReclaimSpace,
    /// Delete a pod so that it restarts (on the new template, for upgrades;
    /// with an empty volume, for replacements).
    RestartPod { ordinal: i32 },
    /// Force-delete (grace period 0) the pod with `pod_uid`, of a member on
    /// a lost node, so that the StatefulSet re-creates it on another node;
    /// first delete the claim with `claim_uid`, if set (its data is bound
    /// to that node).
    EvictFromLostNode {
        ordinal: i32,
        pod_uid: Option<String>,
        claim_uid: Option<String>,
    },
    /// Enable etcd's downgrade to `target`'s minor line (validated this
    /// pass): the cluster version drops to it and members rewrite their
    /// data for it.
    EnableDowngrade { target: EtcdVersion },
    /// Cancel the downgrade enabled in etcd (see [`DowngradeGate::Stale`]).
    CancelDowngrade,
    /// Nothing safe to do now; the reason is reported in status.
    Wait(WaitReason),
    /// Membership matches the spec.
    Converged,
}

impl Step {
    /// Whether executing this step changes the cluster so that the next
    /// step may be possible at once (a member added, leadership moved, an
    /// operation finished), rather than only after something slower (a pod
    /// starting, a learner catching up) or nothing at all.
    pub fn advances(&self) -> bool {
        matches!(
            self,
            Step::Finish(_)
                | Step::AddLearner { .. }
                | Step::SetReplicas(_)
                | Step::Promote { .. }
                | Step::MoveLeader { .. }
                | Step::RemoveMember { .. }
                | Step::DeleteVolume { .. }
                | Step::EvictFromLostNode { .. }
                | Step::EnableDowngrade { .. }
                | Step::CancelDowngrade
        )
    }
}

/// Why the planner waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// No member answers: the cluster is forming, or quorum is lost.
    EtcdUnreachable,
    /// A voter is unhealthy: no disruptive step until it recovers.
    MemberUnhealthy { ordinal: i32 },
    /// A learner has not caught up with the leader yet.
    LearnerCatchingUp { ordinal: i32 },
    /// A pod has not started or is not ready yet.
    PodNotReady { ordinal: i32 },
    /// Removing a member now would leave fewer healthy voters than quorum.
    WouldBreakQuorum { healthy: usize, needed: usize },
    /// A member restarted for an upgrade has not reported the new version.
    UpgradeInProgress { ordinal: i32 },
    /// A member restarted onto the current template is not Ready, or has
    /// not caught up with the leader, yet.
    RestartInProgress { ordinal: i32 },
    /// The member's pod is being deleted (its kubelet has not confirmed it
    /// stopped yet): deleting it again would change nothing.
    PodTerminating { ordinal: i32 },
    /// The StatefulSet's controller has not reported the revision of its
    /// latest template yet.
    TemplatePending,
    /// The spec asks for fewer than one member.
    NoMembersRequested,
    /// Fewer voters answer than quorum needs: no step is possible; only a
    /// recovery policy (or a human) can bring the cluster back.
    QuorumLost { reachable: usize, needed: usize },
    /// A quorum recovery waits for its survivor to restart alone.
    RecoveryInProgress { ordinal: i32 },
    /// A restore from backup waits for every member to start from it.
    RestoreInProgress,
    /// etcd refuses to downgrade to the spec's minor line (its message).
    DowngradeRefused { message: String },
    /// The downgrade is enabled; members are rewriting their data for the
    /// target before any may restart on the older version.
    DowngradeMigrating,
    /// Member `ordinal` would move onto 3.7 before it took a snapshot past
    /// the entries etcd 3.5 wrote (see `cluster/membership/etcd35_log.rs`).
    SnapshotBefore37(SnapshotPending),
}

impl Observation {
    fn voters(&self) -> Vec<&ObservedMember> {
        self.members
            .iter()
            .flatten()
            .filter(|m| !m.learner)
            .collect()
    }

    fn member(&self, ordinal: i32) -> Option<&ObservedMember> {
        self.members.iter().flatten().find(|m| m.ordinal == ordinal)
    }

    fn pod(&self, ordinal: i32) -> Option<&ObservedPod> {
        self.pods.iter().find(|p| p.ordinal == ordinal)
    }

    fn stranded(&self, ordinal: i32) -> Option<&Stranded> {
        self.stranded.iter().find(|s| s.ordinal == ordinal)
    }

    /// Whether member `ordinal` is on a lost node and due to be relocated.
    fn relocation_due(&self, ordinal: i32) -> bool {
        self.stranded(ordinal).is_some_and(|s| s.replace)
    }

    fn leader(&self) -> Option<&ObservedMember> {
        self.members.iter().flatten().find(|m| m.leader)
    }

    /// Whether a member runs the version the spec asks for: its pod runs the
    /// desired image and etcd reports the desired minor line. The patch level
    /// etcd reports is not compared: an image tag need not name the exact
    /// binary version, and restarting a member cannot change it.
    /// Whether the pod of `ordinal` (if any) was started with the current
    /// member certificate.
    fn has_current_certificate(&self, ordinal: i32) -> bool {
        self.desired_tls_serial.is_none()
            || self
                .pod(ordinal)
                .is_none_or(|p| p.tls_serial == self.desired_tls_serial)
    }

    /// Whether the pod of `ordinal` runs the StatefulSet's current template
    /// (unknown revisions count as not current).
    fn on_current_template(&self, ordinal: i32) -> bool {
        match (&self.update_revision, self.pod(ordinal)) {
            (Some(wanted), Some(pod)) => {
                pod.runs_template(wanted, self.settled_template.as_deref())
            }
            _ => false,
        }
    }

    /// Whether member `m` is back in service after a restart: healthy in
    /// etcd, its pod Ready (the client Service routes to it), and its log
    /// within [`CAUGHT_UP_ENTRIES`] of the leader's.
    fn back_in_service(&self, m: &ObservedMember) -> bool {
        let leader_index = self.leader().map_or(0, |l| l.raft_index);
        m.healthy
            && self.pod(m.ordinal).is_some_and(|p| p.ready)
            && leader_index.saturating_sub(m.raft_index) <= CAUGHT_UP_ENTRIES
    }

    /// What must happen before member `m` may restart onto the spec's
    /// version, when that moves it down a minor line: `None` once etcd's
    /// downgrade lets it (see [`DowngradeGate`]).
    fn downgrade_step(&self, m: &ObservedMember) -> Option<Step> {
        let newer = m
            .version
            .is_some_and(|v| v.minor_line() > self.desired_version.minor_line());
        if !newer {
            return None;
        }
        match &self.downgrade {
            DowngradeGate::Open => None,
            DowngradeGate::Validated => Some(Step::EnableDowngrade {
                target: self.desired_version,
            }),
            DowngradeGate::Refused(message) => Some(Step::Wait(WaitReason::DowngradeRefused {
                message: message.clone(),
            })),
            DowngradeGate::Stale => Some(Step::CancelDowngrade),
            DowngradeGate::Migrating | DowngradeGate::Unknown => {
                Some(Step::Wait(WaitReason::DowngradeMigrating))
            }
        }
    }

    /// Why member `m` may not restart onto the spec's version yet, when
    /// that moves it onto 3.7 while its log may hold an entry 3.5 wrote.
    fn snapshot_wait(&self, m: &ObservedMember) -> Option<WaitReason> {
        let onto_3_7 = self.desired_version.minor_line() >= (3, 7)
            && m.version.is_some_and(|v| v.minor_line() < (3, 7));
        if !onto_3_7 {
            return None;
        }
        self.unsnapshotted
            .iter()
            .find(|p| p.ordinal == m.ordinal)
            .map(|p| WaitReason::SnapshotBefore37(*p))
    }

    fn runs_desired_version(&self, m: &ObservedMember) -> bool {
        let pod_current = self
            .pod(m.ordinal)
            .is_none_or(|p| p.version.is_none_or(|v| v == self.desired_version));
        let member_current = m
            .version
            .is_none_or(|v| v.minor_line() == self.desired_version.minor_line());
        pod_current && member_current
    }

    /// The reachable voter with the most of the log (lowest ordinal on a tie).
    fn survivor(&self) -> Option<&ObservedMember> {
        self.voters()
            .into_iter()
            .filter(|m| m.reachable)
            .max_by_key(|m| (m.raft_index, -m.ordinal))
    }

    /// A healthy voter other than `except`, preferring the most caught-up.
    fn healthy_follower(&self, except: u64) -> Option<&ObservedMember> {
        self.voters()
            .into_iter()
            .filter(|m| m.healthy && m.id != except)
            .max_by_key(|m| (m.raft_index, -m.ordinal))
    }

    /// Whether voter `id`, found corrupt, may be replaced: at least three
    /// voters, and the others healthy and not corrupt themselves make a
    /// quorum of the voters left without it. A member that disagrees with
    /// a majority is the one whose data is wrong; with no such majority
    /// nobody can say which copy is right.
    fn safe_to_replace_corrupt(&self, id: u64) -> Result<(), WaitReason> {
        let voters = self.voters();
        let sound = voters
            .iter()
            .filter(|m| m.id != id && m.healthy && !self.corrupt.contains(&m.ordinal))
            .count();
        let voters_after = voters.len().saturating_sub(1);
        let needed = quorum(i32::try_from(voters_after).unwrap_or(i32::MAX)) as usize;
        if voters.len() >= 3 && sound >= needed {
            Ok(())
        } else {
            Err(WaitReason::WouldBreakQuorum {
                healthy: sound,
                needed: needed.max(2),
            })
        }
    }

    /// Whether removing (or stopping) voter `id` keeps quorum among the
    /// healthy voters left.
    fn safe_to_lose(&self, id: u64, removed_from_membership: bool) -> Result<(), WaitReason> {
        let voters = self.voters();
        let is_voter = voters.iter().any(|m| m.id == id);
        let healthy_left = voters.iter().filter(|m| m.healthy && m.id != id).count();
        // Removing shrinks the voter set (and its quorum); a restart keeps it.
        let voters_after = if removed_from_membership && is_voter {
            voters.len() - 1
        } else {
            voters.len()
        };
        let needed = quorum(i32::try_from(voters_after).unwrap_or(i32::MAX)) as usize;
        // A single member cannot stay available through its own restart;
        // refusing would make it impossible to ever upgrade it. Its data
        // survives the restart, so the only cost is a short outage.
        let sole_member_restart = !removed_from_membership && voters.len() == 1;
        if voters_after == 0 || healthy_left >= needed || sole_member_restart {
            Ok(())
        } else {
            Err(WaitReason::WouldBreakQuorum {
                healthy: healthy_left,
                needed,
            })
        }
    }
}

/// Whether quorum is lost: no voter follows a live leader and fewer voters
/// answer than quorum needs (so none can be elected either). A leader
/// election in progress is not quorum loss: its voters still answer.
fn quorum_lost(obs: &Observation) -> Option<WaitReason> {
    let voters = obs.voters();
    if voters.is_empty() || voters.iter().any(|m| m.healthy) {
        return None;
    }
    let reachable = voters.iter().filter(|m| m.reachable).count();
    let needed = quorum(i32::try_from(voters.len()).unwrap_or(i32::MAX)) as usize;
    (reachable < needed).then_some(WaitReason::QuorumLost { reachable, needed })
}

/// Majority of `voters`: the fewest members that can still commit writes.
pub fn quorum(voters: i32) -> i32 {
    voters / 2 + 1
}

/// How far behind the leader's raft index a restarted member may be and
/// count as caught up: the statuses of one pass are read concurrently, so
/// under a steady writer the indexes differ by a few entries even when no
/// member lags.
pub const CAUGHT_UP_ENTRIES: u64 = 1000;

/// etcd refuses to promote a learner that is not within ~10% of the leader's
/// log; asking earlier only earns a refusal.
fn caught_up(learner: &ObservedMember, leader_index: u64) -> bool {
    learner.started
        && learner.healthy
        && learner.raft_index.saturating_mul(10) >= leader_index.saturating_mul(9)
}

/// Chooses the next step. See the module documentation for the rules.
pub fn next_step(obs: &Observation) -> Step {
    let step = match obs.pinned {
        Some(pinned) => resume::continue_operation(obs, pinned),
        None => begin::unpinned_step(obs),
    };
    match step {
        // Already going: the restart is under way once its kubelet stops it.
        Step::RestartPod { ordinal } if obs.terminating.contains(&ordinal) => {
            Step::Wait(WaitReason::PodTerminating { ordinal })
        }
        step => step,
    }
}

/// A healthy, started voter and its Ready pod, as the planner's and the
/// status's tests build clusters from.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::{ObservedMember, ObservedPod};
    use crate::etcd_version::EtcdVersion;

    const V35: EtcdVersion = EtcdVersion::new(3, 5, 16);

    pub(crate) fn member(ordinal: i32) -> ObservedMember {
        ObservedMember {
            id: 100 + ordinal as u64,
            ordinal,
            learner: false,
            started: true,
            healthy: true,
            reachable: true,
            leader: ordinal == 0,
            raft_index: 1000,
            applied_index: 1000,
            version: Some(V35),
            cluster_id: 7,
            storage_version: None,
            downgrade_target: None,
        }
    }

    pub(crate) fn pod(ordinal: i32) -> ObservedPod {
        ObservedPod {
            ordinal,
            ready: true,
            data_lost: false,
            version: Some(V35),
            init_done: true,
            forced_new_cluster: false,
            init_refused: false,
            restored: false,
            tls_serial: None,
            revision: Some("rev-1".to_owned()),
            member_side: None,
            replaced: false,
            snapshot_count: None,
        }
    }
}

#[cfg(test)]
mod tests;
