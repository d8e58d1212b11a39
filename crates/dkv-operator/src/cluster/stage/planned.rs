//! Stage 4, planned: the membership step of this pass
//! ([`crate::cluster::plan`], pure) from the validated spec and what etcd
//! said, with the backup a restoring cluster starts from and where the
//! cluster stands with hibernation; then whether the pass goes on (paused,
//! or a new operation pinned first).

use dkv_api::distributedkv::v1beta1::{
    CorruptMemberPolicy, Operation, OperationKind, RecoveryPolicy,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use tracing::{debug, info};

use crate::cluster::backups::restore;
use crate::cluster::build;
use crate::cluster::context::Context;
use crate::cluster::dereference::{Observed, Recorded};
use crate::cluster::error::{Error, Result};
use crate::cluster::lifecycle::hibernation;
use crate::cluster::membership;
use crate::cluster::plan::{self, Plan};
use crate::cluster::upgrade::member_side::{self, Decision, MemberSide};
use crate::cluster::upgrade::rollout;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;

use super::connected::Connected;
use super::validated::Validated;

/// How long after a NOSPACE recovery a new NOSPACE is left to the user:
/// coming back that soon, it says the live data fills the quota.
pub const NOSPACE_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);

/// The plan of this pass, and whether the pass carries it out.
pub struct Planned {
    pub plan: Plan,
    /// Where the cluster stands with `spec.hibernation`.
    pub hibernation: hibernation::State,
    /// The operation pinned: as recorded, or new this pass.
    pub operation: Option<Operation>,
    pub gate: Gate,
    /// A rollout that missed `spec.rollout.progressDeadline`.
    pub stalled: Option<rollout::Stalled>,
}

/// Whether the pass goes on to build and apply the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Proceed,
    /// The cluster is paused (`dkv.io/paused`): status only.
    Paused,
    /// A new operation was pinned; it is recorded in status before anything
    /// of it happens, so that a crash or a spec edit resumes it instead of
    /// starting another. Its first step runs at the next look.
    Pinned,
}

