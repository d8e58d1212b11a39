//! The backup controller: each `DistributedKVBackup` runs `dkv backup` once
//! in a Job and records the outcome (`Pending → Running → Completed |
//! Failed`, times, the artifact). The record is all it writes: the cluster
//! controller derives the cluster's `status.lastBackup` and its
//! `Degraded/BackupFailed` condition from the records, and [`retention`]
//! prunes old records with their artifacts.
//!
//! The destination is the backup's `spec.destination`, else the cluster's
//! `spec.backup`; credentials reach the Job only as environment from the
//! named Secret.
//!
//! Scheduled runs: each Job the cluster's backup CronJob starts gets a
//! `DistributedKVBackup` record (named after the Job, owned by the cluster,
//! annotated with [`JOB_ANNOTATION`]) whose status follows that Job, so
//! `kubectl get dkvbackup` is the whole catalogue.

pub mod job;
pub mod progress;
pub mod retention;
pub mod scheduled;
pub mod verify;

/// On a backup record: the Job (started by the schedule) it follows, instead
/// of starting one of its own.
pub const JOB_ANNOTATION: &str = "dkv.io/job";

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::events::{Event, EventType, Recorder, Reporter};
use dkv_api::backup::v1alpha1::{BackupPhase, DistributedKVBackupStatus};
use dkv_api::distributedkv::v1beta1::Compression;
use dkv_api::{DistributedKV, DistributedKVBackup};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use self::job::Resolved;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Status(#[from] crate::parts::backup_status::StatusWriteError),
    #[error("keeping the cluster's root credentials with the backup: {0}")]
    Credentials(#[source] crate::parts::credentials::CopyError),
}

fn kube_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> BackupError {
    let what = what.into();
    move |source| BackupError::Kube { what, source }
}

struct BackupContext {
    client: Client,
    recorder: Recorder,
    metrics: Arc<crate::metrics::Metrics>,
    /// The image that runs the agent when the cluster names none.
    operator_image: String,
}

/// How often a backup in flight is looked at besides its Job's events.
const POLL: Duration = Duration::from_secs(5);

pub async fn run(
    client: Client,
    namespace: Option<String>,
    operator_image: String,
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let backups: Api<DistributedKVBackup> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let jobs: Api<Job> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "dkv-operator".into(),
            instance: None,
        },
    );
    let ctx = Arc::new(BackupContext {
        client,
        recorder,
        metrics,
        operator_image,
    });
    info!("starting DistributedKVBackup controller");
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let records = scheduled::run(jobs.clone(), ctx.client.clone(), {
        let mut rx = shutdown_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    });
    let pruning = retention::run(
        ctx.client.clone(),
        namespace.clone(),
        ctx.recorder.clone(),
        {
            let mut rx = shutdown_rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        },
    );
    let backups_done = Controller::new(backups, watcher::Config::default())
        .owns(jobs.clone(), watcher::Config::default())
        // Jobs the schedule started belong to the CronJob, not to the
        // record: map them to the record named after them.
        .watches(
            jobs,
            watcher::Config::default()
                .labels(&format!("{}=backup", dkv_api::labels::COMPONENT_KEY)),
            |job: Job| {
                let ns = job.namespace()?;
                Some(kube::runtime::reflector::ObjectRef::new(&job.name_any()).within(&ns))
            },
        )
        .graceful_shutdown_on(async move {
            shutdown.await;
            let _ = shutdown_tx.send(true);
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()));
    futures::join!(backups_done, records, pruning);
}

fn error_policy(
    backup: Arc<DistributedKVBackup>,
    err: &BackupError,
    _: Arc<BackupContext>,
) -> Action {
    warn!(backup = %backup.name_any(), error = %err, "backup reconcile failed");
    Action::requeue(POLL)
}

