//! The status after a pass that got as far as a plan: the Available, Progressing and Degraded conditions, the
//! phase, READY, the running version, the members and the leader.

use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::{
    DistributedKVStatus, MemberStatus, OperationKind, Phase, RolledBack, RolloutStatus, RunningSpec,
};
use dkv_api::{DistributedKV, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;

use super::faults::{
    backup_failed_message, change_pending, corrupt_message, expected_down, node_lost_message,
    not_ready_detail, pod_fault, rollout_pending, volume_pending,
};
use super::messages::operation_reason;
use super::{StatusInputs, Want, serving_endpoints, set_condition, with_backups};
use crate::cluster::backups::restore::Replay;
use crate::cluster::dereference::formed_before;
use crate::cluster::lifecycle::hibernation::State as HibernationState;
use crate::cluster::membership::etcd35_log;
use crate::cluster::membership::words;
use crate::cluster::membership::{ObservedMember, Step, WaitReason, quorum};
use crate::cluster::plan::update_revision;
use crate::parts::naming;

/// The status after a successful pass.
pub(super) fn compute(
    dkv: &DistributedKV,
    obs: &StatusInputs<'_>,
    now: &Time,
) -> DistributedKVStatus {
    let old = dkv.status.clone().unwrap_or_default();
    let replicas = obs
        .statefulset
        .and_then(|s| s.status.as_ref())
        .map_or(0, |s| s.replicas);
    let tally = Tally::of(dkv, obs, replicas);
    let rolled_back = rolled_back(dkv, obs, now);
    let available = available(obs, &tally);
    let progressing = progressing_stopped(obs, rolled_back.as_ref())
        .or_else(|| progressing_moving(obs, &tally))
        .unwrap_or_else(|| Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::CONVERGED,
            message: "the cluster matches its spec".to_owned(),
        });
    let degraded = degraded(obs, &tally, rolled_back.as_ref(), now);
    let phase = phase(obs, &tally, &degraded);
    let rollout = rollout(obs, &tally, &progressing, rolled_back);

    let recorded = i32::try_from(obs.plan.record.members.len()).unwrap_or(tally.members);
    let (available, progressing, degraded, phase) = hibernating(
        obs,
        [available, progressing, degraded],
        phase,
        tally.ready,
        recorded,
    );

    let generation = dkv.meta().generation;
    let mut conditions = old.conditions.clone();
    for want in [available, progressing, degraded] {
        set_condition(&mut conditions, want, generation, now);
    }

    DistributedKVStatus {
        observed_generation: generation,
        phase: Some(phase),
        replicas,
        ready_replicas: tally.ready,
        selector: Some(labels::selector_string(&obs.cluster.name)),
        current_version: current_version(obs, &tally, &old),
        members: member_statuses(obs, &old),
        leader: leader(obs, &old),
        cluster_id: obs
            .members
            .into_iter()
            .flatten()
            .find(|m| m.cluster_id != 0)
            .map(|m| format!("{:x}", m.cluster_id))
            .or_else(|| old.cluster_id.clone()),
        operation: obs.operation.clone(),
        conditions,
        rollout,
        ..with_backups(old, obs.backups)
    }
}

/// The counts the conditions are judged by, and whether the cluster has
/// formed.
struct Tally<'a> {
    /// etcd's voting members as observed this pass (empty: etcd was not
    /// asked, or did not answer).
    voters: Vec<&'a ObservedMember>,
    /// How many members there are: etcd's voters, or the plan's replicas
    /// before etcd can be asked.
    members: i32,
    /// How many of them are ready.
    ready: i32,
    quorum: i32,
    /// How many distinct addresses the client Service routes to.
    serving: i32,
    /// Whether the cluster has formed (every member was ready once).
    formed: bool,
    /// The recorded changes still to replay after a point-in-time restore.
    replaying: Option<&'a Replay>,
}

