//! The last step of a reconcile, and the only one that writes status: the
//! cluster's whole status (conditions, phase, READY, members, the printer
//! STATUS) derived purely from what the pass observed ([`Seen`]) and how it
//! ended (an error's [`Fault`]), written to the status subresource only when
//! it differs from what is already there.

use std::collections::BTreeSet;
use std::sync::Arc;

use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::{
    DistributedKVStatus, MemberStatus, Operation, OperationKind, Phase,
};
use dkv_api::{DistributedKV, labels};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::backup_catalogue::{BackupSummary, FailedRun};
use super::context::{Context, publish};
use super::error::{Error, Result};
use super::membership::{ObservedMember, Step, WaitReason, quorum};
use super::naming;
use super::observe_members::MemberPod;
use super::outcome::Fault;
use super::plan::{Plan, update_revision};
use super::validate::ValidatedCluster;
use super::volumes::Volumes;

/// What one pass observed and decided, filled in step by step as the pass
/// goes: status is derived from it whichever step the pass stopped at.
#[derive(Default)]
pub struct Seen {
    /// The spec, once it validated.
    pub cluster: Option<ValidatedCluster>,
    /// The member pods.
    pub pods: Vec<MemberPod>,
    /// etcd's members (`None`: not asked, or no member answered).
    pub members: Option<Vec<ObservedMember>>,
    /// The plan, once made.
    pub plan: Option<Plan>,
    /// The StatefulSet as last read or applied.
    pub statefulset: Option<Arc<StatefulSet>>,
    /// The EndpointSlices of the client Service.
    pub client_endpoints: Vec<Arc<EndpointSlice>>,
    /// The operation pinned once the pass's step is done (the one pinned
    /// before it while the step has not succeeded).
    pub operation: Option<Operation>,
    /// Where the member volumes stand against `spec.storage.size`.
    pub volumes: Option<Volumes>,
}

/// The status of `dkv` after a pass that observed `seen` and, if it failed,
/// showed `fault`. `None` when the pass saw nothing status records and
/// failed with nothing to show (a cluster being deleted, say).
pub fn derive(
    dkv: &DistributedKV,
    seen: &Seen,
    fault: Option<&Fault>,
    backups: &BackupSummary,
    now: &Time,
) -> Option<DistributedKVStatus> {
    let observed = match (&seen.cluster, &seen.plan, &seen.volumes) {
        (Some(cluster), Some(plan), Some(volumes)) => Some(compute(
            dkv,
            &Observation {
                cluster,
                plan,
                statefulset: seen.statefulset.as_deref(),
                members: seen.members.as_deref(),
                pods: &seen.pods,
                client_endpoints: &seen.client_endpoints,
                operation: seen.operation.clone(),
                restore_failure: seen.pods.iter().find_map(|p| p.restore_failure.as_deref()),
                backups,
                volumes,
            },
            now,
        )),
        _ => None,
    };
    match (observed, fault) {
        (Some(status), None) => Some(status),
        (Some(status), Some(fault)) => Some(with_fault(dkv, status, fault, now)),
        // The pass stopped before it could plan: what is known of the
        // running cluster is kept, the fault added.
        (None, Some(Fault::Degraded { reason, message })) => {
            Some(degraded(dkv, reason, message, backups, now))
        }
        (None, Some(Fault::Waiting { reason, message })) => {
            Some(waiting(dkv, reason, message, backups, now))
        }
        (None, None) => None,
    }
}

/// `status`, computed from what the pass observed, with the fault of the
/// error the pass stopped at on top.
fn with_fault(
    dkv: &DistributedKV,
    mut status: DistributedKVStatus,
    fault: &Fault,
    now: &Time,
) -> DistributedKVStatus {
    let generation = dkv.meta().generation;
    match fault {
        Fault::Degraded { reason, message } => {
            let want = Want {
                type_: types::DEGRADED,
                status: true,
                reason,
                message: message.clone(),
            };
            set_condition(&mut status.conditions, want, generation, now);
            status.phase = Some(Phase::Degraded);
        }
        Fault::Waiting { reason, message } => {
            let want = Want {
                type_: types::PROGRESSING,
                status: true,
                reason,
                message: message.clone(),
            };
            set_condition(&mut status.conditions, want, generation, now);
        }
    }
    status
}

