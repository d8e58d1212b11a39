//! A standby follows its source once it has all its seed (the replay
//! recorded its revision offset) and authentication is on; its status is
//! refreshed every [`STATUS_REFRESH`].

use jiff::SignedDuration;

use crate::cluster::backups::standby;
use crate::cluster::context::Context;
use crate::cluster::error::Result;

use super::{Input, Maintained, TaskOutcome};

/// How often a following standby's lag is written to status (a report
/// that changes what status shows otherwise — a failure, a stop, the
/// promotion — is written at once).
pub const STATUS_REFRESH: SignedDuration = SignedDuration::from_secs(10);

pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let cluster = &input.validated.cluster;
    if cluster.standby.is_none() {
        return Ok(TaskOutcome::Continue);
    }
    let offset = input
        .observed
        .statefulset
        .as_deref()
        .and_then(standby::recorded_offset);
    let recorded_promoted = input.observed.recorded.standby_promoted;
    done.standby = standby::ensure(
        cluster,
        (&input.connected.endpoints, &input.connected.credentials),
        (input.formed(), offset, recorded_promoted),
        &ctx.backups(),
    )
    .await?;
    let promoted = recorded_promoted || done.standby.as_ref().is_some_and(|r| r.promoted.is_some());
    // The roles: read-only while it follows, given back once promoted.
    if let (true, Some(root)) = (input.formed(), input.connected.credentials.user()) {
        let mut etcd = standby::roles::connect(
            &input.connected.endpoints,
            input.connected.credentials.client_identity(),
            Some(root),
        )
        .await?;
        if promoted {
            let given = standby::roles::give_back(&ctx.client, cluster, &mut etcd).await?;
            if given > 0 {
                tracing::info!(grants = given, "standby promoted: roles given back");
            }
        } else if offset.is_some() {
            standby::roles::hold_read_only(&ctx.client, cluster, &mut etcd).await?;
        }
    }
    Ok(if done.standby.is_some() {
        TaskOutcome::RequeueAt(input.now + STATUS_REFRESH)
    } else {
        TaskOutcome::Continue
    })
}