impl<'a> Tally<'a> {
    fn of(dkv: &DistributedKV, obs: &StatusInputs<'a>, replicas: i32) -> Self {
        let pod_ready = |ordinal: i32| {
            obs.pods
                .iter()
                .any(|p| p.view.ordinal == ordinal && p.view.ready)
        };
        // A member is ready when its pod is Ready (so the client Service
        // routes to it) and, once etcd can be asked, etcd reports it a
        // healthy voter. Without etcd's view (not formed yet, or
        // unreachable), pod readiness — which is etcd's /health — stands
        // alone.
        let voters: Vec<&ObservedMember> = obs
            .members
            .into_iter()
            .flatten()
            .filter(|m| !m.learner)
            .collect();
        let (members, ready) = if voters.is_empty() {
            let ready_pods = obs.pods.iter().filter(|p| p.view.ready).count();
            (
                obs.plan.replicas,
                i32::try_from(ready_pods).unwrap_or(i32::MAX),
            )
        } else {
            (
                i32::try_from(voters.len()).unwrap_or(i32::MAX),
                i32::try_from(
                    voters
                        .iter()
                        .filter(|m| m.healthy && pod_ready(m.ordinal))
                        .count(),
                )
                .unwrap_or(0),
            )
        };
        let complete = obs.statefulset.is_some()
            && ready >= members
            && (replicas == members || !voters.is_empty());
        // A cluster has formed once every member was ready at the same
        // time; after that, fewer ready members is a fault, not creation
        // progress. The record of it is the Available condition: once it
        // was QuorumHealthy, its reason stays QuorumHealthy or QuorumLost.
        // (The phase cannot tell: it is also Degraded for a spec problem
        // during creation.)
        //
        // The membership record knows too: once every member has run, the
        // record says the cluster exists. It stands in only for a status
        // that has no record of its own (a status written anew): while
        // Available still says Creating, members that have started but are
        // not Ready yet are a cluster forming, not a fault.
        let status_is_new = !dkv
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == types::AVAILABLE);
        let formed = complete || formed_before(dkv) || (!obs.plan.creating && status_is_new);
        Tally {
            voters,
            members,
            ready,
            quorum: quorum(members),
            serving: serving_endpoints(obs.client_endpoints),
            formed,
            replaying: obs.plan.replay_pending(),
        }
    }
}

/// Available is a promise to clients: quorum is healthy *and* reachable
/// through the client Service, so a client started now gets answers.
fn available(obs: &StatusInputs<'_>, t: &Tally<'_>) -> Want {
    let Tally {
        members,
        ready,
        quorum,
        serving,
        formed,
        ..
    } = *t;
    let client_service = naming::client_service(&obs.cluster.name);
    if let Some(replay) = t.replaying {
        Want {
            type_: types::AVAILABLE,
            status: false,
            reason: reasons::RESTORING,
            message: format!(
                "{ready}/{members} members ready; clients are let in (Service {client_service}) once the changes {} recorded are replayed",
                describe_source(replay)
            ),
        }
    } else if ready >= quorum && serving >= quorum && obs.statefulset.is_some() {
        let serves = format!(
            "{ready}/{members} members ready, {serving} serving through Service {client_service}; quorum is {quorum}"
        );
        match obs.cluster.standby.as_ref().filter(|_| {
            crate::cluster::backups::standby::read_only(obs.backups.standby.as_ref(), obs.cluster)
        }) {
            Some(standby) => Want {
                type_: types::AVAILABLE,
                status: true,
                reason: reasons::STANDBY,
                message: format!(
                    "{serves}; a standby of {}: reads only until promoted",
                    standby.describe()
                ),
            },
            None => Want {
                type_: types::AVAILABLE,
                status: true,
                reason: reasons::QUORUM_HEALTHY,
                message: serves,
            },
        }
    } else if ready >= quorum && obs.statefulset.is_some() {
        Want {
            type_: types::AVAILABLE,
            status: false,
            reason: if formed {
                reasons::ENDPOINTS_NOT_READY
            } else {
                reasons::CREATING
            },
            message: format!(
                "{ready}/{members} members ready, but Service {client_service} routes to {serving}; quorum needs {quorum}"
            ),
        }
    } else {
        Want {
            type_: types::AVAILABLE,
            status: false,
            reason: if formed {
                reasons::QUORUM_LOST
            } else {
                reasons::CREATING
            },
            message: format!("{ready}/{members} members ready; quorum needs {quorum}"),
        }
    }
}