/// Everything the status of a healthy pass is computed from.
struct Observation<'a> {
    pub cluster: &'a ValidatedCluster,
    pub plan: &'a Plan,
    pub statefulset: Option<&'a StatefulSet>,
    /// etcd's members as observed this pass (`None`: no member answered).
    pub members: Option<&'a [ObservedMember]>,
    /// The member pods as observed this pass.
    pub pods: &'a [MemberPod],
    /// The EndpointSlices of the client Service.
    pub client_endpoints: &'a [Arc<EndpointSlice>],
    /// The operation pinned after this pass.
    pub operation: Option<Operation>,
    /// Why a member's restore step failed (`spec.bootstrap.restore`).
    pub restore_failure: Option<&'a str>,
    /// What the cluster's backup records say.
    pub backups: &'a BackupSummary,
    /// Where the member volumes stand against `spec.storage.size`.
    pub volumes: &'a Volumes,
}

/// One condition as the operator wants it now.
struct Want {
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
}

/// Whether the cluster's status records that it has formed: its Available
/// condition was once QuorumHealthy, and stays QuorumHealthy, QuorumLost or
/// EndpointsNotReady.
pub fn formed_before(dkv: &DistributedKV) -> bool {
    dkv.status.iter().flat_map(|s| &s.conditions).any(|c| {
        c.type_ == types::AVAILABLE
            && [
                reasons::QUORUM_HEALTHY,
                reasons::QUORUM_LOST,
                reasons::ENDPOINTS_NOT_READY,
            ]
            .contains(&c.reason.as_str())
    })
}

/// How many distinct addresses the client Service routes to: the ready
/// endpoints of its EndpointSlices (an unset `ready` counts as ready, as
/// kube-proxy reads it).
pub fn serving_endpoints(slices: &[Arc<EndpointSlice>]) -> i32 {
    let addresses: BTreeSet<&str> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter().map(String::as_str))
        .collect();
    i32::try_from(addresses.len()).unwrap_or(i32::MAX)
}