async fn reconcile(
    backup: Arc<DistributedKVBackup>,
    ctx: Arc<BackupContext>,
) -> Result<Action, BackupError> {
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let old = backup.status.clone().unwrap_or_default();
    match old.phase {
        Some(BackupPhase::Completed) => return verify::drive(&backup, &ctx).await,
        Some(BackupPhase::Failed) => return Ok(Action::await_change()),
        _ => {}
    }
    let now = Time(jiff::Timestamp::now());
    let resolved = match resolve(&backup, &ctx).await? {
        Ok(resolved) => resolved,
        Err(why) => {
            let status = DistributedKVBackupStatus {
                phase: Some(BackupPhase::Failed),
                start_time: old.start_time.clone().or(Some(now.clone())),
                completion_time: Some(now),
                artifact: None,
                message: Some(why),
                verification: None,
            };
            crate::parts::backup_status::write(&ctx.client, &backup, &status).await?;
            return Ok(Action::await_change());
        }
    };

    // Before the snapshot is taken: its restore will need the password.
    if resolved.auth {
        crate::parts::credentials::keep_for_backup(&ctx.client, &ns, &resolved.cluster, &backup)
            .await
            .map_err(BackupError::Credentials)?;
    }

    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let adopted = backup.annotations().get(JOB_ANNOTATION).cloned();
    let job_name = adopted.clone().unwrap_or_else(|| job::job_name(&backup));
    let Some(existing) = jobs
        .get_opt(&job_name)
        .await
        .map_err(kube_error(format!("reading Job {ns}/{job_name}")))?
    else {
        if adopted.is_some() {
            // The schedule's Job is gone (history limits) before its
            // outcome was recorded.
            let status = DistributedKVBackupStatus {
                phase: Some(BackupPhase::Failed),
                start_time: old.start_time.clone().or(Some(now.clone())),
                completion_time: Some(now),
                artifact: None,
                message: Some(format!("the scheduled Job {job_name} no longer exists")),
                verification: None,
            };
            crate::parts::backup_status::write(&ctx.client, &backup, &status).await?;
            return Ok(Action::await_change());
        }
        let built = job::build(&backup, &resolved);
        jobs.create(&PostParams::default(), &built)
            .await
            .map_err(kube_error(format!("creating Job {ns}/{job_name}")))?;
        info!(backup = %name, cluster = %resolved.cluster, destination = %resolved.destination, "started backup Job");
        let status = DistributedKVBackupStatus {
            phase: Some(BackupPhase::Pending),
            start_time: Some(now),
            ..DistributedKVBackupStatus::default()
        };
        crate::parts::backup_status::write(&ctx.client, &backup, &status).await?;
        return Ok(Action::requeue(POLL));
    };

    let pods = job_pods(&ctx.client, &ns, &existing).await?;
    let progress = progress::of(&existing, &pods);
    let finished = matches!(progress.phase, BackupPhase::Completed | BackupPhase::Failed);
    let status = DistributedKVBackupStatus {
        phase: Some(progress.phase),
        start_time: old.start_time.clone().or(Some(now.clone())),
        completion_time: finished.then_some(now.clone()),
        artifact: progress.artifact.clone(),
        message: progress.message.clone(),
        verification: old.verification.clone(),
    };
    // The cluster's status (lastBackup, Degraded/BackupFailed) is derived
    // from this record by the cluster controller, its only writer.
    if progress.phase == BackupPhase::Completed
        && let Some(artifact) = &progress.artifact
    {
        info!(backup = %name, uri = %artifact.uri, size = artifact.size_bytes, "backup completed");
    }
    if progress.phase == BackupPhase::Failed {
        warn!(backup = %name, message = ?progress.message, "backup failed");
    }
    let changed_phase = old.phase != status.phase;
    crate::parts::backup_status::write(&ctx.client, &backup, &status).await?;
    if changed_phase && finished {
        let started = old.start_time.as_ref().map_or(now.0, |t| t.0);
        let took = now.0.duration_since(started).unsigned_abs();
        ctx.metrics.observe_backup(
            &ns,
            &resolved.cluster,
            took,
            progress.artifact.as_ref().map(|a| a.size_bytes),
            now.0,
        );
        announce(&ctx, &backup, &resolved.cluster, &progress).await;
    }
    Ok(if finished {
        // A completed backup with spec.verify is verified next.
        Action::requeue(Duration::from_secs(1))
    } else {
        Action::requeue(POLL)
    })
}

