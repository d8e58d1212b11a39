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
//! - a missing or unready pod is waited for, never scaled away.
//!
//! Members are identified by ordinal: member `k` is pod `<cluster>-k`, whose
//! peer URL names it. Ordinals are contiguous from 0; scale-up adds the next
//! ordinal and scale-down removes the highest, matching the StatefulSet.

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
    pub version: Option<EtcdVersion>,
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
            (Some(wanted), Some(pod)) => pod.revision.as_ref() == Some(wanted),
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
    if let Some(pinned) = obs.pinned {
        return continue_operation(obs, pinned);
    }
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

    // Quorum lost: no leader, and too few voters answer for one to be
    // elected. Nothing can change membership; a recovery policy may force
    // a new cluster from the most up-to-date survivor.
    if let Some(lost) = quorum_lost(obs) {
        return match (obs.recovery_allowed, obs.survivor()) {
            (true, Some(survivor)) => Step::Begin(Pinned {
                kind: OperationKind::RecoverQuorum,
                ordinal: survivor.ordinal,
            }),
            _ => Step::Wait(lost),
        };
    }

    // A full backend refuses every write: restoring service comes before
    // any membership change (which would itself need writes to succeed).
    if obs.space_alarm {
        return Step::ReclaimSpace;
    }

    // A member whose volume was lost is replaced first — it cannot recover by
    // itself — provided the others keep quorum meanwhile.
    if let Some(lost) = obs.pods.iter().find(|p| p.data_lost)
        && let Some(member) = obs.member(lost.ordinal)
    {
        return match obs.safe_to_lose(member.id, true) {
            Ok(()) => Step::Begin(Pinned {
                kind: OperationKind::ReplaceMember,
                ordinal: lost.ordinal,
            }),
            Err(reason) => Step::Wait(reason),
        };
    }

    // No disruptive step while any member is unwell: it may be a pod
    // restarting, and it must come back, not be scaled away.
    if let Some(sick) = members
        .iter()
        .filter(|m| !m.healthy)
        .min_by_key(|m| m.ordinal)
    {
        return Step::Wait(WaitReason::MemberUnhealthy {
            ordinal: sick.ordinal,
        });
    }
    // A learner left behind (e.g. a scale-up whose pin was lost) is finished
    // before anything else.
    if let Some(learner) = members.iter().find(|m| m.learner) {
        return Step::Begin(Pinned {
            kind: OperationKind::PromoteLearner,
            ordinal: learner.ordinal,
        });
    }

    let voters = i32::try_from(obs.voters().len()).unwrap_or(i32::MAX);
    if voters < obs.desired_size {
        // The lowest free ordinal: after a quorum recovery from a survivor
        // other than member 0, the members below it are re-added.
        let ordinal = (0..).find(|o| obs.member(*o).is_none()).unwrap_or(voters);
        return Step::Begin(Pinned {
            kind: OperationKind::AddLearner,
            ordinal,
        });
    }
    if voters > obs.desired_size {
        let highest = voters - 1;
        return match obs.member(highest) {
            Some(member) => match obs.safe_to_lose(member.id, true) {
                Ok(()) => Step::Begin(Pinned {
                    kind: OperationKind::RemoveMember,
                    ordinal: highest,
                }),
                Err(reason) => Step::Wait(reason),
            },
            None => Step::Converged,
        };
    }

    // Upgrade: followers first (highest ordinal first), the leader last.
    let outdated = |m: &&ObservedMember| !obs.runs_desired_version(m);
    let mut candidates: Vec<&ObservedMember> = obs.voters().into_iter().filter(outdated).collect();
    candidates.sort_by_key(|m| (m.leader, -m.ordinal));
    if let Some(next) = candidates.first() {
        return Step::Begin(Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: next.ordinal,
        });
    }

    // Certificate renewal: the same order and the same one-restart-at-a-time
    // rule as an upgrade.
    let mut stale: Vec<&ObservedMember> = obs
        .voters()
        .into_iter()
        .filter(|m| !obs.has_current_certificate(m.ordinal))
        .collect();
    stale.sort_by_key(|m| (m.leader, -m.ordinal));
    if let Some(next) = stale.first() {
        return Step::Begin(Pinned {
            kind: OperationKind::RenewCertificate,
            ordinal: next.ordinal,
        });
    }

    // Any other change to the members' pod template (resources, pod
    // overrides, etcd flags, `dkv.io/restartedAt`): the same order, the same
    // rule. The target revision is the StatefulSet's, as its controller
    // reports it; until it does, nothing is restarted.
    if obs.update_revision.is_some() {
        let mut outdated: Vec<&ObservedMember> = obs
            .voters()
            .into_iter()
            .filter(|m| obs.pod(m.ordinal).is_some() && !obs.on_current_template(m.ordinal))
            .collect();
        outdated.sort_by_key(|m| (m.leader, -m.ordinal));
        if let Some(next) = outdated.first() {
            return Step::Begin(Pinned {
                kind: OperationKind::RestartMember,
                ordinal: next.ordinal,
            });
        }
    }

    let pods_needed = obs
        .voters()
        .iter()
        .map(|m| m.ordinal + 1)
        .max()
        .unwrap_or(0);
    if obs.replicas != pods_needed {
        // Membership is right but the StatefulSet is not (someone edited it,
        // or a previous pass stopped between the two): align the pods.
        return Step::SetReplicas(pods_needed);
    }
    Step::Converged
}