/// The status after a successful pass.
fn compute(dkv: &DistributedKV, obs: &Observation<'_>, now: &Time) -> DistributedKVStatus {
    let old = dkv.status.clone().unwrap_or_default();
    let sts_status = obs.statefulset.and_then(|s| s.status.as_ref());
    let replicas = sts_status.map_or(0, |s| s.replicas);
    let pod_ready = |ordinal: i32| {
        obs.pods
            .iter()
            .any(|p| p.view.ordinal == ordinal && p.view.ready)
    };
    // A member is ready when its pod is Ready (so the client Service routes
    // to it) and, once etcd can be asked, etcd reports it a healthy voter.
    // Without etcd's view (not formed yet, or unreachable), pod readiness —
    // which is etcd's /health — stands alone.
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
    let quorum = quorum(members);
    let serving = serving_endpoints(obs.client_endpoints);
    let client_service = naming::client_service(&obs.cluster.name);
    let complete = obs.statefulset.is_some()
        && ready >= members
        && (replicas == members || !voters.is_empty());
    // A cluster has formed once every member was ready at the same time;
    // after that, fewer ready members is a fault, not creation progress.
    // The record of it is the Available condition: once it was
    // QuorumHealthy, its reason stays QuorumHealthy or QuorumLost. (The phase
    // cannot tell: it is also Degraded for a spec problem during creation.)
    let formed_before = formed_before(dkv);
    // The membership record knows too: once every member has run, the
    // record says the cluster exists. It stands in only for a status that
    // has no record of its own (a status written anew): while Available
    // still says Creating, members that have started but are not Ready yet
    // are a cluster forming, not a fault.
    let status_is_new = !dkv
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .any(|c| c.type_ == types::AVAILABLE);
    let formed = complete || formed_before || (!obs.plan.creating && status_is_new);

    // Available is a promise to clients: quorum is healthy *and* reachable
    // through the client Service, so a client started now gets answers.
    let available = if ready >= quorum && serving >= quorum && obs.statefulset.is_some() {
        Want {
            type_: types::AVAILABLE,
            status: true,
            reason: reasons::QUORUM_HEALTHY,
            message: format!(
                "{ready}/{members} members ready, {serving} serving through Service {client_service}; quorum is {quorum}"
            ),
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
    };

    let progressing = if obs.cluster.paused {
        Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::PAUSED,
            message: format!("{} is set: no changes are made", labels::RECONCILE_PAUSED),
        }
    } else if let Some(op) = &obs.operation {
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason: operation_reason(op.kind),
            message: format!(
                "{:?} of {} in progress{}",
                op.kind,
                op.target,
                step_detail(&obs.plan.step)
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
            message: wait_message(&obs.cluster.name, reason),
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
        Want {
            type_: types::PROGRESSING,
            status: false,
            reason: reasons::CONVERGED,
            message: "the cluster matches its spec".to_owned(),
        }
    };

    let degraded = if obs.plan.step == Step::ReclaimSpace {
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
                    wait_message(&obs.cluster.name, lost)
                }
                _ => format!(
                    "only {ready}/{members} members ready, quorum needs {quorum}: the cluster cannot serve writes"
                ),
            },
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
    };

    let phase = if degraded.status {
        Phase::Degraded
    } else if !formed && obs.plan.restore.is_some() {
        Phase::Restoring
    } else if !formed {
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
    };

    // The running version is the configured one only once every pod runs
    // the current template (updates are OnDelete: pods restart later).
    let rolled_out = sts_status.is_some() && rollout_pending(obs).is_none() && ready == members;
    // etcd's own report wins: the version every voter runs.
    let reported: Vec<_> = voters.iter().filter_map(|m| m.version).collect();
    let current_version = if !reported.is_empty()
        && reported.len() == voters.len()
        && reported.iter().all(|v| *v == reported[0])
    {
        Some(reported[0].to_string())
    } else if rolled_out && voters.is_empty() {
        Some(obs.cluster.version.to_string())
    } else {
        old.current_version.clone()
    };
    let member_statuses: Option<Vec<MemberStatus>> = obs.members.map(|members| {
        members
            .iter()
            .map(|m| MemberStatus {
                name: naming::member(&obs.cluster.name, m.ordinal),
                id: Some(format!("{:x}", m.id)),
                learner: m.learner,
                healthy: m.healthy,
                version: m.version.map(|v| v.to_string()),
            })
            .collect()
    });
    let leader = obs
        .members
        .into_iter()
        .flatten()
        .find(|m| m.leader)
        .map(|m| naming::member(&obs.cluster.name, m.ordinal));

    let generation = dkv.meta().generation;
    let mut conditions = old.conditions.clone();
    for want in [available, progressing, degraded] {
        set_condition(&mut conditions, want, generation, now);
    }

    DistributedKVStatus {
        observed_generation: generation,
        phase: Some(phase),
        replicas,
        ready_replicas: ready,
        selector: Some(labels::selector_string(&obs.cluster.name)),
        current_version,
        // No member answered this pass: the members are still listed, but
        // none is said to be healthy, since none was seen to be.
        members: member_statuses.unwrap_or_else(|| {
            old.members
                .iter()
                .map(|m| MemberStatus {
                    healthy: false,
                    ..m.clone()
                })
                .collect()
        }),
        leader: if obs.members.is_some() {
            leader
        } else {
            old.leader.clone()
        },
        operation: obs.operation.clone(),
        conditions,
        ..with_backups(old, obs.backups)
    }
}

/// How long a member's claim may wait for a volume before that is a fault:
/// provisioners of network disks take seconds to tens of seconds.
const VOLUME_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// When the first member claim still within [`VOLUME_GRACE`] leaves it:
/// status must be looked at again then, as nothing else may change.
pub fn volume_grace_ends(volumes: &Volumes) -> Option<jiff::Timestamp> {
    volumes
        .pending
        .iter()
        .filter_map(|c| c.since)
        .map(|since| since + VOLUME_GRACE)
        .filter(|end| *end > jiff::Timestamp::now())
        .min()
}

