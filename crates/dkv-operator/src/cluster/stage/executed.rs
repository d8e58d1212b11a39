//! Stage 7, executed: the plan's one membership step carried out against
//! etcd ([`crate::cluster::execute`]), with the Events of the steps that
//! need one, and the operation as the step leaves it.

use dkv_api::distributedkv::v1beta1::Operation;
use tracing::info;

use crate::cluster::context::{self, Context};
use crate::cluster::error::Result;
use crate::cluster::execute;
use crate::cluster::membership::Step;
use crate::cluster::recovery::lost_node::LostMember;
use crate::cluster::upgrade::downgrade;
use crate::cluster::validate::ValidatedCluster;
use crate::events::{Event, EventType};
use crate::parts::naming;

use super::connected::Connected;
use super::planned::{NOSPACE_RETRY, Planned};
use super::validated::Validated;

/// The operation once the pass's step is done.
pub struct Executed {
    /// `None` once the step finished the operation pinned before it.
    pub operation: Option<Operation>,
}

/// Executes the plan's step, when etcd can be asked.
pub async fn executed(
    validated: &Validated,
    connected: &Connected,
    planned: &Planned,
    now: jiff::Timestamp,
    ctx: &Context,
) -> Result<Executed> {
    let cluster = &validated.cluster;
    let step = &planned.plan.step;
    if let Some(admin) = &connected.admin {
        execute::execute(
            step,
            &execute::Target {
                client: &ctx.client,
                admin: admin.as_ref(),
                namespace: &cluster.namespace,
                cluster: &cluster.name,
                pods: &validated.pods,
                peer_scheme: cluster.tls.peer_scheme(),
            },
        )
        .await?;
        if matches!(step, Step::ReclaimSpace) {
            space_reclaimed(cluster, now, ctx).await;
        }
        announce_downgrade(cluster, step, connected, ctx).await;
        if let Step::EvictFromLostNode {
            ordinal, claim_uid, ..
        } = step
        {
            announce_eviction(cluster, *ordinal, claim_uid.is_some(), &validated.lost, ctx).await;
        }
    }
    let finished = match step {
        Step::Finish(pin) => {
            info!(kind = ?pin.kind, ordinal = pin.ordinal, "operation complete");
            true
        }
        // Deleting the removed member's volume is the last step of a
        // removal, and it has just succeeded (or the volume was gone).
        Step::DeleteVolume { ordinal } if connected.admin.is_some() => {
            info!(ordinal, "member removal complete");
            true
        }
        _ => false,
    };
    Ok(Executed {
        operation: if finished {
            None
        } else {
            planned.operation.clone()
        },
    })
}

/// The Event of a member pod force-deleted off a lost node.
async fn announce_eviction(
    cluster: &ValidatedCluster,
    ordinal: i32,
    claim_deleted: bool,
    lost: &[LostMember],
    ctx: &Context,
) {
    let member = naming::member(&cluster.name, ordinal);
    let node = lost
        .iter()
        .find(|l| l.ordinal == ordinal)
        .map_or_else(String::new, |l| format!(" on node {} ({})", l.node, l.loss));
    let note = if claim_deleted {
        format!(
            "{member}{node} left etcd; its pod was force-deleted and its claim {} (bound to that node) deleted: the StatefulSet re-creates it elsewhere, empty, and it joins as a learner",
            naming::volume_claim(&cluster.name, ordinal)
        )
    } else if cluster.storage.is_some() {
        format!(
            "the pod of {member}{node} was force-deleted: the StatefulSet re-creates it elsewhere and it restarts from its volume, which follows it"
        )
    } else {
        format!(
            "{member}{node} left etcd; its pod was force-deleted: the StatefulSet re-creates it elsewhere, empty, and it joins as a learner"
        )
    };
    info!(%note, "member moved off a lost node");
    context::publish_about(
        cluster,
        Event {
            type_: EventType::Warning,
            reason: "MemberEvicted".to_owned(),
            note: Some(note),
            action: "RelocateMember".to_owned(),
            secondary: Some(naming::member_pod_reference(&cluster.namespace, &member)),
        },
        ctx,
    )
    .await;
}

/// After the NOSPACE recovery (compact, defragment, disarm): remembered, so
/// that a NOSPACE that comes straight back is reported rather than looped
/// on, counted, and told in an Event.
async fn space_reclaimed(cluster: &ValidatedCluster, now: jiff::Timestamp, ctx: &Context) {
    ctx.record_space_reclaimed(&cluster.object_ref(), now);
    ctx.metrics
        .count_nospace_recovery(&cluster.namespace, &cluster.name);
    context::publish_about(
        cluster,
        Event {
            type_: EventType::Warning,
            reason: "NoSpaceRecovered".to_owned(),
            note: Some(format!(
                "etcd refused writes (NOSPACE: the backend reached spec.etcd.quotaBackendBytes, {} bytes); dkv compacted the history, defragmented every member one at a time and disarmed the alarm: writes are accepted again. If it comes back within {} minutes dkv stops and reports it: raise the quota or find what writes so much",
                cluster.etcd.quota_backend_bytes,
                NOSPACE_RETRY.as_mins()
            )),
            action: "ReclaimSpace".to_owned(),
            secondary: None,
        },
        ctx,
    )
    .await;
}

/// The Events of a downgrade: etcd's downgrade enabled or cancelled, and
/// each member restarted onto the older version.
async fn announce_downgrade(
    cluster: &ValidatedCluster,
    step: &Step,
    connected: &Connected,
    ctx: &Context,
) {
    let to = cluster.version;
    // The Event recorder folds Events of one reason, action and object into
    // a series that keeps the first note: the target in the action keeps
    // each downgrade's own.
    let minor = downgrade::minor_text(to);
    let (reason, note, action, secondary) = match step {
        Step::EnableDowngrade { .. } => (
            "DowngradeEnabled",
            format!(
                "etcd validated and enabled the downgrade to {}.{}: the cluster version drops to it and members rewrite their data for it; then they restart on {} one at a time, the leader last",
                to.major, to.minor, cluster.image
            ),
            format!("EnableDowngradeTo{minor}"),
            None,
        ),
        Step::CancelDowngrade => (
            "DowngradeCancelled",
            format!(
                "the spec asks for {to} again: dkv cancelled the downgrade enabled in etcd; members on an older version move back up one at a time"
            ),
            "CancelDowngrade".to_owned(),
            None,
        ),
        Step::RestartPod { ordinal } => {
            let Some(from) = connected
                .members
                .iter()
                .flatten()
                .find(|m| m.ordinal == *ordinal)
                .and_then(|m| m.version)
                .filter(|v| v.minor_line() > to.minor_line())
            else {
                return;
            };
            let member = naming::member(&cluster.name, *ordinal);
            (
                "MemberDowngrading",
                format!(
                    "{member} restarts from etcd {from} onto {} ({to})",
                    cluster.image
                ),
                format!("DowngradeMemberTo{minor}"),
                Some(naming::member_pod_reference(&cluster.namespace, &member)),
            )
        }
        _ => return,
    };
    info!(%note, "downgrade");
    context::publish_about(
        cluster,
        Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(note),
            action,
            secondary,
        },
        ctx,
    )
    .await;
}