fn continue_operation(obs: &Observation, pinned: Pinned) -> Step {
    let ordinal = pinned.ordinal;
    if pinned.kind == OperationKind::RestoreFromBackup {
        return continue_restore(obs, pinned);
    }
    let Some(_) = &obs.members else {
        return Step::Wait(WaitReason::EtcdUnreachable);
    };
    let member = obs.member(ordinal);
    let leader_index = obs.leader().map_or(0, |l| l.raft_index);
    match pinned.kind {
        OperationKind::AddLearner | OperationKind::PromoteLearner => match member {
            // Crashed between pinning and adding: add now (idempotent: the
            // member is looked up by ordinal first).
            None => Step::AddLearner { ordinal },
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
            Some(m) if m.healthy && obs.pod(ordinal).is_some_and(|p| p.ready) => {
                Step::Finish(pinned)
            }
            Some(m) if m.healthy => Step::Wait(WaitReason::PodNotReady { ordinal }),
            Some(_) => Step::Wait(WaitReason::MemberUnhealthy { ordinal }),
        },
        OperationKind::RemoveMember => match member {
            // The last voter is never removed, whatever the pin says (it can
            // only say so if someone wrote it into status by hand).
            Some(m) if !m.learner && obs.voters().len() == 1 => Step::Finish(pinned),
            Some(m) => match obs.safe_to_lose(m.id, true) {
                Err(reason) => Step::Wait(reason),
                Ok(()) => match (m.leader, obs.healthy_follower(m.id)) {
                    (true, Some(to)) => Step::MoveLeader {
                        from: m.id,
                        from_ordinal: m.ordinal,
                        to: to.id,
                    },
                    _ => Step::RemoveMember { id: m.id, ordinal },
                },
            },
            None if obs.replicas > ordinal => Step::SetReplicas(ordinal),
            None if obs.pod(ordinal).is_some() => Step::Wait(WaitReason::PodNotReady { ordinal }),
            None => Step::DeleteVolume { ordinal },
        },
        // A restart onto the current template: a new image (upgrade), a
        // reissued certificate, or any other template change. The member
        // must be back in service (healthy, Ready, caught up) before the
        // operation ends and the next member may go.
        OperationKind::UpgradeMember
        | OperationKind::RenewCertificate
        | OperationKind::RestartMember => match member {
            None => Step::Finish(pinned),
            Some(m) => {
                let restarted = match pinned.kind {
                    OperationKind::RestartMember => {
                        if obs.update_revision.is_none() {
                            // The template changed again: wait for its
                            // revision before deciding anything.
                            return Step::Wait(WaitReason::TemplatePending);
                        }
                        obs.on_current_template(ordinal)
                    }
                    // The pod runs the new image and certificate.
                    _ => {
                        obs.has_current_certificate(ordinal)
                            && obs
                                .pod(ordinal)
                                .is_some_and(|p| p.version.is_none_or(|v| v == obs.desired_version))
                    }
                };
                if restarted {
                    let done = obs.back_in_service(m)
                        && (pinned.kind == OperationKind::RestartMember
                            || obs.runs_desired_version(m));
                    return if done {
                        Step::Finish(pinned)
                    } else if pinned.kind == OperationKind::UpgradeMember {
                        Step::Wait(WaitReason::UpgradeInProgress { ordinal })
                    } else {
                        Step::Wait(WaitReason::RestartInProgress { ordinal })
                    };
                }
                // Every member healthy before a restart; the restarted one
                // may be down only while all others serve: healthy in etcd,
                // and Ready (the client Service routes to them).
                if let Some(sick) = obs
                    .voters()
                    .into_iter()
                    .find(|v| !v.healthy && v.id != m.id)
                {
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
        },
        OperationKind::RecoverQuorum => {
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
        // Handled before etcd's view is required (see the top).
        OperationKind::RestoreFromBackup => continue_restore(obs, pinned),
        OperationKind::ReplaceMember => {
            let lost = obs.pod(ordinal).is_some_and(|p| p.data_lost);
            match member {
                // The stale member (its data is gone) is removed first...
                Some(m) if m.started && !m.learner && lost => match obs.safe_to_lose(m.id, true) {
                    Ok(()) => Step::RemoveMember { id: m.id, ordinal },
                    Err(reason) => Step::Wait(reason),
                },
                // ...then re-added as a learner, and the pod restarts empty.
                None => Step::AddLearner { ordinal },
                Some(m) if m.learner && !m.started && lost => Step::RestartPod { ordinal },
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V35: EtcdVersion = EtcdVersion::new(3, 5, 16);
    const V34: EtcdVersion = EtcdVersion::new(3, 4, 23);

    fn member(ordinal: i32) -> ObservedMember {
        ObservedMember {
            id: 100 + ordinal as u64,
            ordinal,
            learner: false,
            started: true,
            healthy: true,
            reachable: true,
            leader: ordinal == 0,
            raft_index: 1000,
            version: Some(V35),
        }
    }

    fn pod(ordinal: i32) -> ObservedPod {
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
        }
    }

    fn cluster(size: i32, desired: i32) -> Observation {
        Observation {
            desired_size: desired,
            desired_version: V35,
            members: Some((0..size).map(member).collect()),
            pods: (0..size).map(pod).collect(),
            replicas: size,
            pinned: None,
            space_alarm: false,
            recovery_allowed: false,
            restore_allowed: false,
            desired_tls_serial: None,
            update_revision: Some("rev-1".to_owned()),
        }
    }

    fn begin(kind: OperationKind, ordinal: i32) -> Step {
        Step::Begin(Pinned { kind, ordinal })
    }

    #[test]
    fn converged_clusters_of_every_size_do_nothing() {
        for n in 1..=9 {
            assert_eq!(next_step(&cluster(n, n)), Step::Converged, "size {n}");
        }
    }

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
    fn a_spec_edit_during_an_operation_waits_for_it() {
        // Scale-up 3 -> 5 in flight at its learner step; the spec now asks
        // for 3 again. The pinned step is finished first.
        let mut obs = cluster(3, 3);
        let mut learner = member(3);
        learner.learner = true;
        learner.leader = false;
        learner.raft_index = 1000;
        obs.members.as_mut().unwrap().push(learner);
        obs.replicas = 4;
        obs.pinned = Some(Pinned {
            kind: OperationKind::AddLearner,
            ordinal: 3,
        });
        assert_eq!(
            next_step(&obs),
            Step::Promote {
                id: 103,
                ordinal: 3
            }
        );
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
    fn upgrades_go_followers_first_and_the_leader_last() {
        let mut obs = cluster(3, 3);
        obs.desired_version = V35;
        for m in obs.members.as_mut().unwrap() {
            m.version = Some(V34);
        }
        for p in &mut obs.pods {
            p.version = Some(V34);
        }
        assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
        for i in [1, 2] {
            obs.members.as_mut().unwrap()[i].version = Some(V35);
            obs.pods[i].version = Some(V35);
        }
        assert_eq!(
            next_step(&obs),
            begin(OperationKind::UpgradeMember, 0),
            "the leader last"
        );

        obs.pinned = Some(Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: 0,
        });
        // Equally caught-up followers: the lowest ordinal takes over.
        assert_eq!(
            next_step(&obs),
            Step::MoveLeader {
                from: 100,
                from_ordinal: 0,
                to: 101
            }
        );
    }

    #[test]
    fn an_upgrade_restarts_one_member_and_waits_for_the_new_version() {
        let mut obs = cluster(3, 3);
        for m in obs.members.as_mut().unwrap() {
            m.version = Some(V34);
        }
        for p in &mut obs.pods {
            p.version = Some(V34);
        }
        let pinned = Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: 2,
        };
        obs.pinned = Some(pinned);
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
        obs.members.as_mut().unwrap()[2].healthy = false;
        obs.pods[2].version = Some(V35);
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::UpgradeInProgress { ordinal: 2 })
        );
        obs.members.as_mut().unwrap()[2].healthy = true;
        obs.members.as_mut().unwrap()[2].version = Some(V35);
        assert_eq!(next_step(&obs), Step::Finish(pinned));
    }

    #[test]
    fn a_reissued_certificate_restarts_members_one_at_a_time_leader_last() {
        let mut obs = cluster(3, 3);
        obs.desired_tls_serial = Some("new".to_owned());
        for p in &mut obs.pods {
            p.tls_serial = Some("old".to_owned());
        }
        // Member 0 leads (see `member`): followers first, highest first.
        assert_eq!(next_step(&obs), begin(OperationKind::RenewCertificate, 2));
        let pinned = Pinned {
            kind: OperationKind::RenewCertificate,
            ordinal: 2,
        };
        obs.pinned = Some(pinned);
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
        // Restarted onto the new certificate, not serving yet: wait.
        obs.pods[2].tls_serial = Some("new".to_owned());
        obs.members.as_mut().unwrap()[2].healthy = false;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::RestartInProgress { ordinal: 2 })
        );
        obs.members.as_mut().unwrap()[2].healthy = true;
        assert_eq!(next_step(&obs), Step::Finish(pinned));
        obs.pinned = None;
        assert_eq!(next_step(&obs), begin(OperationKind::RenewCertificate, 1));
        obs.pods[1].tls_serial = Some("new".to_owned());
        assert_eq!(next_step(&obs), begin(OperationKind::RenewCertificate, 0));
        // The leader hands leadership over before its restart.
        obs.pinned = Some(Pinned {
            kind: OperationKind::RenewCertificate,
            ordinal: 0,
        });
        assert!(
            matches!(
                next_step(&obs),
                Step::MoveLeader {
                    from_ordinal: 0,
                    ..
                }
            ),
            "{:?}",
            next_step(&obs)
        );
        obs.pinned = None;
        obs.pods[0].tls_serial = Some("new".to_owned());
        assert_eq!(next_step(&obs), Step::Converged);
    }

    #[test]
    fn a_template_change_restarts_members_one_at_a_time_leader_last_each_back_in_service() {
        let mut obs = cluster(3, 3);
        obs.update_revision = Some("rev-2".to_owned());
        // Member 0 leads: followers first, highest first.
        assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 2));
        let pinned = Pinned {
            kind: OperationKind::RestartMember,
            ordinal: 2,
        };
        obs.pinned = Some(pinned);
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
        // Restarted onto the new template: healthy in etcd is not enough;
        // its pod must be Ready and its log caught up with the leader's.
        obs.pods[2].revision = Some("rev-2".to_owned());
        obs.pods[2].ready = false;
        let waiting = Step::Wait(WaitReason::RestartInProgress { ordinal: 2 });
        assert_eq!(next_step(&obs), waiting);
        obs.pods[2].ready = true;
        obs.members.as_mut().unwrap()[0].raft_index = 1000 + CAUGHT_UP_ENTRIES + 1;
        assert_eq!(next_step(&obs), waiting);
        obs.members.as_mut().unwrap()[2].raft_index = 1000 + CAUGHT_UP_ENTRIES;
        assert_eq!(next_step(&obs), Step::Finish(pinned));
        obs.pinned = None;
        assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 1));
        // A member that does not come back stops the rollout where it is.
        obs.pinned = Some(Pinned {
            kind: OperationKind::RestartMember,
            ordinal: 1,
        });
        obs.pods[1].revision = Some("rev-2".to_owned());
        obs.pods[1].ready = false;
        obs.members.as_mut().unwrap()[1].healthy = false;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::RestartInProgress { ordinal: 1 })
        );
        obs.pods[1].ready = true;
        obs.members.as_mut().unwrap()[1].healthy = true;
        obs.members.as_mut().unwrap()[1].raft_index = 1000 + CAUGHT_UP_ENTRIES;
        obs.pinned = None;
        // The leader hands leadership over before its restart.
        assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 0));
        obs.pinned = Some(Pinned {
            kind: OperationKind::RestartMember,
            ordinal: 0,
        });
        assert!(
            matches!(
                next_step(&obs),
                Step::MoveLeader {
                    from_ordinal: 0,
                    ..
                }
            ),
            "{:?}",
            next_step(&obs)
        );
        // The template changed again meanwhile: wait for its revision.
        obs.update_revision = None;
        assert_eq!(next_step(&obs), Step::Wait(WaitReason::TemplatePending));
        obs.pinned = None;
        assert_eq!(
            next_step(&obs),
            Step::Converged,
            "nothing restarts while the target revision is unknown"
        );
        obs.update_revision = Some("rev-2".to_owned());
        obs.pods[0].revision = Some("rev-2".to_owned());
        assert_eq!(next_step(&obs), Step::Converged);
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
    fn no_restart_while_another_member_pod_is_not_ready() {
        let mut obs = cluster(3, 3);
        obs.update_revision = Some("rev-2".to_owned());
        obs.pinned = Some(Pinned {
            kind: OperationKind::RestartMember,
            ordinal: 2,
        });
        // etcd says member 1 is healthy, but its pod is not Ready: clients
        // cannot reach it, so restarting member 2 now would leave one.
        obs.pods[1].ready = false;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::PodNotReady { ordinal: 1 })
        );
        obs.pods[1].ready = true;
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    }

    #[test]
    fn no_template_restart_while_a_member_is_unhealthy() {
        let mut obs = cluster(3, 3);
        obs.update_revision = Some("rev-2".to_owned());
        obs.members.as_mut().unwrap()[1].healthy = false;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
        );
    }

    #[test]
    fn an_image_tag_naming_another_patch_level_than_the_binary_does_not_loop() {
        // The pod runs the image the spec names (3.5.17), the binary in it
        // reports 3.5.16: restarting it again could never change that.
        let mut obs = cluster(3, 3);
        obs.desired_version = EtcdVersion::new(3, 5, 17);
        for p in &mut obs.pods {
            p.version = Some(EtcdVersion::new(3, 5, 17));
        }
        assert_eq!(next_step(&obs), Step::Converged);
        let pinned = Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: 1,
        };
        obs.pinned = Some(pinned);
        assert_eq!(next_step(&obs), Step::Finish(pinned));
        // A pod still on the old image is outdated whatever etcd reports.
        obs.pinned = None;
        obs.pods[2].version = Some(V35);
        assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
    }

    #[test]
    fn an_upgrade_restart_waits_while_another_member_is_down() {
        let mut obs = cluster(3, 3);
        for m in obs.members.as_mut().unwrap() {
            m.version = Some(V34);
        }
        for p in &mut obs.pods {
            p.version = Some(V34);
        }
        obs.members.as_mut().unwrap()[1].healthy = false;
        obs.pinned = Some(Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: 2,
        });
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
        );
    }

    #[test]
    fn a_lost_volume_is_replaced_remove_add_restart_promote() {
        let mut obs = cluster(3, 3);
        obs.members.as_mut().unwrap()[1].healthy = false;
        obs.pods[1].ready = false;
        obs.pods[1].data_lost = true;
        let pinned = Pinned {
            kind: OperationKind::ReplaceMember,
            ordinal: 1,
        };
        assert_eq!(next_step(&obs), Step::Begin(pinned));
        obs.pinned = Some(pinned);
        assert_eq!(
            next_step(&obs),
            Step::RemoveMember {
                id: 101,
                ordinal: 1
            }
        );
        obs.members.as_mut().unwrap().remove(1);
        assert_eq!(next_step(&obs), Step::AddLearner { ordinal: 1 });
        let mut learner = member(1);
        learner.id = 201;
        learner.learner = true;
        learner.started = false;
        learner.healthy = false;
        learner.leader = false;
        obs.members.as_mut().unwrap().insert(1, learner);
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
        obs.pods[1].data_lost = false;
        let m = &mut obs.members.as_mut().unwrap()[1];
        m.started = true;
        m.healthy = true;
        m.raft_index = 1000;
        assert_eq!(
            next_step(&obs),
            Step::Promote {
                id: 201,
                ordinal: 1
            }
        );
        obs.members.as_mut().unwrap()[1].learner = false;
        assert_eq!(next_step(&obs), Step::Finish(pinned));
    }

    #[test]
    fn a_lost_volume_is_not_replaced_when_quorum_would_break() {
        let mut obs = cluster(3, 3);
        for i in [1, 2] {
            obs.members.as_mut().unwrap()[i].healthy = false;
        }
        obs.pods[1].data_lost = true;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::WouldBreakQuorum {
                healthy: 1,
                needed: 2
            })
        );
    }

    /// Every cluster of 1..=9 members where each member is a healthy voter,
    /// an unhealthy voter, a healthy learner or an unhealthy learner, for
    /// every desired size, fresh and with each kind of operation pinned on
    /// every ordinal: no step the planner chooses may break quorum, start a
    /// second operation, remove or restart a leader, or promote a learner
    /// that has not caught up.
    #[test]
    fn no_step_breaks_the_rules_for_any_mix_of_member_states() {
        const KINDS: [OperationKind; 5] = [
            OperationKind::AddLearner,
            OperationKind::PromoteLearner,
            OperationKind::RemoveMember,
            OperationKind::UpgradeMember,
            OperationKind::ReplaceMember,
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
                if !replacing_lost_volume {
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

    /// Members 1 and 2 of 3 gone for good: 0 answers but has no leader.
    fn quorum_lost_cluster() -> Observation {
        let mut obs = cluster(3, 3);
        for m in obs.members.as_mut().unwrap() {
            m.healthy = false;
            m.leader = false;
            m.reachable = m.ordinal == 0;
        }
        for p in &mut obs.pods {
            p.ready = false;
        }
        obs
    }

    #[test]
    fn quorum_loss_is_reported_and_only_a_policy_recovers() {
        let mut obs = quorum_lost_cluster();
        let lost = Step::Wait(WaitReason::QuorumLost {
            reachable: 1,
            needed: 2,
        });
        assert_eq!(next_step(&obs), lost);
        obs.desired_size = 1;
        assert_eq!(next_step(&obs), lost, "not even a scale-down");
        obs.recovery_allowed = true;
        assert_eq!(next_step(&obs), begin(OperationKind::RecoverQuorum, 0));
        // The survivor is the one with the most of the log.
        let members = obs.members.as_mut().unwrap();
        members[2].reachable = true;
        members[2].raft_index = 2000;
        obs.members.as_mut().unwrap()[0].reachable = false;
        assert_eq!(next_step(&obs), begin(OperationKind::RecoverQuorum, 2));
    }

    #[test]
    fn a_restore_from_backup_restarts_every_member_once_then_waits_for_all_to_serve() {
        let mut obs = quorum_lost_cluster();
        obs.restore_allowed = true;
        assert_eq!(next_step(&obs), begin(OperationKind::RestoreFromBackup, 0));
        // Even when no member answers at all.
        obs.members = None;
        assert_eq!(next_step(&obs), begin(OperationKind::RestoreFromBackup, 0));

        let pinned = Pinned {
            kind: OperationKind::RestoreFromBackup,
            ordinal: 0,
        };
        obs.pinned = Some(pinned);
        obs.restore_allowed = false;
        // Pods that ran before the restore restart, lowest first; a pod
        // still initialising (its restore steps running) is left alone.
        obs.pods[0].init_done = false;
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
        obs.pods[1].init_done = false;
        obs.pods[2].init_done = false;
        obs.pods[2].init_refused = true;
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
        let waiting = Step::Wait(WaitReason::RestoreInProgress);
        obs.pods[2].init_refused = false;
        assert_eq!(next_step(&obs), waiting);

        // The restored members come up as the new cluster.
        for p in &mut obs.pods {
            p.init_done = true;
            p.restored = true;
            p.ready = true;
        }
        let mut members: Vec<ObservedMember> = (0..3).map(member).collect();
        members[2].healthy = false;
        obs.members = Some(members);
        assert_eq!(next_step(&obs), waiting, "one member does not serve yet");
        obs.members.as_mut().unwrap()[2].healthy = true;
        assert_eq!(next_step(&obs), Step::Finish(pinned));
        // A member still running old data (not restored) keeps it open.
        obs.pods[1].restored = false;
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 1 });
    }

    #[test]
    fn an_election_is_not_quorum_loss() {
        // Nobody follows a live leader yet, but every voter answers.
        let mut obs = quorum_lost_cluster();
        for m in obs.members.as_mut().unwrap() {
            m.reachable = true;
        }
        obs.recovery_allowed = true;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::MemberUnhealthy { ordinal: 0 })
        );
    }

    #[test]
    fn a_recovery_restarts_the_survivor_alone_then_once_more_without_the_flag() {
        let mut obs = quorum_lost_cluster();
        let pinned = Pinned {
            kind: OperationKind::RecoverQuorum,
            ordinal: 0,
        };
        obs.pinned = Some(pinned);
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 0 });
        // The new pod is starting: never deleted again meanwhile.
        obs.pods[0].init_done = false;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::RecoveryInProgress { ordinal: 0 })
        );
        obs.pods[0].init_done = true;
        obs.pods[0].forced_new_cluster = true;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::RecoveryInProgress { ordinal: 0 })
        );
        // etcd lists the survivor alone, leading itself.
        let mut survivor = obs.members.as_ref().unwrap()[0].clone();
        survivor.healthy = true;
        survivor.leader = true;
        obs.members = Some(vec![survivor]);
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 0 });
        obs.pods[0].forced_new_cluster = false;
        assert_eq!(next_step(&obs), Step::Finish(pinned));
        // Then it grows back, re-adding the lost ordinals.
        obs.pinned = None;
        assert_eq!(next_step(&obs), begin(OperationKind::AddLearner, 1));
    }

    #[test]
    fn after_a_recovery_from_a_higher_member_the_lower_ordinals_are_re_added() {
        let mut obs = cluster(3, 3);
        let mut survivor = member(2);
        survivor.leader = true;
        obs.members = Some(vec![survivor]);
        assert_eq!(next_step(&obs), begin(OperationKind::AddLearner, 0));
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
    fn an_unreachable_cluster_gets_no_step() {
        let mut obs = cluster(3, 5);
        obs.members = None;
        assert_eq!(next_step(&obs), Step::Wait(WaitReason::EtcdUnreachable));
        obs.pinned = Some(Pinned {
            kind: OperationKind::AddLearner,
            ordinal: 3,
        });
        assert_eq!(next_step(&obs), Step::Wait(WaitReason::EtcdUnreachable));
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

    #[test]
    fn a_hand_edited_statefulset_is_realigned_to_membership() {
        let mut obs = cluster(3, 3);
        obs.replicas = 1;
        assert_eq!(next_step(&obs), Step::SetReplicas(3));
    }

    #[test]
    fn a_single_member_cluster_can_be_upgraded() {
        let mut obs = cluster(1, 1);
        obs.members.as_mut().unwrap()[0].version = Some(V34);
        obs.pods[0].version = Some(V34);
        assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 0));
        obs.pinned = Some(Pinned {
            kind: OperationKind::UpgradeMember,
            ordinal: 0,
        });
        assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 0 });
    }

    #[test]
    fn a_full_backend_is_reclaimed_before_anything_else() {
        let mut obs = cluster(3, 5);
        obs.space_alarm = true;
        assert_eq!(next_step(&obs), Step::ReclaimSpace);
        obs.members = None;
        assert_eq!(
            next_step(&obs),
            Step::Wait(WaitReason::EtcdUnreachable),
            "not without quorum"
        );
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        let table = [
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (5, 3),
            (6, 4),
            (7, 4),
            (8, 5),
            (9, 5),
        ];
        for (voters, expected) in table {
            assert_eq!(quorum(voters), expected, "quorum of {voters}");
        }
    }
}
