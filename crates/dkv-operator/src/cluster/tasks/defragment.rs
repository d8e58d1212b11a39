//! Scheduled defragmentation ([`crate::cluster::maintenance::defrag`]), only on a formed,
//! healthy, idle cluster: a run due while the cluster is busy waits for the
//! next pass that finds it idle.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::info;

use crate::cluster::context::{self, Context};
use crate::cluster::error::Result;
use crate::cluster::maintenance::defrag;
use crate::cluster::validate::ValidatedCluster;
use crate::events::{Event, EventType};
use crate::parts::naming;

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let cluster = &input.validated.cluster;
    let Some(settings) = &cluster.defrag else {
        return Ok(TaskOutcome::Continue);
    };
    let now = input.now;
    let recorded = &input.observed.recorded;
    if let Some(admin) = &input.connected.admin
        && input.formed()
        && input.connected.all_healthy()
        && input.idle()
    {
        // The first run counts from when the cluster was created.
        let last = recorded.last_defrag.or(recorded.created).unwrap_or(now);
        if defrag::due(&settings.schedule, last, now) {
            let members: Vec<defrag::Member> = input
                .validated
                .pods
                .iter()
                .filter_map(|p| {
                    Some(defrag::Member {
                        name: naming::member(&cluster.name, p.view.ordinal),
                        endpoint: p.endpoint.clone()?,
                    })
                })
                .collect();
            let (results, stopped) =
                defrag::run(admin.as_ref(), &members, settings.threshold_percent).await;
            report(cluster, &results, stopped.as_ref(), ctx).await;
            if stopped.is_none() {
                done.defragged_at = Some(Time(now));
            }
        }
    }
    let last = done
        .defragged_at
        .as_ref()
        .map(|t| t.0)
        .or(recorded.last_defrag)
        .unwrap_or(now);
    Ok(settings
        .schedule
        .next_run(last)
        .map_or(TaskOutcome::Continue, TaskOutcome::RequeueAt))
}

/// An Event per member a run looked at, the counter, and one Event if the
/// run stopped early.
async fn report(
    cluster: &ValidatedCluster,
    results: &[defrag::MemberResult],
    stopped: Option<&defrag::Stopped>,
    ctx: &Context,
) {
    // As `kubectl dkv defrag` prints them.
    let size = dkv_readouts::size::binary;
    for result in results {
        let (type_, reason, note) = match result {
            defrag::MemberResult::Defragmented {
                member,
                leader,
                before,
                after,
            } => {
                ctx.metrics
                    .count_defragmentation(&cluster.namespace, &cluster.name, true);
                (
                    EventType::Normal,
                    "Defragmented",
                    format!(
                        "defragmented {member}{}: database file {} -> {}",
                        if *leader { " (leader, last)" } else { "" },
                        size(*before),
                        size(*after)
                    ),
                )
            }
            defrag::MemberResult::Skipped { member, percent } => (
                EventType::Normal,
                "DefragSkipped",
                format!(
                    "{member} not defragmented: {percent}% of its database file is free, below spec.maintenance.defrag.thresholdPercent"
                ),
            ),
            defrag::MemberResult::Failed { member, message } => {
                ctx.metrics
                    .count_defragmentation(&cluster.namespace, &cluster.name, false);
                (
                    EventType::Warning,
                    "DefragFailed",
                    format!("defragmenting {member} failed: {message}"),
                )
            }
        };
        info!(%note, "scheduled defragmentation");
        // The member pod as the related object: one Event per member, not
        // one series for the cluster.
        let member = match result {
            defrag::MemberResult::Defragmented { member, .. }
            | defrag::MemberResult::Skipped { member, .. }
            | defrag::MemberResult::Failed { member, .. } => member,
        };
        context::publish_about(
            cluster,
            Event {
                type_,
                reason: reason.to_owned(),
                note: Some(note),
                action: "Defragment".to_owned(),
                secondary: Some(naming::member_pod_reference(&cluster.namespace, member)),
            },
            ctx,
        )
        .await;
    }
    if let Some(defrag::Stopped(why)) = stopped {
        context::publish_about(
            cluster,
            Event {
                type_: EventType::Warning,
                reason: "DefragPostponed".to_owned(),
                note: Some(format!(
                    "scheduled defragmentation stopped: {why}; it runs again once every member is healthy"
                )),
                action: "Defragment".to_owned(),
                secondary: None,
            },
            ctx,
        )
        .await;
    }
}
