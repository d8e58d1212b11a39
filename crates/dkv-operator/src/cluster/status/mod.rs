//! The last step of a reconcile, and the only one that writes status: the
//! cluster's whole status (conditions, phase, READY, members, the printer
//! STATUS) derived purely from what the pass observed ([`StatusInputs`]) and how it
//! ended (an error's [`Fault`]), written to the status subresource only when
//! it differs from what is already there.
//!
//! This module holds what status is derived from and the statuses of a pass
//! that stopped early; `compute` derives the status of a pass that planned,
//! from the faults and pending work `faults` finds and the words `messages`
//! chooses; `patch` writes it.

mod compute;
mod faults;
mod messages;
pub(crate) mod metrics_view;
mod patch;

use std::collections::BTreeSet;
use std::sync::Arc;

use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::{DistributedKVStatus, Operation, Phase};
use dkv_api::{DistributedKV, labels};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};

use super::adoption::drive::Adopting;
use super::membership::ObservedMember;
use super::outcome::Fault;
use super::pass::Pass;
use super::plan::Plan;
use super::validate::ValidatedCluster;
use crate::cluster::backups::catalogue::BackupSummary;
use crate::cluster::maintenance::volumes::Volumes;
use crate::cluster::membership::observe::MemberPod;
use compute::compute;
pub use patch::write;

/// The status of `dkv` after a pass that reached `pass` and, if it failed,
/// showed `fault`. `None` when the pass saw nothing status records and
/// failed with nothing to show (a cluster being deleted, say).
pub fn derive(
    dkv: &DistributedKV,
    pass: &Pass,
    fault: Option<&Fault>,
    backups: &BackupSummary,
    now: &Time,
) -> Option<DistributedKVStatus> {
    // A pass that planned: its status follows from what it saw. One that
    // stopped before keeps what status said, with its fault on top.
    let observed = match (
        &pass.observed,
        &pass.validated,
        &pass.planned,
        pass.volumes(),
    ) {
        (Some(observed), Some(validated), Some(planned), Some(volumes)) => {
            let hibernation = pass.hibernation();
            let statefulset = pass.statefulset();
            Some(compute(
                dkv,
                &StatusInputs {
                    cluster: &validated.cluster,
                    plan: &planned.plan,
                    statefulset: statefulset.as_deref(),
                    members: pass.connected.as_ref().and_then(|c| c.members.as_deref()),
                    pods: &validated.pods,
                    client_endpoints: &observed.client_endpoints,
                    operation: pass.operation(),
                    restore_failure: validated
                        .pods
                        .iter()
                        .find_map(|p| p.restore_failure.as_deref()),
                    backups,
                    volumes,
                    hibernation: &hibernation,
                    placements: &validated.placements,
                    lost: &validated.lost,
                    corrupt: pass
                        .connected
                        .as_ref()
                        .map(|c| c.corrupt.as_slice())
                        .unwrap_or_default(),
                    stalled: planned.stalled.as_ref(),
                },
                now,
            ))
        }
        _ => None,
    };
    let status = match (observed, fault) {
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
    };
    let status = status.map(|status| DistributedKVStatus {
        last_defrag_time: pass.maintained.defragged_at.clone().or_else(|| {
            dkv.status
                .as_ref()
                .and_then(|old| old.last_defrag_time.clone())
        }),
        adoption: dkv.status.as_ref().and_then(|old| old.adoption.clone()),
        ..status
    });
    match (status, &pass.adopting) {
        (Some(status), Some(adopting)) if fault.is_none() => {
            Some(with_adoption(dkv, status, adopting, now))
        }
        (status, _) => status,
    }
}

