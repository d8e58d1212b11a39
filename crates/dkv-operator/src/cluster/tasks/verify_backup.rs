//! A scratch cluster verifying a backup ([`crate::cluster::backups::verification`])
//! reports and goes once it has formed.

use crate::cluster::backups::verification;
use crate::cluster::context::Context;
use crate::cluster::error::Result;

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, _: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    verification::check(
        &input.validated.cluster,
        input.observed.recorded.restore_failed.as_deref(),
        input.formed() && input.converged(),
        input.connected.admin.as_deref(),
        &input.connected.endpoints,
        &ctx.backups(),
    )
    .await?;
    Ok(TaskOutcome::Continue)
}
