//! The `DistributedKV` controller.
//!
//! One reconcile is a pipeline: [`dereference`] (observe the caches) →
//! [`validate`] → [`credentials`] → [`plan`] → [`build`] → [`apply`] and
//! [`execute`] one step → [`status`]. Validate, plan and build are pure and
//! tested from YAML fixtures. However a pass ends, [`status`] alone writes
//! the status, from what the pass observed, and [`outcome`] alone decides
//! what an error shows and when to look again.
//! Deletion runs [`cleanup`] behind the `dkv.io/finalizer` finalizer.

pub(crate) mod apply;
pub(crate) mod auth;
pub mod backup_catalogue;
pub(crate) mod backup_keys;
pub mod build;
pub(crate) mod ca_rotation;
pub(crate) mod cert_manager;
pub(crate) mod certificates;
pub(crate) mod cleanup;
pub mod context;
pub(crate) mod continuous;
pub(crate) mod credentials;
pub(crate) mod defrag;
pub(crate) mod dereference;
pub(crate) mod diff;
pub mod error;
pub mod etcd_access;
pub(crate) mod execute;
pub mod hibernation;
pub(crate) mod lost_node;
pub mod membership;
pub mod membership_record;
pub(crate) mod metrics_view;
pub mod naming;
mod node_access;
pub mod observe_members;
pub mod outcome;
pub mod plan;
pub mod restore;
pub(crate) mod schedule;
pub mod status;
pub(crate) mod tls;
pub mod validate;
pub(crate) mod verification;
pub mod volumes;
pub mod watches;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::events::{Event, EventType};
use dkv_api::distributedkv::v1beta1::{Operation, OperationKind, RecoveryPolicy};
use dkv_api::{DistributedKV, DistributedKVBackup};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{Instrument, field, info, info_span, warn};

use self::context::Context;
use self::error::{Error, Result};
use self::outcome::Outcome;
pub use self::outcome::retry_delay;
use self::watches::{Stores, child_stream, spec_relevance};

/// Finalizer that guards deletion (final backup, volume reclaim).
pub const FINALIZER: &str = "dkv.io/finalizer";

/// Runs one reconcile of `dkv`: the finalizer helper routes to the step
/// pipeline or to cleanup; then, however the pass ended, the one status
/// writer derives status from what it observed, and [`outcome`] decides
/// what follows.
pub async fn reconcile(dkv: Arc<DistributedKV>, ctx: Arc<Context>) -> Result<Action> {
    let obj_ref = ObjectRef::from_obj(dkv.as_ref());
    let span = info_span!("reconcile", cluster = %obj_ref, generation = field::Empty);
    if let Some(generation) = dkv.meta().generation {
        span.record("generation", generation);
    }
    async move {
        let started = Instant::now();
        let namespace = dkv.namespace().ok_or(Error::MissingNamespace)?;
        let api: Api<DistributedKV> = Api::namespaced(ctx.client.clone(), &namespace);
        let mut seen = status::Seen::default();
        let mut pipeline_outcome = None;
        let (seen_by_pass, outcome_of_pass, pass_ctx) =
            (&mut seen, &mut pipeline_outcome, ctx.as_ref());
        let result = finalizer(&api, FINALIZER, dkv.clone(), |event| async move {
            match event {
                FinalizerEvent::Apply(dkv) => {
                    let outcome = reconcile_cluster(&dkv, pass_ctx, seen_by_pass).await?;
                    *outcome_of_pass = Some(outcome);
                    // Replaced below, once status says whether it is Degraded.
                    Ok(Action::await_change())
                }
                FinalizerEvent::Cleanup(dkv) => cleanup::cleanup(&dkv, pass_ctx).await,
            }
        })
        .await
        .map_err(unwrap_finalizer_error)
        .map(|action| pipeline_outcome.unwrap_or(Outcome::Finalizer(action)));

        let now = jiff::Timestamp::now();
        let fault = result
            .as_ref()
            .err()
            .and_then(|err| outcome::fault_of(&dkv, err));
        let mut backups = backup_catalogue::observe(&dkv, &ctx.stores);
        let report = seen
            .continuous
            .clone()
            .or_else(|| ctx.agents.report(&namespace, &dkv.name_any()));
        let interval = seen
            .cluster
            .as_ref()
            .and_then(|c| c.backup.as_ref())
            .and_then(|b| b.continuous)
            .map(|cut| cut.interval);
        (backups.continuous, backups.continuous_failing) =
            continuous::observe(&dkv, report.as_ref(), interval, now);
        continuous::report_new_gaps(&dkv, backups.continuous.as_ref(), &ctx).await;
        let status = status::derive(&dkv, &seen, fault.as_ref(), &backups, &Time(now));
        if dkv.meta().deletion_timestamp.is_none() {
            let current = status.as_ref().or(dkv.status.as_ref());
            ctx.metrics
                .observe_cluster(&metrics_view::view(&dkv, current, &seen, interval));
        }
        // Degraded, or still progressing (forming, rolling out): what etcd
        // says is not watched, so such a cluster is looked at again soon
        // even when no step is under way (a member that hangs while the
        // cluster forms changes no object).
        let unsettled = status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                (c.type_ == dkv_api::conditions::types::DEGRADED
                    || c.type_ == dkv_api::conditions::types::PROGRESSING)
                    && c.status == "True"
            })
        });
        let written = match status {
            Some(status) => status::write(&dkv, status, &ctx).await.map(drop),
            None => Ok(()),
        };
        let result = match (result, written) {
            (Ok(outcome), Ok(())) => Ok(outcome::next_action(&outcome, unsettled, now)),
            (Ok(_), Err(err)) => Err(err),
            (Err(err), Ok(())) => Err(err),
            (Err(err), Err(status_err)) => {
                warn!(error = %status_err, "failed to report the error in status");
                Err(err)
            }
        };

        tracing::debug!(?result, unsettled, "pass finished");
        match &result {
            Ok(_) => {
                ctx.clear_failures(&obj_ref);
                ctx.metrics.observe_reconcile("success", started.elapsed());
            }
            Err(err) => {
                let category = err.category();
                ctx.metrics
                    .observe_reconcile(category.as_str(), started.elapsed());
                ctx.metrics.count_error(category.as_str(), err.step());
                ctx.metrics.count_cluster_error(
                    &namespace,
                    &dkv.name_any(),
                    &format!("{}/{}", category.as_str(), err.step()),
                );
                outcome::report(&dkv, err, &ctx).await;
            }
        }
        result
    }
    .instrument(span)
    .await
}

