//! Continuous backup records once the cluster has formed (and a restored
//! cluster has all its data); its status is refreshed every
//! [`continuous::STATUS_REFRESH`].

use crate::cluster::backups::continuous;
use crate::cluster::context::Context;
use crate::cluster::error::Result;

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let cluster = &input.validated.cluster;
    done.continuous = continuous::ensure(
        cluster,
        &input.connected.endpoints,
        &input.connected.credentials,
        input.formed(),
        &ctx.backups(),
    )
    .await?;
    let recording = cluster.backup.as_ref().and_then(|b| b.continuous).is_some();
    Ok(if recording {
        TaskOutcome::RequeueAt(input.now + continuous::STATUS_REFRESH)
    } else {
        TaskOutcome::Continue
    })
}
