//! A cluster's side of its backups: what its `DistributedKVBackup` records
//! say ([`catalogue`]), the encryption keys its pods read ([`keys`]),
//! continuous backup ([`continuous`]), restoring a new cluster from a
//! backup or a continuous backup's history ([`restore`]) and the scratch
//! clusters that verify a backup ([`verification`]).

pub mod catalogue;
pub(crate) mod continuous;
pub mod restore;
pub(crate) mod verification;

use dkv_api::DistributedKV;
use kube::ResourceExt;

use self::catalogue::BackupSummary;
use super::validate::ValidatedCluster;
use crate::cluster::context::Context;
use crate::continuous_backup::Report;

/// What status says of the cluster's backups after a pass: what the
/// records say, and where continuous backup stands — from the agent's
/// report of this pass (`reported`) or, when the pass did not get that
/// far, its last one. `cluster`: the spec, when the pass validated it. A
/// new gap in the recorded history is reported as an Event.
pub async fn observe(
    dkv: &DistributedKV,
    cluster: Option<&ValidatedCluster>,
    reported: Option<&Report>,
    ctx: &Context,
    now: jiff::Timestamp,
) -> BackupSummary {
    let mut backups = catalogue::observe(dkv, &ctx.stores);
    let report = reported.cloned().or_else(|| {
        ctx.agents
            .report(&dkv.namespace().unwrap_or_default(), &dkv.name_any())
    });
    (backups.continuous, backups.continuous_failing) =
        continuous::observe(dkv, report.as_ref(), continuous::interval(cluster), now);
    continuous::report_new_gaps(dkv, backups.continuous.as_ref(), ctx).await;
    backups
}
