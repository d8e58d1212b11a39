//! The `DistributedKV` controller.
//!
//! One reconcile is a pipeline (see `design/ARCHITECTURE.md`):
//! [`dereference`] → [`validate`] → [`plan`] → [`build`] → [`apply`] →
//! [`status`]. Only dereference, apply and status touch the outside world;
//! validate, plan and build are pure and tested from YAML fixtures.
//! Deletion runs [`cleanup`] behind the `dkv.io/finalizer` finalizer.

pub mod apply;
pub mod auth;
pub mod backup_catalogue;
pub mod build;
pub mod ca_rotation;
pub mod cert_manager;
pub mod cleanup;
pub mod context;
pub mod dereference;
pub mod diff;
pub mod error;
pub mod etcd_access;
pub mod execute;
pub mod membership;
pub mod membership_record;
pub mod naming;
pub mod observe_members;
pub mod plan;
pub mod restore;
pub mod status;
pub mod tls;
pub mod validate;
pub mod volumes;
pub mod watches;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use dkv_api::distributedkv::v1beta1::{Operation, OperationKind, RecoveryPolicy};
use dkv_api::{DistributedKV, DistributedKVBackup};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{Instrument, field, info, info_span, warn};

use self::context::Context;
use self::error::{Category, Error, Result, WAITING_DELAY, backoff_delay};
use self::watches::{Stores, child_stream, spec_relevance, statefulset_relevance};

/// Finalizer that guards deletion (final backup, volume reclaim).
pub const FINALIZER: &str = "dkv.io/finalizer";

/// Runs one reconcile of `dkv`: the finalizer helper routes to apply or
/// cleanup; errors are reported (status, Event, metrics) before returning.
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
        let result = finalizer(&api, FINALIZER, dkv.clone(), |event| async {
            match event {
                FinalizerEvent::Apply(dkv) => reconcile_cluster(&dkv, &ctx).await,
                FinalizerEvent::Cleanup(dkv) => cleanup::cleanup(&dkv, &ctx).await,
            }
        })
        .await
        .map_err(unwrap_finalizer_error);

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
                report_error(&dkv, err, &ctx).await;
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

