//! Authentication goes on once the cluster has formed and nothing else is
//! under way; the root user exists before it does (the connected stage
//! ensured it).

use tracing::info;

use crate::cluster::context::{self, Context};
use crate::cluster::error::{Error, Result};
use crate::cluster::outcome::Outcome;
use crate::cluster::security::auth;
use crate::events::{Event, EventType};
use crate::parts::naming;

use super::{Input, Maintained, TaskOutcome};

pub async fn run(input: &Input<'_>, _: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let (Some(admin), Some(pending)) = (
        &input.connected.admin,
        input.connected.credentials.auth_pending(),
    ) else {
        return Ok(TaskOutcome::Continue);
    };
    if !input.converged() || input.planned.plan.creating {
        return Ok(TaskOutcome::Continue);
    }
    let cluster = &input.validated.cluster;
    // Recorded first: from the request on, etcd may have authentication on
    // (a turn-off is refused from here), even if the pass ends before the
    // outcome is recorded.
    auth::mark_enabling(&ctx.client, cluster).await?;
    admin
        .enable_auth(&pending.root.password)
        .await
        .map_err(|source| match source {
            // Restored data with authentication on, and a root password
            // that does not open it: nothing but the user can fix that.
            dkv_etcd::Error::AuthenticationFailed { .. } => Error::RestoreSource {
                message: format!(
                    "the restored data has etcd authentication on, and the root password in Secret {} does not open it: it needs the source cluster's root credentials (kept as <source>-continuous-etcd-root for continuous backup, <backup>-etcd-root for a backup); delete this cluster, copy that Secret into namespace {} and restore again ({source})",
                    naming::auth_secret(&cluster.name),
                    cluster.namespace
                ),
                waiting: false,
            },
            source => Error::Etcd {
                step: "enable authentication",
                member: cluster.name.clone(),
                source,
            },
        })?;
    auth::mark_enabled(&ctx.client, cluster).await?;
    info!("etcd authentication enabled");
    context::publish_about(
        cluster,
        Event {
            type_: EventType::Normal,
            reason: "AuthenticationEnabled".to_owned(),
            note: Some(format!(
                "etcd authentication is on; the root credentials are in the Secret {}",
                naming::auth_secret(&cluster.name)
            )),
            action: "EnableAuthentication".to_owned(),
            secondary: None,
        },
        ctx,
    )
    .await;
    Ok(TaskOutcome::Done(Outcome::AuthEnabled))
}