/// The rollback in effect, or the one this pass decides on.
fn rolled_back(dkv: &DistributedKV, obs: &StatusInputs<'_>, now: &Time) -> Option<RolledBack> {
    obs.cluster.rolled_back.clone().or_else(|| {
        let stalled = obs.stalled.filter(|s| s.roll_back)?;
        Some(RolledBack {
            generation: dkv.meta().generation?,
            pod: stalled.pod.clone(),
            reason: stalled.why.clone(),
            at: now.clone(),
        })
    })
}

/// Progressing when the operator holds back from changing the cluster: a
/// pause, a rollback, a missed deadline, a downgrade etcd refused.
fn progressing_stopped(obs: &StatusInputs<'_>, rolled_back: Option<&RolledBack>) -> Option<Want> {
    let want = if obs.cluster.paused {
        Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::PAUSED,
            message: format!("{} is set: no changes are made", labels::RECONCILE_PAUSED),
        }
    } else if let Some(rolled_back) = rolled_back {
        Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::ROLLED_BACK,
            message: rolled_back_message(obs, rolled_back),
        }
    } else if let Some(stalled) = obs.stalled {
        Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::PROGRESS_DEADLINE_EXCEEDED,
            message: format!(
                "pod {} is not Ready and healthy in etcd {}s after it restarted onto the new spec (spec.rollout.progressDeadline: {}s): {}; the rollout stops there (spec.rollout.onFailure: Pause). Fix the spec to start a new rollout, or set spec.rollout.onFailure: Rollback",
                stalled.pod,
                stalled.waited.as_secs(),
                obs.cluster.rollout.deadline.as_secs(),
                stalled.why
            ),
        }
    } else if let Step::Wait(WaitReason::DowngradeRefused { message }) = &obs.plan.step {
        Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::DOWNGRADE_REFUSED,
            message: format!(
                "etcd refuses to downgrade to {}: {message}; no member was touched. Set the image back to the version the members run, or fix what etcd names",
                obs.cluster.version
            ),
        }
    } else {
        return None;
    };
    Some(want)
}

/// Progressing while the cluster moves towards its spec (`None`: it
/// matches it).
fn progressing_moving(obs: &StatusInputs<'_>, t: &Tally<'_>) -> Option<Want> {
    let Tally {
        members,
        ready,
        formed,
        ..
    } = *t;
    let want = if let Step::Wait(reason @ WaitReason::SnapshotBefore37(_)) = &obs.plan.step {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::WAITING_FOR_SNAPSHOT,
            message: words::wait(&obs.cluster.name, reason),
        }
    } else if let Some(step) = downgrade_step_message(obs) {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::DOWNGRADING,
            message: step,
        }
    } else if let Some(op) = &obs.operation {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: if op.kind == OperationKind::UpgradeMember && downgrading(obs) {
                reasons::DOWNGRADING
            } else {
                operation_reason(op.kind)
            },
            message: match words::step(&obs.cluster.name, &obs.plan.step) {
                Some(step) => format!("{}; {step}", op.kind.describe(&op.target)),
                None => op.kind.describe(&op.target),
            },
        }
    } else if let (true, Some(replay)) = (formed, t.replaying) {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::RESTORING,
            message: format!(
                "every member started from the base snapshot; replaying the changes {} recorded{}",
                describe_source(replay),
                match (replay.until_revision, replay.until_time) {
                    (Some(revision), _) => format!(" up to its revision {revision}"),
                    (None, Some(time)) => format!(" up to {time}"),
                    (None, None) => String::new(),
                }
            ),
        }
    } else if let (false, Some(source)) = (formed, &obs.plan.restore) {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::RESTORING,
            message: format!(
                "restoring {members} members from {}; {ready}/{members} ready",
                source.backup.as_ref().map_or_else(
                    || source.uri.clone(),
                    |b| format!("backup {b} ({})", source.uri)
                )
            ),
        }
    } else if !formed {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::CREATING_CLUSTER,
            message: format!("{ready}/{members} members ready"),
        }
    } else if let (Step::Wait(reason), true) = (&obs.plan.step, change_pending(obs)) {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::WAITING,
            message: words::wait(&obs.cluster.name, reason),
        }
    } else if let (true, Some(size)) = (obs.volumes.below > 0, &obs.volumes.size) {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::EXPANDING_VOLUMES,
            message: format!(
                "{} of {} member volumes have {size}; the others are growing (online, no restart)",
                obs.volumes.total - obs.volumes.below,
                obs.volumes.total
            ),
        }
    } else if let Some(pending) = rollout_pending(obs) {
        // "Converged" is a promise that every member runs the current spec.
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: reasons::ROLLING_OUT,
            message: pending,
        }
    } else {
        return None;
    };
    Some(want)
}

