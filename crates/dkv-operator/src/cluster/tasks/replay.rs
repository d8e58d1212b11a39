//! A restore from continuous backup replays the recorded changes once every
//! member runs from the base snapshot; clients are let in after (the
//! client Service follows in the next pass).

use crate::cluster::backups::continuous;
use crate::cluster::context::Context;
use crate::cluster::error::Result;
use crate::cluster::outcome::{AppliedPass, EtcdContact, Outcome, Rotation, Work};

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, _: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let plan = &input.planned.plan;
    let Some(pending) = &plan.replay else {
        return Ok(TaskOutcome::Continue);
    };
    let Some(replay) = &pending.replay else {
        return Ok(TaskOutcome::Continue);
    };
    if input.connected.admin.is_none()
        || plan.creating
        || !input.converged()
        || !input.connected.all_healthy()
    {
        return Ok(TaskOutcome::Continue);
    }
    continuous::replay_restore_and_record(
        &input.validated.cluster,
        pending,
        replay,
        &input.connected.endpoints,
        &input.connected.credentials,
        &ctx.backups(),
    )
    .await?;
    Ok(TaskOutcome::Done(Outcome::Applied(AppliedPass {
        work: Work::Advanced,
        etcd: EtcdContact::Asked,
        rotation: Rotation::Idle,
        due_at: None,
    })))
}