/// One Event on the backup and one on its cluster, for `kubectl describe`
/// of either: `BackupCompleted` (Normal) or `BackupFailed` (Warning).
async fn announce(
    ctx: &BackupContext,
    backup: &DistributedKVBackup,
    cluster: &str,
    progress: &progress::Progress,
) {
    let (type_, reason, note) = match (&progress.phase, &progress.artifact) {
        (BackupPhase::Completed, Some(a)) => (
            EventType::Normal,
            "BackupCompleted",
            format!("{} bytes to {} (sha256 {})", a.size_bytes, a.uri, a.sha256),
        ),
        _ => (
            EventType::Warning,
            "BackupFailed",
            progress
                .message
                .clone()
                .unwrap_or_else(|| "the backup failed".to_owned()),
        ),
    };
    let event = |secondary| Event {
        type_,
        reason: reason.to_owned(),
        note: Some(format!("backup {}: {note}", backup.name_any())),
        action: "Backup".to_owned(),
        secondary,
    };
    let mut targets = vec![(backup.object_ref(&()), event(None))];
    let ns = backup.namespace().unwrap_or_default();
    if let Ok(Some(owner)) = Api::<DistributedKV>::namespaced(ctx.client.clone(), &ns)
        .get_opt(cluster)
        .await
    {
        // Related to the backup: the recorder folds Events with the same
        // reason and objects into one series that keeps the first note, so
        // without it a cluster's second failure would read as its first.
        targets.push((owner.object_ref(&()), event(Some(backup.object_ref(&())))));
    }
    for (target, event) in targets {
        if let Err(err) = ctx.recorder.publish(&event, &target).await {
            warn!(backup = %backup.name_any(), error = %err, "failed to publish event");
        }
    }
}

/// The cluster, destination and image of a backup; `Ok(Err(why))` when the
/// backup cannot run as specified.
async fn resolve(
    backup: &DistributedKVBackup,
    ctx: &BackupContext,
) -> Result<Result<Resolved, String>, BackupError> {
    let ns = backup.namespace().unwrap_or_default();
    let clusters: Api<DistributedKV> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cluster) = clusters
        .get_opt(&backup.spec.cluster)
        .await
        .map_err(kube_error(format!(
            "reading DistributedKV {ns}/{}",
            backup.spec.cluster
        )))?
    else {
        return Ok(Err(format!(
            "spec.cluster: DistributedKV {:?} does not exist in namespace {ns}",
            backup.spec.cluster
        )));
    };
    let scheduled = cluster.spec.backup.as_ref();
    let (destination, credentials_secret) = match &backup.spec.destination {
        Some(d) => (d.uri.clone(), d.credentials_secret.clone()),
        None => match scheduled {
            Some(b) => (
                b.destination.uri.clone(),
                b.destination.credentials_secret.clone(),
            ),
            None => {
                return Ok(Err(format!(
                    "no destination: set spec.destination.uri, or spec.backup.destination.uri on DistributedKV {:?}",
                    backup.spec.cluster
                )));
            }
        },
    };
    let image = scheduled
        .and_then(|b| b.backup_image.clone())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| ctx.operator_image.clone());
    let encryption = scheduled
        .and_then(|b| b.encryption.as_ref())
        .map(|e| e.key_secret.clone());
    // A key that cannot be used fails the backup now, saying why, rather
    // than leaving its pod waiting for a Secret volume.
    if let Some(reference) = &encryption
        && let Err(message) =
            crate::parts::backup_keys::read_backup_key(&ctx.client, &ns, reference)
                .await
                .map_err(kube_error(format!(
                    "reading Secret {ns}/{}",
                    reference.name
                )))?
    {
        return Ok(Err(format!(
            "spec.backup.encryption of DistributedKV {:?}: {message}",
            backup.spec.cluster
        )));
    }
    Ok(Ok(Resolved {
        cluster: backup.spec.cluster.clone(),
        destination,
        credentials_secret,
        image,
        client_tls: crate::parts::tls::Sources::from_spec(cluster.spec.tls.as_ref())
            .client_secret(&backup.spec.cluster),
        auth: cluster.spec.auth.as_ref().is_some_and(|a| a.enabled),
        compress: scheduled.and_then(|b| b.compression) != Some(Compression::None),
        encryption,
    }))
}

/// The pods of a Job, by its selector.
async fn job_pods(client: &Client, ns: &str, job: &Job) -> Result<Vec<Pod>, BackupError> {
    let Some(labels) = job
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.as_ref())
    else {
        return Ok(Vec::new());
    };
    let selector = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube_error(format!(
            "listing the pods of Job {ns}/{}",
            job.name_any()
        )))?
        .items)
}