/// Degraded: the first fault found, most urgent first.
fn degraded(
    obs: &StatusInputs<'_>,
    t: &Tally<'_>,
    rolled_back: Option<&RolledBack>,
    now: &Time,
) -> Want {
    let Tally {
        members,
        ready,
        quorum,
        formed,
        ..
    } = *t;
    if obs.plan.step == Step::ReclaimSpace {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::NO_SPACE,
            message: "the etcd backend reached its quota (NOSPACE alarm) and refuses writes; compacting, defragmenting and disarming".to_owned(),
        }
    } else if let (false, Some(why)) = (formed, obs.restore_failure) {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::RESTORE_FAILED,
            message: format!(
                "{why}; no member starts until its restore succeeds (the step is retried with backoff)"
            ),
        }
    } else if let Some(refused) = &obs.volumes.refused {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::VOLUME_EXPANSION_FAILED,
            message: format!(
                "{refused}; set spec.storage.size back to the volumes' size, or allow expansion on the StorageClass"
            ),
        }
    } else if let Some(message) = volume_pending(obs.volumes, now) {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::VOLUME_PENDING,
            message,
        }
    } else if let Some(message) = corrupt_message(obs) {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::MEMBER_CORRUPT,
            message,
        }
    } else if let Some(rolled_back) = rolled_back {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::ROLLED_BACK,
            message: format!(
                "the spec of generation {} does not run: {}",
                rolled_back.generation,
                rolled_back_message(obs, rolled_back)
            ),
        }
    } else if let Some((fault, message)) = pod_fault(obs) {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: fault,
            message,
        }
    } else if formed && ready < quorum {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::QUORUM_LOST,
            message: match &obs.plan.step {
                // Lost for good as far as etcd can tell: say what can be done.
                Step::Wait(lost @ WaitReason::QuorumLost { .. }) => {
                    words::wait(&obs.cluster.name, lost)
                }
                _ => format!(
                    "only {ready}/{members} members ready, quorum needs {quorum}: the cluster cannot serve writes"
                ),
            },
        }
    } else if let Some(message) = node_lost_message(obs) {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::MEMBER_NODE_LOST,
            message,
        }
    } else if formed && ready + i32::from(expected_down(obs, now)) < members {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::MEMBER_UNHEALTHY,
            message: format!(
                "{}/{members} members not ready{}",
                members - ready,
                not_ready_detail(obs)
            ),
        }
    } else if let Some(failed) = &obs.backups.failed {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::BACKUP_FAILED,
            message: backup_failed_message(failed),
        }
    } else if let Some(message) = &obs.backups.continuous_failing {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::CONTINUOUS_BACKUP_FAILING,
            message: message.clone(),
        }
    } else if let Some(message) =
        crate::cluster::backups::standby::not_following(obs.backups.standby.as_ref())
    {
        Want {
            type_: types::DEGRADED,
            status: true,
            reason: reasons::STANDBY_NOT_FOLLOWING,
            message,
        }
    } else {
        Want {
            type_: types::DEGRADED,
            status: false,
            reason: reasons::AS_EXPECTED,
            message: if formed {
                "all members ready".to_owned()
            } else {
                "no fault seen while the cluster forms".to_owned()
            },
        }
    }
}

