//! A standby follows its source once it has all its seed (the replay
//! recorded its revision offset) and authentication is on; its status is
//! refreshed every [`STATUS_REFRESH`]. A running cluster made a standby is
//! demoted first ([`standby::demotion`]); a promoted one records its
//! promotion in its own backup destination ([`standby::promotion`]).

use jiff::SignedDuration;

use crate::cluster::backups::standby::{self, demotion, followers::FollowReport};
use crate::cluster::context::Context;
use crate::cluster::error::Result;

use super::{Input, Maintained, TaskOutcome};

/// How often a following standby's lag is written to status (a report
/// that changes what status shows otherwise — a failure, a stop, the
/// promotion — is written at once).
pub const STATUS_REFRESH: SignedDuration = SignedDuration::from_secs(10);

/// How often a demotion looks again at what it waits for (its changes
/// stored, the new primary's promotion).
const DEMOTION_POLL: SignedDuration = SignedDuration::from_secs(1);

pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<TaskOutcome> {
    let cluster = &input.validated.cluster;
    let Some(spec) = cluster.standby.as_ref() else {
        return Ok(TaskOutcome::Continue);
    };
    let reach = ctx.backups();
    let connected = (
        input.connected.endpoints.as_slice(),
        &input.connected.credentials,
    );
    let recorded = input.observed.recorded.standby.as_ref();
    let on_statefulset = input
        .observed
        .statefulset
        .as_deref()
        .and_then(standby::recorded_offset);
    let was_promoted = standby::is_promoted(recorded);
    // A running cluster with no offset of its own, promoted since it had
    // one, or told to follow another source than status says it followed,
    // is demoted: it follows only once its new primary says what it holds.
    let never_followed =
        on_statefulset.is_none() && recorded.and_then(|s| s.revision_offset).is_none();
    let source_changed = recorded
        .and_then(|s| s.source.as_deref())
        .is_some_and(|followed| followed != spec.describe());
    if input.formed()
        && input.connected.credentials.user().is_some()
        && (demotion::under_way(recorded)
            || (spec.following && (was_promoted || never_followed || source_changed)))
    {
        let demotion = if spec.following {
            demotion::demote(cluster, connected, recorded, &reach, input.now).await?
        } else {
            demotion::call_off(cluster, connected, recorded, &reach, input.now).await?
        };
        let settled = demotion.called_off || demotion.following.is_some();
        done.standby = Some(FollowReport {
            demotion: Some(demotion),
            ..FollowReport::default()
        });
        return Ok(if settled {
            TaskOutcome::Continue
        } else {
            TaskOutcome::RequeueAt(input.now + DEMOTION_POLL)
        });
    }
    // The offset status records (a demoted cluster's) is the one: a
    // StatefulSet read before it was written there is waited for.
    let offset = match recorded.and_then(|s| s.revision_offset) {
        Some(expected) => on_statefulset.filter(|&o| o == expected),
        None => on_statefulset,
    };
    done.standby = standby::ensure(
        cluster,
        connected,
        (input.formed(), offset, was_promoted),
        &reach,
    )
    .await?;
    let newly_promoted = done
        .standby
        .as_ref()
        .and_then(|r| r.promoted)
        .filter(|_| !was_promoted);
    let promoted = was_promoted || newly_promoted.is_some();
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
    // What a demoted primary of this one reads to follow it: written once
    // per promotion, again until it is.
    let promotion = newly_promoted.or_else(|| {
        recorded
            .filter(|s| was_promoted && s.promotion_recorded_time.is_none())
            .and_then(|s| {
                s.promoted_at_revision
                    .zip(s.promoted_time.as_ref().map(|t| t.0))
            })
    });
    if let (Some((held, at)), Some(offset)) = (promotion, offset)
        && standby::promotion::record(cluster, (held, offset, at), &reach).await?
    {
        done.standby
            .get_or_insert_with(FollowReport::default)
            .promotion_recorded = Some(input.now);
    }
    Ok(if done.standby.is_some() {
        TaskOutcome::RequeueAt(input.now + STATUS_REFRESH)
    } else {
        TaskOutcome::Continue
    })
}