/// Errors of our own steps come back from the finalizer helper wrapped;
/// unwrap them so their category is the step's.
fn unwrap_finalizer_error(err: kube::runtime::finalizer::Error<Error>) -> Error {
    use kube::runtime::finalizer::Error as F;
    match err {
        F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner,
        other => Error::Finalizer(Box::new(other)),
    }
}

/// The step pipeline of a cluster that is not being deleted: observe →
/// validate → credentials → plan → build → apply and execute one step.
/// Everything it observes and decides goes into `seen`, from which status
/// is derived however the pass ends.
async fn reconcile_cluster(
    dkv: &DistributedKV,
    ctx: &Context,
    seen: &mut status::Seen,
) -> Result<Outcome> {
    let namespace = dkv.namespace().ok_or(Error::MissingNamespace)?;
    ctx.stores
        .ready()
        .map_err(|what| Error::CacheNotReady { what })?;

    // 1. Observe: the caches, then the member pods.
    let observed = dereference::observe(dkv, &namespace, &ctx.stores);
    seen.statefulset = observed.statefulset.clone();
    seen.client_endpoints = observed.client_endpoints.clone();
    seen.operation = dkv.status.as_ref().and_then(|s| s.operation.clone());
    let epoch = recovery_epoch(dkv);

    // 2. Validate.
    let cluster = validate::validate(dkv, &observed.facts, &ctx.defaults)?;
    let pods = observe_members::member_pods(
        &cluster.name,
        &observed.pods,
        epoch.as_deref(),
        cluster.tls.client_scheme(),
    );
    seen.pods = pods.clone();
    seen.volumes = Some(volumes::observe(&cluster, &observed.claims));
    let cluster = &*seen.cluster.insert(cluster);
    let now = jiff::Timestamp::now();
    let lost_nodes =
        observe_lost_nodes(dkv, cluster, &observed, seen.operation.as_ref(), now, ctx).await?;
    seen.placements = lost_nodes.placements;
    seen.lost = lost_nodes.lost;

    // 3. Credentials, then etcd's view through them.
    let deployed = observed.statefulset.is_some();
    let exists = deployed
        || observed
            .record
            .as_ref()
            .is_some_and(|r| r.state == membership_record::ClusterState::Existing);
    let credentials = credentials::ensure(dkv, cluster, &pods, exists, ctx).await?;
    let endpoints: Vec<String> = pods.iter().filter_map(|p| p.endpoint.clone()).collect();
    let admin = (!endpoints.is_empty() && deployed).then(|| {
        ctx.etcd.connect(
            &endpoints,
            credentials.client_identity(),
            credentials.user(),
        )
    });
    let members = match &admin {
        Some(admin) => observe_members::observe_members(&cluster.name, admin.as_ref(), &pods).await,
        None => None,
    };
    seen.members = members.clone();
    let alarms = match (&admin, &members) {
        (Some(admin), Some(_)) => admin.alarms().await.ok(),
        _ => None,
    };
    let space_alarm = alarms
        .iter()
        .flatten()
        .any(|a| a.kind == dkv_etcd::AlarmKind::NoSpace);
    let obj_ref = ObjectRef::from_obj(dkv);
    seen.alarms = alarms.map(|alarms| {
        alarms
            .iter()
            .map(|a| {
                let member = members
                    .iter()
                    .flatten()
                    .find(|m| m.id == a.member.0)
                    .map_or_else(
                        || format!("{:x}", a.member.0),
                        |m| naming::member(&cluster.name, m.ordinal),
                    );
                let alarm = match a.kind {
                    dkv_etcd::AlarmKind::NoSpace => "NOSPACE",
                    dkv_etcd::AlarmKind::Corrupt => "CORRUPT",
                };
                (member, alarm.to_owned())
            })
            .collect()
    });
    seen.certificates = credentials
        .tls
        .as_ref()
        .map(|t| t.expiries.clone())
        .unwrap_or_default();

    // 4. Plan (pure).
    if space_alarm
        && let Some(at) = ctx.space_reclaimed_at(&obj_ref)
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
        members,
        pods,
        pinned: pinned_operation(dkv),
        space_alarm,
        recovery_allowed: recovery_allowed(dkv, RecoveryPolicy::ForceNewCluster, now),
        // Only with a backup to restore from.
        restore_allowed: recovery_allowed(dkv, RecoveryPolicy::RestoreFromBackup, now)
            && dkv.status.as_ref().is_some_and(|s| s.last_backup.is_some()),
        recovery_epoch: epoch,
        tls_serial: credentials.tls.as_ref().map(|t| t.member_serial.clone()),
        stranded: lost_nodes.stranded,
        terminating: terminating.clone(),
    };
    let mut plan = plan::plan(
        cluster,
        observed.statefulset.as_deref(),
        observed.record.as_ref(),
        &view,
    );
    let restore = restore_source(dkv, cluster, &plan, observed.statefulset.as_deref(), ctx).await;
    plan.restore = restore?;
    if let Some(sts) = observed.statefulset.as_deref() {
        plan.replay = restore::pending_replay(sts);
        plan.replayed = restore::replayed(sts);
    }
    // Hibernation overrides the plan once the members are (to be) stopped:
    // no membership step reads their absence as a loss.
    let hibernation = hibernation::decide(
        dkv,
        &hibernation::Facts {
            cluster: &cluster.name,
            wanted: cluster.hibernation,
            statefulset: observed.statefulset.as_deref(),
            operation: seen.operation.as_ref(),
            plan: &plan,
            members: seen.members.as_deref(),
            pods: &seen.pods,
            terminating: terminating.len(),
        },
    );
    if hibernation.stopped() {
        plan = hibernation::stopped_plan(plan);
    }
    seen.hibernation = hibernation.clone();
    let plan = &*seen.plan.insert(plan);

    if cluster.paused {
        return Ok(Outcome::Paused);
    }

    // A new operation is pinned in status before anything of it happens, so
    // that a crash or a spec edit resumes it instead of starting another.
    if let membership::Step::Begin(pin) = &plan.step {
        let operation = Operation {
            kind: pin.kind,
            target: naming::member(&cluster.name, pin.ordinal),
            started_at: Time(now),
        };
        info!(kind = ?pin.kind, target = %operation.target, "pinning operation");
        seen.operation = Some(operation);
        return Ok(Outcome::Pinned);
    }

    // 5. Build (pure), then apply the children.
    let prepared = build::build(cluster, plan);
    let applied = apply::apply(
        &ctx.client,
        &namespace,
        prepared,
        &observed,
        &ctx.verified_templates,
    )
    .await?;
    seen.statefulset = Some(Arc::new(applied.statefulset));
    announce_awake(dkv, &hibernation, ctx).await;
    if plan.hibernated {
        // Nothing records changes of stopped members; what was recorded
        // stays restorable, and the agent starts again on waking.
        ctx.agents.stop(&namespace, &cluster.name);
        return Ok(Outcome::Applied {
            busy: !matches!(hibernation, hibernation::State::Hibernated),
            advanced: false,
            etcd: false,
            rotating: false,
            due_at: credentials.tls.as_ref().map(|t| t.renew_at),
        });
    }

    // 6. Execute the plan's one step against etcd.
    if let Some(admin) = &admin {
        execute::execute(
            &plan.step,
            &execute::Target {
                client: &ctx.client,
                admin: admin.as_ref(),
                namespace: &namespace,
                cluster: &cluster.name,
                pods: &seen.pods,
                peer_scheme: cluster.tls.peer_scheme(),
            },
        )
        .await?;
        if matches!(plan.step, membership::Step::ReclaimSpace) {
            space_reclaimed(dkv, cluster, &obj_ref, now, ctx).await;
        }
        if let membership::Step::EvictFromLostNode {
            ordinal, claim_uid, ..
        } = &plan.step
        {
            announce_eviction(dkv, cluster, *ordinal, claim_uid.is_some(), &seen.lost, ctx).await;
        }
        // Authentication goes on once the cluster has formed and nothing
        // else is under way; the root user exists before it does.
        if let Some(auth) = credentials.auth_pending()
            && matches!(plan.step, membership::Step::Converged)
            && !plan.creating
        {
            enable_auth(dkv, cluster, admin.as_ref(), auth, ctx).await?;
            return Ok(Outcome::AuthEnabled);
        }
    }
    // A restore from continuous backup replays the recorded changes once
    // every member runs from the base snapshot; clients are let in after.
    if let (Some(pending), Some(_)) = (&plan.replay, &admin)
        && !plan.creating
        && matches!(plan.step, membership::Step::Converged)
        && seen
            .members
            .as_ref()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|m| m.healthy))
        && let Some(replay) = &pending.replay
    {
        continuous::replay(dkv, cluster, pending, replay, &endpoints, &credentials, ctx).await?;
        return Ok(Outcome::Applied {
            busy: true,
            advanced: true,
            etcd: true,
            rotating: false,
            due_at: None,
        });
    }
    let finished = match &plan.step {
        membership::Step::Finish(pin) => {
            info!(kind = ?pin.kind, ordinal = pin.ordinal, "operation complete");
            true
        }
        // Deleting the removed member's volume is the last step of a
        // removal, and it has just succeeded (or the volume was gone).
        membership::Step::DeleteVolume { ordinal } if admin.is_some() => {
            info!(ordinal, "member removal complete");
            true
        }
        _ => false,
    };
    if finished {
        seen.operation = None;
    }
    // Member volumes grow in place once the StatefulSet exists (its claims
    // do); no member restarts for it. Once they all have grown, and nothing
    // else is under way, the StatefulSet's claim template follows.
    let grown = volumes::grow(&ctx.client, cluster, &observed.claims).await?;
    let idle = seen.operation.is_none() && matches!(plan.step, membership::Step::Converged);
    if idle
        && !plan.creating
        && volumes::template_behind(cluster, &grown)
        && let (Some(live), Some(storage)) = (seen.statefulset.clone(), &cluster.storage)
    {
        let mut aligned = cluster.clone();
        if let Some(aligned_storage) = aligned.storage.as_mut() {
            aligned_storage.template_size = storage.size.clone();
        }
        let desired = build::build(&aligned, plan).statefulset;
        let recreated =
            volumes::recreate_statefulset(&ctx.client, &namespace, &live, &desired).await?;
        seen.statefulset = Some(Arc::new(recreated));
    }
    seen.volumes = Some(grown);

    // 7. Continuous backup records once the cluster has formed (and a
    // restored cluster has all its data).
    let formed = admin.is_some() && !plan.creating && plan.replay_pending().is_none();
    seen.continuous = continuous::ensure(cluster, &endpoints, &credentials, formed, ctx).await?;
    // A scratch cluster verifying a backup reports and goes once formed.
    verification::check(
        dkv,
        formed && matches!(plan.step, membership::Step::Converged),
        admin.as_deref(),
        &endpoints,
        ctx,
    )
    .await?;
    // 8. Scheduled defragmentation, only on a healthy, idle cluster.
    let all_healthy = seen
        .members
        .as_ref()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|m| m.healthy));
    if let (Some(settings), Some(admin)) = (&cluster.defrag, &admin)
        && formed
        && all_healthy
        && seen.operation.is_none()
        && matches!(plan.step, membership::Step::Converged)
    {
        let last = dkv
            .status
            .as_ref()
            .and_then(|s| s.last_defrag_time.as_ref())
            .or(dkv.metadata.creation_timestamp.as_ref())
            .map_or(now, |t| t.0);
        if defrag::due(&settings.schedule, last, now) {
            let members: Vec<defrag::Member> = seen
                .pods
                .iter()
                .filter_map(|p| {
                    Some(defrag::Member {
                        name: naming::member(&cluster.name, p.view.ordinal),
                        endpoint: p.endpoint.clone()?,
                    })
                })
                .collect();
            let (results, stopped) =
                defrag::run(admin.as_ref(), &members, settings.threshold_percent).await;
            report_defrag(dkv, cluster, &results, stopped.as_ref(), ctx).await;
            if stopped.is_none() {
                seen.defragged_at = Some(Time(now));
            }
        }
    }
    let defrag_at = cluster.defrag.as_ref().and_then(|settings| {
        let last = seen
            .defragged_at
            .as_ref()
            .or(dkv
                .status
                .as_ref()
                .and_then(|s| s.last_defrag_time.as_ref()))
            .map_or(now, |t| t.0);
        defrag::next_run(&settings.schedule, last)
    });
    let refresh_at = cluster
        .backup
        .as_ref()
        .and_then(|b| b.continuous)
        .map(|_| now + continuous::STATUS_REFRESH);

    let busy = seen.operation.is_some() || !matches!(plan.step, membership::Step::Converged);
    Ok(Outcome::Applied {
        busy,
        advanced: plan.step.advances(),
        etcd: admin.is_some(),
        rotating: credentials
            .tls
            .as_ref()
            .is_some_and(|t| t.rotating.is_some()),
        due_at: [
            credentials.tls.as_ref().map(|t| t.renew_at),
            seen.volumes.as_ref().and_then(status::volume_grace_ends),
            // A lost member's replacement comes due.
            seen.lost
                .iter()
                .filter_map(|l| {
                    lost_node::replace_at(lost_node::replace_policy(cluster.lost_node.as_ref()), l)
                })
                .filter(|at| *at > now)
                .min(),
            refresh_at,
            defrag_at,
        ]
        .into_iter()
        .flatten()
        .min(),
    })
}