/// The phase: Degraded for any fault, else what the cluster is doing.
fn phase(obs: &StatusInputs<'_>, t: &Tally<'_>, degraded: &Want) -> Phase {
    if degraded.status {
        Phase::Degraded
    } else if (!t.formed && obs.plan.restore.is_some()) || t.replaying.is_some() {
        Phase::Restoring
    } else if !t.formed {
        Phase::Creating
    } else {
        match obs.operation.as_ref().map(|o| o.kind) {
            Some(
                OperationKind::AddLearner
                | OperationKind::PromoteLearner
                | OperationKind::RemoveMember,
            ) => Phase::Scaling,
            Some(OperationKind::UpgradeMember) => Phase::Upgrading,
            Some(OperationKind::RecoverQuorum | OperationKind::RestoreFromBackup) => {
                Phase::Restoring
            }
            _ => Phase::Running,
        }
    }
}

/// `status.rollout`: the spec that runs on every member now, once the
/// cluster converged on it (what a later rollback returns to; not while a
/// rollback is in effect, the cluster then runs the last good spec
/// already), the rollback in effect and etcd 3.5's log state.
fn rollout(
    obs: &StatusInputs<'_>,
    t: &Tally<'_>,
    progressing: &Want,
    rolled_back: Option<RolledBack>,
) -> Option<RolloutStatus> {
    let update_revision = obs.statefulset.and_then(update_revision);
    let last_good = match (&update_revision, &rolled_back) {
        (Some(revision), None)
            if !progressing.status
                && progressing.reason == reasons::CONVERGED
                && t.ready == t.members =>
        {
            Some(RunningSpec {
                revision: Some(revision.clone()),
                ..obs.cluster.running.clone()
            })
        }
        _ => obs.cluster.last_good.clone(),
    };
    let etcd35_log = etcd35_log::next(&t.voters, obs.cluster.etcd35_log).map(|r| r.to_status());
    (last_good.is_some() || rolled_back.is_some() || etcd35_log.is_some()).then_some(
        RolloutStatus {
            last_good,
            rolled_back,
            etcd35_log,
        },
    )
}

/// The running version: etcd's own report (the version every voter runs)
/// wins; without it, the configured one once every pod runs the current
/// template (updates are OnDelete: pods restart later).
fn current_version(
    obs: &StatusInputs<'_>,
    t: &Tally<'_>,
    old: &DistributedKVStatus,
) -> Option<String> {
    let rolled_out = obs.statefulset.and_then(|s| s.status.as_ref()).is_some()
        && rollout_pending(obs).is_none()
        && t.ready == t.members;
    let reported: Vec<_> = t.voters.iter().filter_map(|m| m.version).collect();
    if !reported.is_empty()
        && reported.len() == t.voters.len()
        && reported.iter().all(|v| *v == reported[0])
    {
        Some(reported[0].to_string())
    } else if rolled_out && t.voters.is_empty() {
        Some(obs.cluster.version.to_string())
    } else {
        old.current_version.clone()
    }
}

/// `status.members`: etcd's members as observed, where each runs. When no
/// member answered this pass, the members are still listed, but none is
/// said to be healthy, since none was seen to be.
fn member_statuses(obs: &StatusInputs<'_>, old: &DistributedKVStatus) -> Vec<MemberStatus> {
    match obs.members {
        Some(members) => members
            .iter()
            .map(|m| {
                placed(
                    obs,
                    m.ordinal,
                    MemberStatus {
                        name: naming::member(&obs.cluster.name, m.ordinal),
                        id: Some(format!("{:x}", m.id)),
                        learner: m.learner,
                        healthy: m.healthy,
                        version: m.version.map(|v| v.to_string()),
                        ..MemberStatus::default()
                    },
                )
            })
            .collect(),
        None => old
            .members
            .iter()
            .map(|m| {
                let status = MemberStatus {
                    healthy: false,
                    ..m.clone()
                };
                match naming::ordinal_of(&obs.cluster.name, &m.name) {
                    Some(ordinal) => placed(obs, ordinal, status),
                    None => status,
                }
            })
            .collect(),
    }
}