/// The apply branch: the step pipeline.
async fn reconcile_cluster(dkv: &DistributedKV, ctx: &Context) -> Result<Action> {
    let namespace = dkv.namespace().ok_or(Error::MissingNamespace)?;
    ctx.stores
        .ready()
        .map_err(|what| Error::CacheNotReady { what })?;

    let observed = dereference::observe(dkv, &namespace, &ctx.stores);
    let cluster = validate::validate(dkv, &observed.facts, &ctx.defaults)?;

    // Membership: the member pods, and etcd's view through them.
    let epoch = recovery_epoch(dkv);
    let pods = observe_members::member_pods(
        &cluster.name,
        &observed.pods,
        epoch.as_deref(),
        cluster.tls.client_scheme(),
    );

    // TLS: the cluster's CA and certificates exist before any pod needs
    // them; the operator's own client identity comes from them.
    let tls_state = if cluster.tls.any() {
        let may_create_ca = observed.statefulset.is_none() && !cluster.paused;
        let seen = tls::Observed {
            rotation_requested: dkv
                .annotations()
                .get(ca_rotation::ROTATE_ANNOTATION)
                .map(String::as_str),
            pod_serials: pods.iter().map(|p| p.view.tls_serial.clone()).collect(),
            idle: dkv.status.as_ref().is_none_or(|s| s.operation.is_none()),
        };
        Some(
            tls::ensure(
                &ctx.client,
                &cluster,
                ctx.certificate_lifetime,
                may_create_ca,
                &seen,
            )
            .await?,
        )
    } else {
        None
    };
    let client_identity = tls_state
        .as_ref()
        .filter(|_| cluster.tls.client)
        .and_then(|t| t.client.as_ref());
    if !cluster.auth
        && observed.statefulset.is_none()
        && let Some(copy) = auth::restored_credentials(&ctx.client, &cluster).await?
    {
        return Err(Error::RestoreSource {
            message: format!(
                "the backup was taken with etcd authentication on, and its data keeps it on: set spec.auth.enabled: true (the restored cluster then answers to the root credentials kept in Secret {})",
                copy.name_any()
            ),
            waiting: false,
        });
    }
    let auth_state = if cluster.auth {
        Some(auth::ensure(&ctx.client, &cluster).await?)
    } else {
        None
    };
    let user = auth_state.as_ref().filter(|a| a.enabled).map(|a| &a.root);

    let endpoints: Vec<String> = pods.iter().filter_map(|p| p.endpoint.clone()).collect();
    let admin = (!endpoints.is_empty() && observed.statefulset.is_some())
        .then(|| ctx.etcd.connect(&endpoints, client_identity, user));
    let members = match &admin {
        Some(admin) => observe_members::observe_members(&cluster.name, admin.as_ref(), &pods).await,
        None => None,
    };
    let space_alarm = match (&admin, &members) {
        (Some(admin), Some(_)) => admin
            .alarms()
            .await
            .map(|alarms| {
                alarms
                    .iter()
                    .any(|a| a.kind == dkv_etcd::AlarmKind::NoSpace)
            })
            .unwrap_or(false),
        _ => false,
    };
    let pinned = pinned_operation(dkv);
    let view = plan::MembershipView {
        members: members.clone(),
        pods: pods.clone(),
        pinned,
        space_alarm,
        recovery_allowed: recovery_allowed(
            dkv,
            RecoveryPolicy::ForceNewCluster,
            jiff::Timestamp::now(),
        ),
        // Only with a backup to restore from.
        restore_allowed: recovery_allowed(
            dkv,
            RecoveryPolicy::RestoreFromBackup,
            jiff::Timestamp::now(),
        ) && dkv.status.as_ref().is_some_and(|s| s.last_backup.is_some()),
        recovery_epoch: epoch,
        tls_serial: tls_state.as_ref().map(|t| t.member_serial.clone()),
    };
    let mut plan = plan::plan(
        &cluster,
        observed.statefulset.as_deref(),
        observed.record.as_ref(),
        &view,
    );
    plan.restore =
        restore_source(dkv, &cluster, &plan, observed.statefulset.as_deref(), ctx).await?;
    let now = Time(jiff::Timestamp::now());
    let current_operation = dkv.status.as_ref().and_then(|s| s.operation.clone());
    let backups = backup_catalogue::observe(dkv, &ctx.stores);

    let seen_volumes = volumes::observe(&cluster, &observed.claims);
    let status_for = |plan: &plan::Plan,
                      sts: Option<&StatefulSet>,
                      operation: Option<Operation>,
                      volumes: &volumes::Volumes| {
        status::compute(
            dkv,
            &status::Observation {
                cluster: &cluster,
                plan,
                statefulset: sts,
                members: members.as_deref(),
                pods: &pods,
                client_endpoints: &observed.client_endpoints,
                operation,
                restore_failure: pods.iter().find_map(|p| p.restore_failure.as_deref()),
                backups: &backups,
                volumes,
            },
            &now,
        )
    };

    if cluster.paused {
        let status = status_for(
            &plan,
            observed.statefulset.as_deref(),
            current_operation,
            &seen_volumes,
        );
        status::write(dkv, status, ctx).await?;
        return Ok(Action::await_change());
    }

    // A new operation is pinned in status before anything of it happens, so
    // that a crash or a spec edit resumes it instead of starting another.
    if let membership::Step::Begin(pin) = &plan.step {
        let operation = Operation {
            kind: pin.kind,
            target: naming::member(&cluster.name, pin.ordinal),
            started_at: now.clone(),
        };
        info!(kind = ?pin.kind, target = %operation.target, "pinning operation");
        let status = status_for(
            &plan,
            observed.statefulset.as_deref(),
            Some(operation),
            &seen_volumes,
        );
        status::write(dkv, status, ctx).await?;
        return Ok(Action::requeue(OPERATION_POLL));
    }

    let prepared = build::build(&cluster, &plan);
    let applied = apply::apply(&ctx.client, &namespace, prepared, &observed).await?;

    if let Some(admin) = &admin {
        execute::execute(
            &plan.step,
            &execute::Target {
                client: &ctx.client,
                admin: admin.as_ref(),
                namespace: &namespace,
                cluster: &cluster.name,
                pods: &pods,
                peer_scheme: cluster.tls.peer_scheme(),
            },
        )
        .await?;
        // Authentication goes on once the cluster has formed and nothing
        // else is under way; the root user exists before it does.
        if let Some(auth) = auth_state.as_ref().filter(|a| !a.enabled)
            && matches!(plan.step, membership::Step::Converged)
            && !plan.creating
        {
            admin
                .enable_auth(&auth.root.password)
                .await
                .map_err(|source| Error::Etcd {
                    step: "enable authentication",
                    member: cluster.name.clone(),
                    source,
                })?;
            auth::mark_enabled(&ctx.client, &cluster).await?;
            info!("etcd authentication enabled");
            status::publish(
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
            return Ok(Action::requeue(OPERATION_POLL));
        }
    }
    let operation = match &plan.step {
        membership::Step::Finish(pin) => {
            info!(kind = ?pin.kind, ordinal = pin.ordinal, "operation complete");
            None
        }
        // Deleting the removed member's volume is the last step of a
        // removal, and it has just succeeded (or the volume was gone).
        membership::Step::DeleteVolume { ordinal } if admin.is_some() => {
            info!(ordinal, "member removal complete");
            None
        }
        _ => current_operation,
    };
    let in_flight = operation.is_some() || !matches!(plan.step, membership::Step::Converged);
    // Member volumes grow in place once the StatefulSet exists (its claims
    // do); no member restarts for it.
    let volumes = volumes::grow(&ctx.client, &cluster, &observed.claims).await?;
    let status = status_for(&plan, Some(&applied.statefulset), operation, &volumes);
    // A fault is watched only in part (a hung member's pod turns unready,
    // but what etcd says of it is not watched): keep looking while status
    // says Degraded, so it follows the member's state both ways.
    let degraded = status
        .conditions
        .iter()
        .any(|c| c.type_ == dkv_api::conditions::types::DEGRADED && c.status == "True");
    status::write(dkv, status, ctx).await?;
    if (in_flight || degraded) && admin.is_some() {
        // etcd's progress (a learner catching up, a member rejoining) is not
        // watched: look again soon while something is under way.
        return Ok(Action::requeue(OPERATION_POLL));
    }
    // A CA rotation advances once members have rolled out its phase.
    if tls_state.as_ref().is_some_and(|t| t.rotating.is_some()) {
        return Ok(Action::requeue(OPERATION_POLL));
    }
    // Otherwise every change that matters arrives through a watch, except
    // time: certificates come due for renewal.
    Ok(match tls_state.as_ref().map(|t| t.renew_at) {
        Some(at) => {
            let wait = at
                .as_second()
                .saturating_sub(jiff::Timestamp::now().as_second());
            // At least a second; at most a day (the clock may jump).
            Action::requeue(std::time::Duration::from_secs(
                wait.clamp(1, 86_400).unsigned_abs(),
            ))
        }
        None => Action::await_change(),
    })
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
        return restore::resolve_latest(&ctx.client, cluster, last, epoch)
            .await
            .map(Some);
    }
    let Some(wanted) = &cluster.restore else {
        return Ok(None);
    };
    if !plan.creating || status::formed_before(dkv) {
        return Ok(None);
    }
    match statefulset {
        Some(sts) => Ok(restore::from_statefulset(sts)),
        None => restore::resolve(&ctx.client, &cluster.namespace, wanted)
            .await
            .map(Some),
    }
}

