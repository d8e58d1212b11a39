//! Member volumes grow in place to `spec.storage.size` once the StatefulSet
//! exists (its claims do); no member restarts for it. Once they all have
//! grown, and nothing else is under way, the StatefulSet's claim template
//! follows (the StatefulSet is re-created around its running pods).

use std::sync::Arc;

use crate::cluster::context::Context;
use crate::cluster::error::Result;
use crate::cluster::maintenance::volumes;

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let cluster = &input.validated.cluster;
    let grown = volumes::grow(&ctx.client, cluster, &input.observed.claims).await?;
    if input.idle()
        && !input.planned.plan.creating
        && volumes::template_behind(cluster, &grown)
        && let Some(storage) = &cluster.storage
    {
        let desired = volumes::with_claim_size(&input.applied.built, &storage.size);
        let recreated = volumes::recreate_statefulset(
            &ctx.client,
            &cluster.namespace,
            &input.applied.statefulset,
            &desired,
        )
        .await?;
        done.statefulset = Some(Arc::new(recreated));
    }
    // A claim waiting for a volume is reported once it has waited too long.
    let grace_ends = volumes::volume_grace_ends(&grown);
    done.volumes = Some(grown);
    Ok(grace_ends.map_or(TaskOutcome::Continue, TaskOutcome::RequeueAt))
}