/// `status.leader`: the member etcd names leader; the last one seen while
/// no member answers, none while hibernation has stopped them.
fn leader(obs: &StatusInputs<'_>, old: &DistributedKVStatus) -> Option<String> {
    match obs.members {
        Some(members) => members
            .iter()
            .find(|m| m.leader)
            .map(|m| naming::member(&obs.cluster.name, m.ordinal)),
        None if obs.hibernation.stopped() => None,
        None => old.leader.clone(),
    }
}

/// What a rollback did and what the user does next.
fn rolled_back_message(obs: &StatusInputs<'_>, rolled_back: &RolledBack) -> String {
    let target = obs.cluster.last_good.as_ref().map_or_else(
        || "the spec that last ran on every member".to_owned(),
        |good| {
            format!(
                "the spec that last ran on every member (image {}{})",
                good.image,
                good.generation
                    .map(|g| format!(", generation {g}"))
                    .unwrap_or_default()
            )
        },
    );
    let progress = if obs.operation.is_some() || rollout_pending(obs).is_some() {
        "the members are moving back, one at a time, to"
    } else {
        "every member runs"
    };
    format!(
        "pod {} did not become Ready and healthy in etcd within spec.rollout.progressDeadline ({}s) of restarting onto the spec of generation {}: {}. Rolled back: {progress} {target}. The spec stays as written; edit it to start a new rollout",
        rolled_back.pod,
        obs.cluster.rollout.deadline.as_secs(),
        rolled_back.generation,
        rolled_back.reason
    )
}

/// `member` with where its pod runs (node, zone) and since when that node
/// is lost; all three unset when its pod is not placed (not scheduled, or
/// gone).
fn placed(obs: &StatusInputs<'_>, ordinal: i32, member: MemberStatus) -> MemberStatus {
    let placement = obs.placements.iter().find(|p| p.ordinal == ordinal);
    MemberStatus {
        node: placement.and_then(|p| p.node.clone()),
        zone: placement.and_then(|p| p.zone.clone()),
        node_lost_since: obs
            .lost
            .iter()
            .find(|l| l.ordinal == ordinal)
            .map(|l| Time(l.since)),
        ..member
    }
}

