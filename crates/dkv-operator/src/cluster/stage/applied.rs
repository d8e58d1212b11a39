//! Stage 6, applied: the built children ([`crate::cluster::build`], pure)
//! written to the API server ([`crate::cluster::apply`]), and what the
//! StatefulSet is now. A cluster back from hibernation is announced here,
//! and a hibernated one's continuous backup agent stopped.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use tracing::info;

use crate::cluster::apply;
use crate::cluster::build::DesiredChildren;
use crate::cluster::context::{self, Context};
use crate::cluster::dereference::Observed;
use crate::cluster::error::Result;
use crate::cluster::lifecycle::hibernation;
use crate::events::{Event, EventType};

use super::planned::Planned;
use super::validated::Validated;

/// The children as applied.
pub struct Applied {
    /// The StatefulSet as the API server returned it (or as cached, when no
    /// write was needed).
    pub statefulset: Arc<StatefulSet>,
    /// The StatefulSet as built this pass (what the volume step re-creates
    /// it from when its claim template must follow grown volumes).
    pub built: StatefulSet,
}

/// Applies the built children.
pub async fn applied(
    prepared: DesiredChildren,
    validated: &Validated,
    planned: &Planned,
    observed: &Observed,
    ctx: &Context,
) -> Result<Applied> {
    let cluster = &validated.cluster;
    let built = prepared.statefulset.clone();
    let statefulset = apply::apply(
        &ctx.client,
        &cluster.namespace,
        prepared,
        observed,
        &ctx.verified_templates,
    )
    .await?;
    if planned.hibernation == hibernation::State::Awake && observed.recorded.waking {
        announce_awake(validated, ctx).await;
    }
    if planned.plan.hibernated {
        // Nothing records changes of stopped members; what was recorded
        // stays restorable, and the agent starts again on waking.
        ctx.agents.stop(&cluster.namespace, &cluster.name);
        ctx.followers.stop(&cluster.namespace, &cluster.name);
    }
    Ok(Applied {
        statefulset: Arc::new(statefulset),
        built,
    })
}

/// The Event of a cluster whose members are all back after hibernation.
/// (That they stop and have stopped are the Events of `Available` turning
/// `Hibernating`, then `Hibernated`.)
async fn announce_awake(validated: &Validated, ctx: &Context) {
    info!("awake after hibernation");
    context::publish_about(
        &validated.cluster,
        Event {
            type_: EventType::Normal,
            reason: "Awake".to_owned(),
            note: Some(
                "every member is back on its own volume, with the same member IDs and cluster ID; backups resumed".to_owned(),
            ),
            action: "Wake".to_owned(),
            secondary: None,
        },
        ctx,
    )
    .await;
}