/// Says which member claims have waited for a volume longer than
/// [`VOLUME_GRACE`].
fn volume_pending(volumes: &Volumes, now: &Time) -> Option<String> {
    let stuck: Vec<String> = volumes
        .pending
        .iter()
        .filter(|c| {
            c.since
                .is_some_and(|since| now.0.duration_since(since) >= VOLUME_GRACE)
        })
        .map(|c| {
            // Stable from pass to pass: status is rewritten only on change.
            format!(
                "{} (StorageClass {}, Pending since {})",
                c.name,
                c.class.as_deref().unwrap_or("(default)"),
                c.since.map_or_else(String::new, |since| since.to_string())
            )
        })
        .collect();
    (!stuck.is_empty()).then(|| {
        format!(
            "no volume was provided for member claim(s) {}: the StorageClass's provisioner does not create volumes (kubectl describe pvc shows its events); those members cannot start",
            stuck.join(", ")
        )
    })
}

/// How long the target of a step that takes a member down (a restart, a new
/// member starting) may be not ready before that is a fault.
const STEP_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// Whether the one voter that is not ready is the target of the operation in
/// flight, within [`STEP_GRACE`] of its start: the step the user asked for,
/// not a fault. A target that does not come back in time is `Degraded`.
fn expected_down(obs: &Observation<'_>, now: &Time) -> bool {
    let Some(op) = &obs.operation else {
        return false;
    };
    let takes_a_member_down = matches!(
        op.kind,
        OperationKind::AddLearner
            | OperationKind::PromoteLearner
            | OperationKind::UpgradeMember
            | OperationKind::RenewCertificate
            | OperationKind::RestartMember
            | OperationKind::ReplaceMember
    );
    let within_grace = now.0.duration_since(op.started_at.0) < STEP_GRACE;
    let Some(target) = naming::ordinal_of(&obs.cluster.name, &op.target) else {
        return false;
    };
    // Only a voter counts towards READY: a learner target is not one.
    let Some(voter) = obs
        .members
        .into_iter()
        .flatten()
        .find(|m| m.ordinal == target && !m.learner)
    else {
        return false;
    };
    let target_ready = voter.healthy
        && obs
            .pods
            .iter()
            .any(|p| p.view.ordinal == target && p.view.ready);
    takes_a_member_down && within_grace && !target_ready
}

/// The first member pod fault someone must act on (an image that cannot be
/// pulled, a crash loop, a pod that cannot be scheduled): its reason, and a
/// message naming the pod and quoting its status.
fn pod_fault(obs: &Observation<'_>) -> Option<(&'static str, String)> {
    let faults: Vec<(&'static str, &str)> = obs
        .pods
        .iter()
        .filter_map(|p| p.problem.as_ref())
        .filter_map(|problem| Some((problem.fault?, problem.message.as_str())))
        .collect();
    let (reason, first) = faults.first()?;
    let more = match faults.len() {
        1 => String::new(),
        n => format!(" (and {} more member pod(s) failing)", n - 1),
    };
    Some((reason, format!("{first}{more}")))
}

/// What is known of the members that are not ready: each pod's problem.
fn not_ready_detail(obs: &Observation<'_>) -> String {
    let problems: Vec<&str> = obs
        .pods
        .iter()
        .filter_map(|p| p.problem.as_ref())
        .map(|p| p.message.as_str())
        .collect();
    if problems.is_empty() {
        String::new()
    } else {
        format!(": {}", problems.join("; "))
    }
}

/// `status` with the backup facts derived from the records.
fn with_backups(status: DistributedKVStatus, backups: &BackupSummary) -> DistributedKVStatus {
    let (last_backup, last_backup_time) = match &backups.last {
        Some((backup, time)) => (Some(backup.clone()), Some(time.clone())),
        None => (None, None),
    };
    DistributedKVStatus {
        last_backup,
        last_backup_time,
        ..status
    }
}

fn backup_failed_message(failed: &FailedRun) -> String {
    format!(
        "the latest backup, {}, failed: {}; the next successful backup clears this",
        failed.name, failed.message
    )
}

/// Whether the spec asks for something the cluster is not yet: a waiting
/// planner is news only then (a converged cluster whose members cannot be
/// seen is not "in progress").
fn change_pending(obs: &Observation<'_>) -> bool {
    let size_differs = i32::try_from(obs.plan.record.members.len()).ok() != Some(obs.cluster.size);
    let version_differs = obs
        .members
        .into_iter()
        .flatten()
        .any(|m| m.version.is_some_and(|v| v != obs.cluster.version));
    size_differs || version_differs || rollout_pending(obs).is_some()
}

/// Members whose pods do not run the StatefulSet's current template yet,
/// as "k of n" text; `None` when every member pod does. Unknown (the
/// StatefulSet's controller has not seen its latest template yet) counts
/// as pending.
fn rollout_pending(obs: &Observation<'_>) -> Option<String> {
    let sts = obs.statefulset?;
    let members = obs.pods.len();
    let Some(revision) = update_revision(sts) else {
        return Some(format!(
            "the members' template changed; 0 of {members} members known to run it yet"
        ));
    };
    let current = obs
        .pods
        .iter()
        .filter(|p| p.view.revision.as_ref() == Some(&revision))
        .count();
    (current < members).then(|| {
        format!("{current} of {members} members run the current template; the others restart one at a time")
    })
}

fn operation_reason(kind: OperationKind) -> &'static str {
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
    }
}