/// What a pass observed of its members' nodes.
struct LostNodes {
    /// Where each member pod runs (for status).
    placements: Vec<lost_node::Placement>,
    /// The members whose node is lost (for status).
    lost: Vec<lost_node::LostMember>,
    /// What the planner needs of the members to move off their node.
    stranded: Vec<membership::Stranded>,
}

/// Where each member pod runs, which members' nodes are lost, and what the
/// planner needs of the members to move off their node: the facts of their
/// pods and volumes are read only with `spec.recovery.lostNode: Replace` or
/// while a relocation is pinned (`operation`).
async fn observe_lost_nodes(
    dkv: &DistributedKV,
    cluster: &validate::ValidatedCluster,
    observed: &dereference::Observed,
    operation: Option<&Operation>,
    now: jiff::Timestamp,
    ctx: &Context,
) -> Result<LostNodes> {
    let mut placements = lost_node::placements(&cluster.name, &observed.pods, |node| {
        ctx.stores
            .nodes
            .as_ref()
            .and_then(|nodes| nodes.get(&ObjectRef::new(node)))
    });
    if ctx.stores.nodes.is_none() {
        // Nodes are not watched: a node missing from no cache is not gone.
        for placement in &mut placements {
            placement.loss = None;
        }
    }
    let previous = dkv.status.as_ref().map(|s| s.members.as_slice());
    let lost = lost_node::lost_members(
        &cluster.name,
        &placements,
        previous.unwrap_or_default(),
        now,
    );
    let policy = lost_node::replace_policy(cluster.lost_node.as_ref());
    let relocating = operation
        .filter(|op| op.kind == OperationKind::RelocateMember)
        .and_then(|op| {
            Some((
                naming::ordinal_of(&cluster.name, &op.target)?,
                op.started_at.0,
            ))
        });
    if policy.is_none() && relocating.is_none() {
        let stranded = lost_node::stranded(&lost, None, None, |_| None, now);
        return Ok(LostNodes {
            placements,
            lost,
            stranded,
        });
    }
    let mut facts = std::collections::BTreeMap::new();
    for ordinal in lost
        .iter()
        .map(|l| l.ordinal)
        .chain(relocating.map(|(ordinal, _)| ordinal))
    {
        let found = lost_node::pod_facts(
            &ctx.client,
            cluster,
            ordinal,
            &observed.pods,
            &observed.claims,
        )
        .await?;
        facts.insert(ordinal, found);
    }
    let stranded = lost_node::stranded(
        &lost,
        policy,
        relocating,
        |ordinal| facts.get(&ordinal).cloned().flatten(),
        now,
    );
    Ok(LostNodes {
        placements,
        lost,
        stranded,
    })
}