/// The conditions and phase as `spec.hibernation` changes them. Members
/// that stop for it, or start again after it, are not lost: no
/// `QuorumLost` or `MemberUnhealthy` (which would also arm a recovery
/// policy), and a stopped cluster is neither available nor degraded.
/// Faults of another kind (a pod that cannot start, say) still show.
fn hibernating(
    obs: &StatusInputs<'_>,
    [available, progressing, degraded]: [Want; 3],
    phase: Phase,
    ready: i32,
    members: i32,
) -> (Want, Want, Want, Phase) {
    let absence = degraded.status
        && [reasons::QUORUM_LOST, reasons::MEMBER_UNHEALTHY].contains(&degraded.reason);
    let calm = |degraded: Want, message: &str| {
        if absence || !degraded.status {
            Want {
                type_: types::DEGRADED,
                status: false,
                reason: reasons::AS_EXPECTED,
                message: message.to_owned(),
            }
        } else {
            degraded
        }
    };
    // A paused cluster says so, whatever hibernation would have done.
    let progressing_or = |want: Want| {
        if obs.cluster.paused {
            Want {
                type_: progressing.type_,
                status: progressing.status,
                reason: progressing.reason,
                message: progressing.message.clone(),
            }
        } else {
            want
        }
    };
    let phase_unless_degraded = |degraded: &Want| {
        if degraded.status {
            Phase::Degraded
        } else {
            Phase::Running
        }
    };
    match obs.hibernation {
        HibernationState::Awake => (available, progressing, degraded, phase),
        HibernationState::Waiting(why) => (
            available,
            progressing_or(Want {
                type_: types::PROGRESSING,
                status: true,
                reason: reasons::HIBERNATING,
                message: format!(
                    "spec.hibernation: the members stop at a consistent point; waiting: {why}"
                ),
            }),
            degraded,
            phase,
        ),
        HibernationState::Stopping { left } => {
            let degraded = calm(degraded, "the members are stopping for hibernation");
            let phase = phase_unless_degraded(&degraded);
            (
                Want {
                    type_: types::AVAILABLE,
                    status: false,
                    reason: reasons::HIBERNATING,
                    message: format!(
                        "the members are stopping for hibernation ({left} still running)"
                    ),
                },
                progressing_or(Want {
                    type_: types::PROGRESSING,
                    status: true,
                    reason: reasons::HIBERNATING,
                    message: format!(
                        "stopping the members gracefully ({left} still running); their volumes, the etcd membership and the cluster ID are kept"
                    ),
                }),
                degraded,
                phase,
            )
        }
        HibernationState::Hibernated => {
            let message = format!(
                "hibernated (spec.hibernation): {members} members stopped, their volumes, the etcd membership and the cluster ID kept; set spec.hibernation: false to wake it"
            );
            (
                Want {
                    type_: types::AVAILABLE,
                    status: false,
                    reason: reasons::HIBERNATED,
                    message: message.clone(),
                },
                progressing_or(Want {
                    type_: types::PROGRESSING,
                    status: false,
                    reason: reasons::HIBERNATED,
                    message: message.clone(),
                }),
                Want {
                    type_: types::DEGRADED,
                    status: false,
                    reason: reasons::HIBERNATED,
                    message,
                },
                Phase::Hibernated,
            )
        }
        HibernationState::Waking => {
            let degraded = calm(degraded, "the members are starting again after hibernation");
            let phase = phase_unless_degraded(&degraded);
            (
                if available.status {
                    available
                } else {
                    Want {
                        type_: types::AVAILABLE,
                        status: false,
                        reason: reasons::WAKING,
                        message: format!(
                            "waking from hibernation: {ready}/{members} members ready"
                        ),
                    }
                },
                progressing_or(Want {
                    type_: types::PROGRESSING,
                    status: true,
                    reason: reasons::WAKING,
                    message: format!(
                        "the members start again on their own volumes: {ready}/{members} ready and healthy"
                    ),
                }),
                degraded,
                phase,
            )
        }
    }
}

/// `namespace/cluster` of a replay's source.
fn describe_source(replay: &Replay) -> String {
    format!("{}/{}", replay.namespace, replay.cluster)
}

/// Whether a voter runs a newer minor line than the spec asks for: the
/// members are being downgraded.
fn downgrading(obs: &StatusInputs<'_>) -> bool {
    let want = obs.cluster.version.minor_line();
    obs.members
        .into_iter()
        .flatten()
        .any(|m| !m.learner && m.version.is_some_and(|v| v.minor_line() > want))
}

/// The Progressing message of a downgrade's etcd-side steps, before any
/// member restarts (and when it is cancelled).
fn downgrade_step_message(obs: &StatusInputs<'_>) -> Option<String> {
    let to = obs.cluster.version;
    match &obs.plan.step {
        Step::EnableDowngrade { .. } => Some(format!(
            "downgrading to {to}: etcd validated it; enabling etcd's downgrade (the cluster version drops to {}.{})",
            to.major, to.minor
        )),
        Step::Wait(WaitReason::DowngradeMigrating) => Some(format!(
            "downgrading to {to}: {}",
            words::wait(&obs.cluster.name, &WaitReason::DowngradeMigrating)
        )),
        Step::CancelDowngrade => Some(format!(
            "the spec asks for {to}: cancelling the downgrade enabled in etcd before members move back up"
        )),
        _ => None,
    }
}