/// `status` while a running cluster is being adopted: `status.adoption`,
/// and conditions that speak of the whole cluster (the members that were
/// there before and dkv's), which the rest of status cannot see.
fn with_adoption(
    dkv: &DistributedKV,
    mut status: DistributedKVStatus,
    adopting: &Adopting,
    now: &Time,
) -> DistributedKVStatus {
    use dkv_api::distributedkv::v1beta1::AdoptionPhase;
    status.adoption = Some(adopting.status.clone());
    let phase = adopting.phase();
    let message = adopting.status.message.clone().unwrap_or_default();
    let (reason, progressing, coarse) = match phase {
        AdoptionPhase::Refused => (reasons::JOIN_REFUSED, false, Phase::Degraded),
        AdoptionPhase::TakingOver => (reasons::TAKING_OVER, true, Phase::Creating),
        AdoptionPhase::TakenOver => (reasons::TAKEN_OVER, false, Phase::Running),
        AdoptionPhase::OldMembersLeaving => (reasons::OLD_MEMBERS_LEAVING, true, Phase::Scaling),
        AdoptionPhase::BackingOut => (reasons::BACKING_OUT, true, Phase::Deleting),
        // The pass that finds only dkv's members (or, backing out, only the
        // old ones): status as for any cluster of dkv's.
        AdoptionPhase::Adopted | AdoptionPhase::BackedOut => return status,
    };
    let refused = phase == AdoptionPhase::Refused;
    let available = adopting.quorum && !refused;
    let degraded = refused || !adopting.quorum;
    let wants = [
        Want {
            type_: types::AVAILABLE,
            status: available,
            reason: if available || refused {
                reason
            } else {
                reasons::QUORUM_LOST
            },
            message: if available {
                format!(
                    "the running cluster's voters (those that were there before and dkv's) have a healthy quorum: {message}"
                )
            } else {
                message.clone()
            },
        },
        Want {
            type_: types::PROGRESSING,
            status: progressing,
            reason,
            message: message.clone(),
        },
        Want {
            type_: types::DEGRADED,
            status: degraded,
            reason: match (refused, degraded) {
                (true, _) => reasons::JOIN_REFUSED,
                (false, true) => reasons::QUORUM_LOST,
                (false, false) => reasons::AS_EXPECTED,
            },
            message,
        },
    ];
    let generation = dkv.meta().generation;
    for want in wants {
        set_condition(&mut status.conditions, want, generation, now);
    }
    status.phase = Some(coarse);
    status
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
    let (type_, reason, message) = match fault {
        Fault::Degraded { reason, message } => {
            status.phase = Some(Phase::Degraded);
            (types::DEGRADED, reason, message)
        }
        Fault::Waiting { reason, message } => (types::PROGRESSING, reason, message),
    };
    let want = Want {
        type_,
        status: true,
        reason,
        message: message.clone(),
    };
    set_condition(&mut status.conditions, want, generation, now);
    status
}

/// Everything the status of a healthy pass is computed from.
struct StatusInputs<'a> {
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
    /// Where the cluster stands with `spec.hibernation`.
    pub hibernation: &'a crate::cluster::lifecycle::hibernation::State,
    /// Where each member pod runs.
    pub placements: &'a [crate::cluster::recovery::lost_node::Placement],
    /// The members whose node is lost.
    pub lost: &'a [crate::cluster::recovery::lost_node::LostMember],
    /// The members found to differ from their peers.
    pub corrupt: &'a [crate::cluster::recovery::corruption::CorruptMember],
    /// A rollout that missed `spec.rollout.progressDeadline`.
    pub stalled: Option<&'a crate::cluster::upgrade::rollout::Stalled>,
}

/// One condition as the operator wants it now.
struct Want {
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
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
    let status = if want.status {
        dkv_api::conditions::status::TRUE
    } else {
        dkv_api::conditions::status::FALSE
    };
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

/// `status` with the backup facts derived from the records.
fn with_backups(status: DistributedKVStatus, backups: &BackupSummary) -> DistributedKVStatus {
    let (last_backup, last_backup_time) = match &backups.last {
        Some((backup, time)) => (Some(backup.clone()), Some(time.clone())),
        None => (None, None),
    };
    DistributedKVStatus {
        last_backup,
        last_backup_time,
        continuous_backup: backups.continuous.clone(),
        standby: backups.standby.clone(),
        ..status
    }
}

#[cfg(test)]
mod tests;