/// The Event of a member pod force-deleted off a lost node.
async fn announce_eviction(
    dkv: &DistributedKV,
    cluster: &validate::ValidatedCluster,
    ordinal: i32,
    claim_deleted: bool,
    lost: &[lost_node::LostMember],
    ctx: &Context,
) {
    let member = naming::member(&cluster.name, ordinal);
    let node = lost
        .iter()
        .find(|l| l.ordinal == ordinal)
        .map_or_else(String::new, |l| format!(" on node {} ({})", l.node, l.loss));
    let note = if claim_deleted {
        format!(
            "{member}{node} left etcd; its pod was force-deleted and its claim {} (bound to that node) deleted: the StatefulSet re-creates it elsewhere, empty, and it joins as a learner",
            naming::volume_claim(&cluster.name, ordinal)
        )
    } else if cluster.storage.is_some() {
        format!(
            "the pod of {member}{node} was force-deleted: the StatefulSet re-creates it elsewhere and it restarts from its volume, which follows it"
        )
    } else {
        format!(
            "{member}{node} left etcd; its pod was force-deleted: the StatefulSet re-creates it elsewhere, empty, and it joins as a learner"
        )
    };
    info!(%note, "member moved off a lost node");
    context::publish(
        dkv,
        Event {
            type_: EventType::Warning,
            reason: "MemberEvicted".to_owned(),
            note: Some(note),
            action: "RelocateMember".to_owned(),
            secondary: Some(member_pod_ref(&cluster.namespace, &member)),
        },
        ctx,
    )
    .await;
}

