//! The faults and the pending work status reports: member claims waiting for a volume, a member down as a step
//! expects or not, failing member pods, members found corrupt, a failed backup, changes not rolled out yet.

use dkv_api::distributedkv::v1beta1::{CorruptMemberPolicy, OperationKind};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::StatusInputs;
use crate::cluster::backups::catalogue::FailedRun;
use crate::cluster::maintenance::volumes::{VOLUME_GRACE, Volumes};
use crate::cluster::plan::{settled_template, update_revision};
use crate::cluster::recovery::lost_node;
use crate::parts::naming;

/// Says which member claims have waited for a volume longer than
/// [`VOLUME_GRACE`].
pub(super) fn volume_pending(volumes: &Volumes, now: &Time) -> Option<String> {
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
pub(super) fn expected_down(obs: &StatusInputs<'_>, now: &Time) -> bool {
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
            | OperationKind::RelocateMember
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
pub(super) fn pod_fault(obs: &StatusInputs<'_>) -> Option<(&'static str, String)> {
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
pub(super) fn not_ready_detail(obs: &StatusInputs<'_>) -> String {
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

/// The members whose node is lost, each with its node, why, since when and
/// what will or can be done; `None` when no member's node is lost.
pub(super) fn node_lost_message(obs: &StatusInputs<'_>) -> Option<String> {
    let policy = lost_node::replace_policy(obs.cluster.lost_node.as_ref());
    let lost: Vec<String> = obs
        .lost
        .iter()
        .map(|l| {
            let member = naming::member(&obs.cluster.name, l.ordinal);
            let plan = match lost_node::replace_at(policy, l) {
                Some(at) => {
                    format!("; dkv moves it off the node from {at} on (spec.recovery.lostNode)")
                }
                None => String::new(),
            };
            format!(
                "member {member} is on node {}, lost since {} ({}){plan}",
                l.node, l.since, l.loss
            )
        })
        .collect();
    if lost.is_empty() {
        return None;
    }
    let advice = if policy.is_some() {
        "it serves again if its node comes back first"
    } else {
        "it serves again when its node comes back. If the node is gone for good: with volumes that follow their pod, `kubectl delete node` lets the member start elsewhere with its data; otherwise set spec.recovery.lostNode.policy: Replace and dkv replaces the member (its data on that node is given up; the other members hold every acknowledged write)"
    };
    Some(format!("{}: {advice}", lost.join("; ")))
}

pub(super) fn backup_failed_message(failed: &FailedRun) -> String {
    format!(
        "the latest backup, {}, failed: {}; the next successful backup clears this",
        failed.name, failed.message
    )
}

/// Whether the spec asks for something the cluster is not yet: a waiting
/// planner is news only then (a converged cluster whose members cannot be
/// seen is not "in progress").
pub(super) fn change_pending(obs: &StatusInputs<'_>) -> bool {
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
pub(super) fn rollout_pending(obs: &StatusInputs<'_>) -> Option<String> {
    let sts = obs.statefulset?;
    let members = obs.pods.len();
    let Some(revision) = update_revision(sts) else {
        return Some(format!(
            "the members' template changed; 0 of {members} members known to run it yet"
        ));
    };
    let settled = settled_template(sts);
    let current = obs
        .pods
        .iter()
        .filter(|p| p.view.runs_template(&revision, settled.as_deref()))
        .count();
    (current < members).then(|| {
        format!("{current} of {members} members run the current template; the others restart one at a time")
    })
}

/// The members etcd's corruption checks found to differ from their peers,
/// each named with how it was found, and what happens next.
pub(super) fn corrupt_message(obs: &StatusInputs<'_>) -> Option<String> {
    let first = obs.corrupt.first()?;
    let named: Vec<String> = obs
        .corrupt
        .iter()
        .map(|c| {
            format!(
                "member {}'s data differs from its peers' ({})",
                naming::member(&obs.cluster.name, c.ordinal),
                c.found_by.describe()
            )
        })
        .collect();
    let next = if obs.cluster.corrupt_member == CorruptMemberPolicy::Replace {
        match obs.operation.as_ref() {
            Some(op) if op.kind == OperationKind::ReplaceMember
                && op.target == naming::member(&obs.cluster.name, first.ordinal) =>
            {
                "dkv is replacing it from its healthy peers (spec.recovery.corruptMember: Replace)"
                    .to_owned()
            }
            _ => "dkv replaces it from its healthy peers once they are a quorum without it and nothing else is under way (spec.recovery.corruptMember: Replace)".to_owned(),
        }
    } else {
        "set spec.recovery.corruptMember: Replace for dkv to replace it from its healthy peers, or follow the DkvCorruptAlarm runbook".to_owned()
    };
    Some(format!("{}; {next}", named.join("; ")))
}