/// How often an operation in flight is re-examined. Each membership step
/// (pin, add learner, start, promote) waits for the next look, so this paces
/// a member add: at 2 s it cost ~9 s per member on a 2-core machine against
/// etcd's own ~5 s (bench/results.md, scale 3 → 5 → 3). A look is a few
/// etcd status calls and no API write unless something changed.
const OPERATION_POLL: std::time::Duration = std::time::Duration::from_secs(1);

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

/// Makes an error visible where users look. Permanent errors go into status
/// (`Degraded`), whose transition publishes one Warning Event — repeated
/// passes with the same error change nothing and publish nothing. Transient
/// errors publish a Warning Event (the recorder folds repeats into a series).
async fn report_error(dkv: &DistributedKV, err: &Error, ctx: &Context) {
    let category = err.category();
    warn!(error = %err, category = category.as_str(), step = err.step(), "reconcile failed");
    match category {
        Category::Permanent
            if dkv.meta().deletion_timestamp.is_none()
                || matches!(err, Error::FinalBackupFailed { .. }) =>
        {
            let reason = match err {
                Error::InvalidSpec(_) => dkv_api::conditions::reasons::INVALID_SPEC,
                Error::FinalBackupFailed { .. } => dkv_api::conditions::reasons::BACKUP_FAILED,
                Error::RestoreSource { .. } => dkv_api::conditions::reasons::RESTORE_FAILED,
                Error::TlsCaMissing { .. }
                | Error::SecretInvalid { .. }
                | Error::TlsSecretUnusable { .. }
                | Error::CertManagerMissing { .. } => dkv_api::conditions::reasons::TLS_FAILED,
                _ => dkv_api::conditions::reasons::RECONCILE_ERROR,
            };
            let now = Time(jiff::Timestamp::now());
            let backups = backup_catalogue::observe(dkv, &ctx.stores);
            let status = status::degraded(dkv, reason, &err.to_string(), &backups, &now);
            if let Err(status_err) = status::write(dkv, status, ctx).await {
                warn!(error = %status_err, "failed to report the error in status");
            }
        }
        Category::Waiting if matches!(err, Error::CertificatePending { .. }) => {
            let now = Time(jiff::Timestamp::now());
            let backups = backup_catalogue::observe(dkv, &ctx.stores);
            let status = status::waiting(
                dkv,
                dkv_api::conditions::reasons::WAITING_FOR_CERTIFICATES,
                &err.to_string(),
                &backups,
                &now,
            );
            if let Err(status_err) = status::write(dkv, status, ctx).await {
                warn!(error = %status_err, "failed to report the wait in status");
            }
        }
        Category::Waiting | Category::Permanent => {}
        Category::Transient => {
            status::publish(
                dkv,
                Event {
                    type_: EventType::Warning,
                    reason: "ReconcileFailed".to_owned(),
                    note: Some(format!("{err} (will retry)")),
                    action: "Reconcile".to_owned(),
                    secondary: None,
                },
                ctx,
            )
            .await;
        }
    }
}