/// A member pod, as the related object of an Event about it.
fn member_pod_ref(namespace: &str, member: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(member.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    }
}

/// The Event of a cluster whose members are all back after hibernation.
/// (That they stop and have stopped are the Events of `Available` turning
/// `Hibernating`, then `Hibernated`.)
async fn announce_awake(dkv: &DistributedKV, state: &hibernation::State, ctx: &Context) {
    if *state != hibernation::State::Awake || !hibernation::recorded_waking(dkv) {
        return;
    }
    info!("awake after hibernation");
    context::publish(
        dkv,
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

/// An Event per member a defragmentation run looked at, the counter, and
/// one Event if the run stopped early.
async fn report_defrag(
    dkv: &DistributedKV,
    cluster: &validate::ValidatedCluster,
    results: &[defrag::MemberResult],
    stopped: Option<&defrag::Stopped>,
    ctx: &Context,
) {
    let size = |bytes: i64| {
        if bytes >= 1024 * 1024 {
            format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
        } else {
            format!("{:.0} KiB", bytes as f64 / 1024.0)
        }
    };
    for result in results {
        let (type_, reason, note) = match result {
            defrag::MemberResult::Defragmented {
                member,
                leader,
                before,
                after,
            } => {
                ctx.metrics
                    .count_defragmentation(&cluster.namespace, &cluster.name, true);
                (
                    EventType::Normal,
                    "Defragmented",
                    format!(
                        "defragmented {member}{}: database file {} -> {}",
                        if *leader { " (leader, last)" } else { "" },
                        size(*before),
                        size(*after)
                    ),
                )
            }
            defrag::MemberResult::Skipped { member, percent } => (
                EventType::Normal,
                "DefragSkipped",
                format!(
                    "{member} not defragmented: {percent}% of its database file is free, below spec.maintenance.defrag.thresholdPercent"
                ),
            ),
            defrag::MemberResult::Failed { member, message } => {
                ctx.metrics
                    .count_defragmentation(&cluster.namespace, &cluster.name, false);
                (
                    EventType::Warning,
                    "DefragFailed",
                    format!("defragmenting {member} failed: {message}"),
                )
            }
        };
        info!(%note, "scheduled defragmentation");
        // The member pod as the related object: one Event per member, not
        // one series for the cluster.
        let member = match result {
            defrag::MemberResult::Defragmented { member, .. }
            | defrag::MemberResult::Skipped { member, .. }
            | defrag::MemberResult::Failed { member, .. } => member,
        };
        context::publish(
            dkv,
            Event {
                type_,
                reason: reason.to_owned(),
                note: Some(note),
                action: "Defragment".to_owned(),
                secondary: Some(member_pod_ref(&cluster.namespace, member)),
            },
            ctx,
        )
        .await;
    }
    if let Some(defrag::Stopped(why)) = stopped {
        context::publish(
            dkv,
            Event {
                type_: EventType::Warning,
                reason: "DefragPostponed".to_owned(),
                note: Some(format!(
                    "scheduled defragmentation stopped: {why}; it runs again once every member is healthy"
                )),
                action: "Defragment".to_owned(),
                secondary: None,
            },
            ctx,
        )
        .await;
    }
}

/// How long after a NOSPACE recovery a new NOSPACE is left to the user:
/// coming back that soon, it says the live data fills the quota.
const NOSPACE_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);

/// After the NOSPACE recovery (compact, defragment, disarm): remembered, so
/// that a NOSPACE that comes straight back is reported rather than looped
/// on, counted, and told in an Event.
async fn space_reclaimed(
    dkv: &DistributedKV,
    cluster: &validate::ValidatedCluster,
    obj_ref: &ObjectRef<DistributedKV>,
    now: jiff::Timestamp,
    ctx: &Context,
) {
    ctx.record_space_reclaimed(obj_ref, now);
    ctx.metrics
        .count_nospace_recovery(&cluster.namespace, &cluster.name);
    context::publish(
        dkv,
        Event {
            type_: EventType::Warning,
            reason: "NoSpaceRecovered".to_owned(),
            note: Some(format!(
                "etcd refused writes (NOSPACE: the backend reached spec.etcd.quotaBackendBytes, {} bytes); dkv compacted the history, defragmented every member one at a time and disarmed the alarm: writes are accepted again. If it comes back within {} minutes dkv stops and reports it: raise the quota or find what writes so much",
                cluster.etcd.quota_backend_bytes,
                NOSPACE_RETRY.as_mins()
            )),
            action: "ReclaimSpace".to_owned(),
            secondary: None,
        },
        ctx,
    )
    .await;
}

/// Turns etcd authentication on with the root user `auth` holds, records
/// it, and says so in an Event.
async fn enable_auth(
    dkv: &DistributedKV,
    cluster: &validate::ValidatedCluster,
    admin: &dyn dkv_etcd::EtcdAdmin,
    auth: &auth::AuthState,
    ctx: &Context,
) -> Result<()> {
    admin
        .enable_auth(&auth.root.password)
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
    context::publish(
        dkv,
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
    Ok(())
}

/// The backup a cluster being created from `spec.bootstrap.restore` starts
/// from: resolved when its StatefulSet is first created, then read back
/// from it; `None` once the cluster has formed (its template then drops the
/// restore steps) and for clusters that do not restore.
async fn restore_source(
    dkv: &DistributedKV,
    cluster: &validate::ValidatedCluster,
    plan: &plan::Plan,
    statefulset: Option<&StatefulSet>,
    ctx: &Context,
) -> Result<Option<restore::ResolvedRestore>> {
    let restoring = dkv
        .status
        .as_ref()
        .and_then(|s| s.operation.as_ref())
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
        let last = dkv.status.as_ref().and_then(|s| s.last_backup.as_ref());
        let mut source = restore::resolve_latest(&ctx.client, cluster, last, epoch).await?;
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
    if !plan.creating || status::formed_before(dkv) {
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

/// Whether `spec.recovery` allows its `policy` now: it is the configured
/// one, and quorum has been lost (the `Degraded/QuorumLost` condition) for
/// at least its grace period.
fn recovery_allowed(dkv: &DistributedKV, policy: RecoveryPolicy, now: jiff::Timestamp) -> bool {
    let Some(recovery) = &dkv.spec.recovery else {
        return false;
    };
    if recovery.policy != policy {
        return false;
    }
    let lost_since = dkv
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| {
            c.type_ == dkv_api::conditions::types::DEGRADED
                && c.status == "True"
                && c.reason == dkv_api::conditions::reasons::QUORUM_LOST
        })
        .map(|c| c.last_transition_time.0);
    lost_since.is_some_and(|since| {
        now.duration_since(since).as_secs() >= i64::from(recovery.after_seconds)
    })
}

/// The epoch of the quorum recovery pinned in status, derived from when it
/// was pinned so that every pass of it agrees.
fn recovery_epoch(dkv: &DistributedKV) -> Option<String> {
    let op = dkv.status.as_ref()?.operation.as_ref()?;
    let prefix = match op.kind {
        OperationKind::RecoverQuorum => "recovery",
        OperationKind::RestoreFromBackup => "restore",
        _ => return None,
    };
    Some(format!("{prefix}-{}", op.started_at.0.as_second()))
}

/// The operation pinned in status, as the planner reads it.
fn pinned_operation(dkv: &DistributedKV) -> Option<membership::Pinned> {
    let op = dkv.status.as_ref()?.operation.as_ref()?;
    let ordinal = naming::ordinal_of(&dkv.name_any(), &op.target)?;
    Some(membership::Pinned {
        kind: op.kind,
        ordinal,
    })
}

/// What the controller does after a failed reconcile: see
/// [`outcome::retry_delay`].
pub fn error_policy(dkv: Arc<DistributedKV>, err: &Error, ctx: Arc<Context>) -> Action {
    match retry_delay(&dkv, err, &ctx, rand::random::<f64>()) {
        Some(delay) => Action::requeue(delay),
        None => Action::await_change(),
    }
}

/// Settings of the cluster controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch only this namespace (all when `None`).
    pub namespace: Option<String>,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// Validity of the TLS certificates the operator issues.
    pub certificate_lifetime: certificates::CertificateLifetime,
}

fn api_for<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` resolves, then lets in-flight
/// reconciles finish.
pub async fn run(
    client: Client,
    settings: Settings,
    defaults: validate::Defaults,
    metrics: Arc<crate::metrics::Metrics>,
    reporter: crate::events::Reporter,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_deref();
    let (statefulsets, sts_writer) = watches::store::<StatefulSet>();
    let (services, svc_writer) = watches::store::<Service>();
    let (pdbs, pdb_writer) = watches::store::<PodDisruptionBudget>();
    let (cronjobs, cronjob_writer) = watches::store::<CronJob>();
    let (configmaps, configmap_writer) = watches::store::<ConfigMap>();
    let (pods, pod_writer) = watches::store::<Pod>();
    let (storage_classes, sc_writer) = watches::store::<StorageClass>();
    let (endpoint_slices, slice_writer) = watches::store::<EndpointSlice>();
    let (claims, claim_writer) = watches::store::<PersistentVolumeClaim>();
    let (backups, backup_writer) = watches::store::<DistributedKVBackup>();
    let (node_store, node_writer) = watches::store::<Node>();
    let nodes = node_access::may_watch_nodes(&client)
        .await
        .then_some(node_store);
    let stores = Stores {
        statefulsets,
        services,
        pdbs,
        cronjobs,
        configmaps,
        pods,
        storage_classes,
        endpoint_slices,
        claims,
        backups,
        nodes,
    };

    // The cluster watch ignores status-only updates (our own status writes
    // would otherwise echo back as reconciles); generation covers spec and
    // deletion, and the pause annotation and finalizers are watched too.
    let (dkv_reader, dkv_writer) = reflector::store::<DistributedKV>();
    let dkv_stream = watcher(
        api_for::<DistributedKV>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(watches::trim)
    .reflect(dkv_writer)
    .applied_objects()
    .predicate_filter(watches::cluster_relevance, Default::default());

    // StorageClasses are not ours: watched unfiltered, and a class appearing
    // re-triggers the clusters that name it (their InvalidSpec may clear).
    let sc_stream = watcher(
        Api::<StorageClass>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(watches::trim)
    .reflect(sc_writer)
    .applied_objects();
    let clusters = dkv_reader.clone();
    let by_storage_class = move |sc: StorageClass| {
        let class = sc.name_any();
        clusters
            .state()
            .into_iter()
            .filter(|d| {
                d.spec
                    .storage
                    .as_ref()
                    .is_some_and(|s| s.storage_class_name == class)
            })
            .map(|d| ObjectRef::from_obj(d.as_ref()))
            .collect::<Vec<_>>()
    };

    // Nodes are not ours either: a node that is lost or back (its Ready
    // status, the unreachable taint) re-triggers the clusters with a member
    // pod on it.
    let node_stream = if stores.nodes.is_some() {
        watches::relevant_stream(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            node_writer,
            watches::node_relevance,
            watches::trim_node,
        )
        .boxed()
    } else {
        futures::stream::empty().boxed()
    };
    let member_pods = stores.pods.clone();
    let by_node = move |node: Node| watches::clusters_on(&member_pods, &node.name_any());

    let ctx = Arc::new(
        Context::new(client.clone(), stores, defaults, metrics, reporter)
            .with_certificate_lifetime(settings.certificate_lifetime),
    );
    info!(
        namespace = ns.unwrap_or("(all)"),
        concurrency = settings.concurrency,
        "starting DistributedKV controller"
    );
    // A continuous backup agent whose report changed (a new chain, a gap,
    // a failure) has its cluster's status derived again at once.
    let agent_changes = ctx
        .take_agent_changes()
        .map(|changes| {
            futures::stream::unfold(changes, |mut changes| async move {
                changes.recv().await.map(|change| (change, changes))
            })
            .map(|(namespace, name)| ObjectRef::<DistributedKV>::new(&name).within(&namespace))
            .boxed()
        })
        .unwrap_or_else(|| futures::stream::empty().boxed());
    Controller::for_stream(dkv_stream, dkv_reader)
        .reconcile_on(agent_changes)
        .owns_stream(watches::statefulset_stream(
            api_for::<StatefulSet>(&client, ns),
            sts_writer,
        ))
        .owns_stream(child_stream(
            api_for::<Service>(&client, ns),
            svc_writer,
            spec_relevance::<Service>,
        ))
        .owns_stream(child_stream(
            api_for::<PodDisruptionBudget>(&client, ns),
            pdb_writer,
            spec_relevance::<PodDisruptionBudget>,
        ))
        .owns_stream(child_stream(
            api_for::<CronJob>(&client, ns),
            cronjob_writer,
            spec_relevance::<CronJob>,
        ))
        .owns_stream(child_stream(
            api_for::<ConfigMap>(&client, ns),
            configmap_writer,
            spec_relevance::<ConfigMap>,
        ))
        .watches_stream(sc_stream, by_storage_class)
        .watches_stream(node_stream, by_node)
        // Member pods belong to the StatefulSet, not to the cluster: map
        // them back through their cluster label.
        .watches_stream(
            watches::pod_stream(api_for::<Pod>(&client, ns), pod_writer),
            watches::cluster_of::<Pod>,
        )
        // Whether clients reach the members: the client Service's
        // EndpointSlices (labelled like their Service) decide `Available`.
        .watches_stream(
            child_stream(
                api_for::<EndpointSlice>(&client, ns),
                slice_writer,
                watches::endpoint_slice_relevance,
            ),
            watches::cluster_of::<EndpointSlice>,
        )
        // Member volumes: storage growth waits for their capacity.
        .watches_stream(
            child_stream(
                api_for::<PersistentVolumeClaim>(&client, ns),
                claim_writer,
                watches::claim_relevance,
            ),
            watches::cluster_of::<PersistentVolumeClaim>,
        )
        // The status's backup facts come from the records: a record that
        // finishes, or goes, re-derives its cluster's.
        .watches_stream(
            watches::relevant_stream(
                api_for::<DistributedKVBackup>(&client, ns),
                watcher::Config::default(),
                backup_writer,
                watches::backup_relevance,
                watches::trim,
            ),
            |backup: DistributedKVBackup| {
                backup
                    .namespace()
                    .map(|ns| ObjectRef::new(&backup.spec.cluster).within(&ns))
            },
        )
        .with_config(ControllerConfig::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                // Reconcile errors are reported inside reconcile; what
                // reaches here are queue/watch errors.
                tracing::debug!(error = %err, "controller event");
            }
        })
        .await;
    info!("DistributedKV controller stopped");
}
