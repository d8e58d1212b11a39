//! A CORRUPT alarm that names no member of the cluster (one since removed,
//! or member 0, as etcd 3.4/3.5's periodic check raises it) is disarmed
//! once every member's hash agrees: the member whose data disagreed was
//! replaced (`spec.recovery.corruptMember: Replace`, or by hand), and while
//! the alarm stays, etcd refuses reads and writes on every member.
//! An alarm on a member still in the cluster is left alone: it is what
//! status reports and what the replacement acts on.

use dkv_etcd::{Alarm, AlarmKind, MemberId};
use tracing::info;

use crate::cluster::context::{self, Context};
use crate::cluster::error::{Error, Result};
use crate::cluster::recovery::corruption;
use crate::events::{Event, EventType};

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, _: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    // Without etcd's member list every alarm would look like one of a
    // member that is gone.
    let (Some(admin), Some(alarms), Some(_)) = (
        &input.connected.admin,
        &input.connected.alarms,
        &input.connected.members,
    ) else {
        return Ok(TaskOutcome::Continue);
    };
    let cluster = &input.validated.cluster;
    for id in corruption::stale_alarms(&cluster.name, alarms, &input.connected.agreement) {
        admin
            .disarm(Alarm {
                member: MemberId(id),
                kind: AlarmKind::Corrupt,
            })
            .await
            .map_err(|source| Error::Etcd {
                step: "disarm the CORRUPT alarm of a removed member",
                member: format!("{id:x}"),
                source,
            })?;
        info!(member = %format_args!("{id:x}"), "disarmed the CORRUPT alarm of a member no longer in the cluster");
        context::publish_about(
            cluster,
            Event {
                type_: EventType::Normal,
                reason: "CorruptAlarmDisarmed".to_owned(),
                note: Some(format!(
                    "disarmed the CORRUPT alarm of member {id:x}, which is no longer in the cluster: the members serve again"
                )),
                action: "DisarmAlarm".to_owned(),
                secondary: None,
            },
            ctx,
        )
        .await;
    }
    Ok(TaskOutcome::Continue)
}