/// Plans the pass. `given`: the plan of a running cluster being adopted
/// (its replicas and membership record come from the adoption, see
/// [`crate::cluster::adoption`]), instead of the membership planner's.
pub async fn planned(
    validated: &Validated,
    connected: &Connected,
    observed: &Observed,
    given: Option<Plan>,
    now: jiff::Timestamp,
    ctx: &Context,
) -> Result<Planned> {
    let cluster = &validated.cluster;
    let recorded = &observed.recorded;
    if connected.space_alarm()
        && let Some(at) = ctx.space_reclaimed_at(&cluster.object_ref())
        && let retry_at = at + NOSPACE_RETRY
        && retry_at > now
    {
        return Err(Error::NoSpaceRecurring {
            message: format!(
                "etcd raised NOSPACE again {}s after dkv compacted, defragmented and disarmed it at {at:.0}: the live data itself fills spec.etcd.quotaBackendBytes ({} bytes). Raise the quota (up to 8 GiB) or delete data (etcd accepts deletes while NOSPACE is raised); dkv recovers again from {retry_at:.0} on",
                now.as_second() - at.as_second(),
                cluster.etcd.quota_backend_bytes
            ),
        });
    }
    // Member pods being deleted: stopping, not missing.
    let terminating: Vec<i32> = observed
        .pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter_map(|p| naming::ordinal_of(&cluster.name, &p.name_any()))
        .collect();
    let view = plan::MembershipView {
        members: connected.members.clone(),
        pods: validated.pods.clone(),
        pinned: pinned(cluster, recorded),
        space_alarm: connected.space_alarm(),
        recovery_allowed: recovery_allowed(cluster, recorded, RecoveryPolicy::ForceNewCluster, now),
        // Only with a backup to restore from.
        restore_allowed: recovery_allowed(
            cluster,
            recorded,
            RecoveryPolicy::RestoreFromBackup,
            now,
        ) && recorded.last_backup.is_some(),
        recovery_epoch: recorded.recovery_epoch(),
        tls_serial: connected
            .credentials
            .tls
            .as_ref()
            .map(|t| t.member_serial.clone()),
        stranded: validated.stranded.clone(),
        terminating: terminating.clone(),
        corrupt: connected.corrupt.iter().map(|c| c.ordinal).collect(),
        replace_corrupt: cluster.corrupt_member == CorruptMemberPolicy::Replace,
        downgrade: connected.downgrade.clone(),
        replacement: recorded.replacement(),
    };
    let statefulset = observed.statefulset.as_deref();
    let mut plan = match given {
        Some(given) => given,
        None => plan::plan(cluster, statefulset, observed.record.as_ref(), &view),
    };
    plan.restore = restore_source(cluster, recorded, &plan, statefulset, ctx).await?;
    if let Some(sts) = statefulset {
        plan.replay = restore::pending_replay(sts);
        plan.replayed = restore::replayed(sts);
    }
    // A standby's offset is recorded in status too (a demoted cluster's in
    // the pass that writes it on the StatefulSet): status wins over a
    // StatefulSet read before, and gives it back to one re-created.
    plan.standby_offset = recorded
        .standby
        .as_ref()
        .and_then(|s| s.revision_offset)
        .or_else(|| statefulset.and_then(crate::cluster::backups::standby::recorded_offset));
    // Hibernation overrides the plan once the members are (to be) stopped:
    // no membership step reads their absence as a loss.
    let hibernation = hibernation::decide(&hibernation::HibernationInputs {
        cluster: &cluster.name,
        wanted: cluster.hibernation,
        statefulset,
        operation: recorded.operation.as_ref(),
        plan: &plan,
        members: connected.members.as_deref(),
        pods: &validated.pods,
        terminating: terminating.len(),
        recorded_waking: recorded.waking,
    });
    if hibernation.stopped() {
        plan = hibernation::stopped_plan(plan);
    }
    plan.member_side = member_side(cluster, &plan, statefulset, recorded, ctx).await?;
    let stalled = rollout::stalled(
        cluster,
        statefulset.and_then(plan::update_revision).as_deref(),
        &validated.pods,
        connected.members.as_deref(),
        now,
    );
    let mut operation = recorded.operation.clone();
    let gate = if cluster.paused {
        Gate::Paused
    } else if let membership::Step::Begin(pin) = &plan.step {
        let pinned = Operation {
            kind: pin.kind,
            target: naming::member(&cluster.name, pin.ordinal),
            started_at: Time(now),
        };
        info!(kind = ?pin.kind, target = %pinned.target, "pinning operation");
        operation = Some(pinned);
        Gate::Pinned
    } else {
        Gate::Proceed
    };
    Ok(Planned {
        plan,
        hibernation,
        operation,
        gate,
        stalled,
    })
}

/// Which image runs the members' dkv containers (see
/// [`crate::cluster::upgrade::member_side`]): an operator-only rollout takes a turn
/// from the installation's budget, or keeps the running template whole
/// (read from the API: the cache holds no pod spec) until the next look.
async fn member_side(
    cluster: &ValidatedCluster,
    plan: &Plan,
    statefulset: Option<&StatefulSet>,
    recorded: &Recorded,
    ctx: &Context,
) -> Result<MemberSide> {
    let hash = build::statefulset::member_side_hash(cluster, plan, &ctx.member_side_code);
    let built = |keep| MemberSide::Built {
        hash: hash.clone(),
        keep,
    };
    let Some(sts) = statefulset else {
        return Ok(built(None));
    };
    let running = member_side::RunningTemplate::of(sts);
    let wanted = member_side::Wanted {
        member_side: &hash,
        generation: cluster.generation,
        restarted_at: cluster.restarted_at.as_deref(),
        tls_serial: plan.tls_serial.as_deref(),
        replicas: plan.replicas,
        under_way: plan.creating
            || cluster.rolled_back.is_some()
            || recorded.operation.is_some()
            || plan.restore.is_some()
            || plan.replay.is_some(),
    };
    match member_side::decide(Some(&running), &wanted) {
        Decision::Current => Ok(built(None)),
        Decision::Keep { image } => Ok(built(Some(image))),
        Decision::NeedsTurn => match ctx.member_upgrades.take() {
            Ok(()) => {
                info!(
                    from = running.image.as_deref().unwrap_or("(unrecorded)"),
                    to = %cluster.operator_image,
                    "rolling the members onto this operator's member side"
                );
                Ok(built(None))
            }
            Err(wait) => {
                debug!(?wait, "operator-only rollout waits for a turn");
                let name = sts.name_any();
                let full =
                    kube::Api::<StatefulSet>::namespaced(ctx.client.clone(), &cluster.namespace)
                        .get(&name)
                        .await
                        .map_err(|source| Error::Read {
                            kind: "StatefulSet",
                            name,
                            source,
                        })?;
                Ok(MemberSide::Held {
                    template: Box::new(full.spec.template),
                })
            }
        },
    }
}