/// What the controller does after a failed reconcile, by category.
pub fn error_policy(dkv: Arc<DistributedKV>, err: &Error, ctx: Arc<Context>) -> Action {
    match retry_delay(&dkv, err, &ctx, rand::random::<f64>()) {
        Some(delay) => Action::requeue(delay),
        None => Action::await_change(),
    }
}

/// When to retry after `err`: never for permanent errors (a spec change
/// triggers the next pass), soon for waiting, with exponential backoff for
/// transient ones. `jitter` is in `[0, 1)`.
pub fn retry_delay(
    dkv: &DistributedKV,
    err: &Error,
    ctx: &Context,
    jitter: f64,
) -> Option<std::time::Duration> {
    match err.category() {
        // The backup a restore names may still be created: look again
        // now and then (backups are not watched by this controller).
        Category::Permanent
            if matches!(
                err,
                Error::RestoreSource { .. }
                    | Error::TlsCaMissing { .. }
                    | Error::SecretInvalid { .. }
                    | Error::TlsSecretUnusable { .. }
                    | Error::CertManagerMissing { .. }
            ) =>
        {
            Some(RESTORE_SOURCE_RECHECK)
        }
        // cert-manager usually issues within seconds.
        Category::Waiting if matches!(err, Error::CertificatePending { .. }) => {
            Some(CERTIFICATE_PENDING_RECHECK)
        }
        Category::Permanent => None,
        Category::Waiting => Some(WAITING_DELAY),
        Category::Transient => {
            let failures = ctx.record_failure(&ObjectRef::from_obj(dkv));
            Some(backoff_delay(failures, jitter))
        }
    }
}

/// How often a restore source that does not exist is looked for again
/// (and a TLS Secret that cannot be used).
const RESTORE_SOURCE_RECHECK: std::time::Duration = tls::EXTERNAL_RECHECK;
/// How often a certificate cert-manager has not issued yet is looked for.
const CERTIFICATE_PENDING_RECHECK: std::time::Duration = std::time::Duration::from_secs(3);

/// Settings of the cluster controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch only this namespace (all when `None`).
    pub namespace: Option<String>,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// Validity of the TLS certificates the operator issues.
    pub certificate_lifetime: tls::CertificateLifetime,
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
    reporter: kube::runtime::events::Reporter,
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

    let ctx = Arc::new(
        Context::new(client.clone(), stores, defaults, metrics, reporter)
            .with_certificate_lifetime(settings.certificate_lifetime),
    );
    info!(
        namespace = ns.unwrap_or("(all)"),
        concurrency = settings.concurrency,
        "starting DistributedKV controller"
    );
    Controller::for_stream(dkv_stream, dkv_reader)
        .owns_stream(child_stream(
            api_for::<StatefulSet>(&client, ns),
            sts_writer,
            statefulset_relevance,
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
        // Member pods belong to the StatefulSet, not to the cluster: map
        // them back through their cluster label.
        .watches_stream(
            child_stream(
                api_for::<Pod>(&client, ns),
                pod_writer,
                watches::pod_relevance,
            ),
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