fn step_detail(step: &Step) -> String {
    match step {
        Step::Wait(reason) => format!(": waiting ({reason:?})"),
        Step::Finish(_) | Step::Converged | Step::Begin(_) => String::new(),
        other => format!(": {other:?}"),
    }
}

fn wait_message(cluster: &str, reason: &WaitReason) -> String {
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
        WaitReason::RestoreInProgress => {
            "recreating the cluster from its newest backup: waiting for every member to start from it (old data is moved aside, not deleted)".to_owned()
        }
    }
}

/// The status after a permanent error: Degraded with `reason` and the error,
/// the rest (what is known about the running cluster) kept.
fn degraded(
    dkv: &DistributedKV,
    reason: &'static str,
    message: &str,
    backups: &BackupSummary,
    now: &Time,
) -> DistributedKVStatus {
    let want = Want {
        type_: types::DEGRADED,
        status: true,
        reason,
        message: message.to_owned(),
    };
    let status = with_conditions(dkv, vec![want], backups, now);
    DistributedKVStatus {
        phase: Some(Phase::Degraded),
        selector: Some(labels::selector_string(&dkv.name_any())),
        ..status
    }
}

/// The status while the cluster waits for something outside dkv that is
/// expected to arrive (cert-manager issuing a certificate): Progressing
/// with `reason`, and no longer Degraded by an earlier error.
fn waiting(
    dkv: &DistributedKV,
    reason: &'static str,
    message: &str,
    backups: &BackupSummary,
    now: &Time,
) -> DistributedKVStatus {
    let wants = vec![
        Want {
            type_: types::PROGRESSING,
            status: true,
            reason,
            message: message.to_owned(),
        },
        Want {
            type_: types::DEGRADED,
            status: false,
            reason: reasons::AS_EXPECTED,
            message: message.to_owned(),
        },
    ];
    with_conditions(dkv, wants, backups, now)
}

/// The cluster's status with `wants` set and everything else kept. A
/// status without an `Available` condition yet (the cluster was never
/// created, say for an invalid spec) gets one, False with the reason of the
/// first want: the STATUS column shows that reason, never nothing.
fn with_conditions(
    dkv: &DistributedKV,
    mut wants: Vec<Want>,
    backups: &BackupSummary,
    now: &Time,
) -> DistributedKVStatus {
    let old = dkv.status.clone().unwrap_or_default();
    let generation = dkv.meta().generation;
    let mut conditions = old.conditions.clone();
    if !conditions.iter().any(|c| c.type_ == types::AVAILABLE)
        && let Some(first) = wants.first()
    {
        wants.push(Want {
            type_: types::AVAILABLE,
            status: false,
            reason: first.reason,
            message: format!("no member serves yet: {}", first.message),
        });
    }
    for want in wants {
        set_condition(&mut conditions, want, generation, now);
    }
    DistributedKVStatus {
        observed_generation: generation,
        conditions,
        ..with_backups(old, backups)
    }
}