/// The operation pinned in status, as the planner reads it.
fn pinned(cluster: &ValidatedCluster, recorded: &Recorded) -> Option<membership::Pinned> {
    let op = recorded.operation.as_ref()?;
    let ordinal = naming::ordinal_of(&cluster.name, &op.target)?;
    Some(membership::Pinned {
        kind: op.kind,
        ordinal,
    })
}

/// Whether `spec.recovery` allows its `policy` now: it is the configured
/// one, and quorum has been lost (the `Degraded/QuorumLost` condition) for
/// at least its grace period.
fn recovery_allowed(
    cluster: &ValidatedCluster,
    recorded: &Recorded,
    policy: RecoveryPolicy,
    now: jiff::Timestamp,
) -> bool {
    let Some((configured, after)) = cluster.recovery else {
        return false;
    };
    configured == policy
        && recorded
            .quorum_lost_since
            .is_some_and(|since| now.duration_since(since) >= after)
}

/// The backup a cluster being created from `spec.bootstrap.restore` starts
/// from: resolved when its StatefulSet is first created, then read back
/// from it; `None` once the cluster has formed (its template then drops the
/// restore steps) and for clusters that do not restore.
async fn restore_source(
    cluster: &ValidatedCluster,
    recorded: &Recorded,
    plan: &Plan,
    statefulset: Option<&StatefulSet>,
    ctx: &Context,
) -> Result<Option<restore::ResolvedRestore>> {
    let restoring = recorded
        .operation
        .as_ref()
        .filter(|op| op.kind == OperationKind::RestoreFromBackup);
    if let Some(op) = restoring {
        // Recovery from the newest backup: resolved at the first pass of
        // the operation, then read back from the StatefulSet.
        let epoch = format!("restore-{}", op.started_at.0.as_second());
        if let Some(source) = statefulset
            .and_then(restore::from_statefulset)
            .filter(|s| s.epoch.as_deref() == Some(epoch.as_str()))
        {
            return Ok(Some(source));
        }
        let mut source =
            restore::resolve_latest(&ctx.client, cluster, recorded.last_backup.as_ref(), epoch)
                .await?;
        // The cluster's own backups: its own key (every entry of the
        // Secret, so that one rotated out still decrypts older backups).
        source.decryption_keys = cluster
            .backup
            .as_ref()
            .and_then(|b| b.encryption.clone())
            .map(
                |reference| dkv_api::distributedkv::v1beta1::KeySecretReference {
                    key: None,
                    ..reference
                },
            );
        return Ok(Some(source));
    }
    let Some(wanted) = &cluster.restore else {
        return Ok(None);
    };
    if !plan.creating || recorded.formed {
        return Ok(None);
    }
    match statefulset {
        Some(sts) => Ok(restore::from_statefulset(sts)),
        None => {
            let mut source = restore::resolve(&ctx.client, &cluster.namespace, wanted).await?;
            source.decryption_keys = wanted.decryption_keys.clone();
            Ok(Some(source))
        }
    }
}