/// Sets one condition, keeping `lastTransitionTime` when its status did not
/// change (so an unchanged status compares equal and is not rewritten).
fn set_condition(conditions: &mut Vec<Condition>, want: Want, generation: Option<i64>, now: &Time) {
    let status = if want.status { "True" } else { "False" };
    let existing = conditions.iter_mut().find(|c| c.type_ == want.type_);
    let condition = Condition {
        type_: want.type_.to_owned(),
        status: status.to_owned(),
        reason: want.reason.to_owned(),
        message: want.message,
        observed_generation: generation,
        last_transition_time: match &existing {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => now.clone(),
        },
    };
    match existing {
        Some(slot) => *slot = condition,
        None => conditions.push(condition),
    }
}

/// Writes `new` if it differs from the object's status, and publishes an
/// Event for every condition that changed status or reason. Returns whether
/// it wrote.
pub async fn write(dkv: &DistributedKV, new: DistributedKVStatus, ctx: &Context) -> Result<bool> {
    let old = dkv.status.clone().unwrap_or_default();
    if old == new {
        return Ok(false);
    }
    let name = dkv.name_any();
    let api: Api<DistributedKV> =
        Api::namespaced(ctx.client.clone(), &dkv.namespace().unwrap_or_default());
    let patch = status_merge_patch(&old, &new).map_err(|source| Error::Status {
        name: name.clone(),
        source: kube::Error::SerdeError(source),
    })?;
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Status {
            name: name.clone(),
            source,
        })?;
    ctx.metrics.set_phase(
        &kube::runtime::reflector::ObjectRef::from_obj(dkv),
        new.phase,
    );
    for event in transitions(&old.conditions, &new.conditions) {
        publish(dkv, event, ctx).await;
    }
    Ok(true)
}

/// A merge patch that turns status `old` into `new`: every field of `new`,
/// and an explicit `null` for each top-level field `old` has and `new` does
/// not (a cleared `operation`, say). Arrays and the nested objects are
/// replaced whole by a merge patch, so top-level nulls are all it takes.
/// (Server-side apply would depend on how each server prunes a struct its
/// manager stopped applying; an explicit null does not.)
fn status_merge_patch(
    old: &DistributedKVStatus,
    new: &DistributedKVStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut status = serde_json::to_value(new)?;
    if let (Some(fields), serde_json::Value::Object(old_fields)) =
        (status.as_object_mut(), serde_json::to_value(old)?)
    {
        for key in old_fields.keys() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    Ok(json!({ "status": status }))
}

/// Events for conditions whose status or reason changed.
fn transitions(old: &[Condition], new: &[Condition]) -> Vec<Event> {
    new.iter()
        .filter(|c| {
            !old.iter()
                .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason)
        })
        .filter(|c| {
            !(c.type_ == types::DEGRADED
                && c.status == "False"
                && old.iter().all(|o| o.type_ != c.type_))
        })
        .map(|c| {
            let bad = (c.type_ == types::DEGRADED && c.status == "True")
                || (c.type_ == types::AVAILABLE
                    && c.status == "False"
                    && c.reason == reasons::QUORUM_LOST);
            Event {
                type_: if bad {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: c.reason.clone(),
                note: Some(format!("{}={}: {}", c.type_, c.status, c.message)),
                action: "Reconcile".to_owned(),
                secondary: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_api::distributedkv::v1beta1::OperationKind;

    #[test]
    fn fields_no_longer_set_are_nulled_in_the_status_patch() {
        let old = DistributedKVStatus {
            operation: Some(Operation {
                kind: OperationKind::AddLearner,
                target: "orders-3".into(),
                started_at: Time(jiff::Timestamp::UNIX_EPOCH),
            }),
            leader: Some("orders-0".into()),
            ready_replicas: 3,
            ..DistributedKVStatus::default()
        };
        let new = DistributedKVStatus {
            leader: Some("orders-1".into()),
            ready_replicas: 4,
            ..DistributedKVStatus::default()
        };
        let patch = status_merge_patch(&old, &new).unwrap();
        assert_eq!(patch["status"]["operation"], serde_json::Value::Null);
        assert!(
            patch["status"]
                .as_object()
                .unwrap()
                .contains_key("operation")
        );
        assert_eq!(patch["status"]["leader"], "orders-1");
        assert_eq!(patch["status"]["readyReplicas"], 4);
    }
}
