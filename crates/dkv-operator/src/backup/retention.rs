//! Retention of a cluster's backups (`spec.backup.retention`: `maxBackups`,
//! `maxAge`): which
//! ones go ([`plan`], pure) and removing them ([`run`], thin I/O): for each,
//! the artifact and its sidecar are deleted from the bucket, then its
//! `DistributedKVBackup` record (and the Job a scheduled record follows).
//!
//! Pruning is driven by the records, the catalogue `kubectl get dkvbackup`
//! lists: an object in the bucket without a record (copied there by hand,
//! left by a record someone deleted, written by another tool sharing the
//! prefix) is never touched. The operator only deletes what it catalogued,
//! and a bucket listing cannot tell a dkv artifact from a look-alike.
//!
//! The rule itself is `dkv_backup::select_for_pruning`: the newest
//! successful backup is never pruned, backups in flight are never pruned,
//! and failed runs older than the retention go too (they have no artifact).
//! Final backups (`dkv.io/final-backup`) are left alone: they outlive their
//! cluster, possibly under a new cluster of the same name, and go only when
//! a user deletes them.
//!
//! A pass runs per cluster after any of its backups finishes or is deleted,
//! when its spec changes, and every [`PERIOD`] so that old backups go even
//! when backups stop. Each pruned backup is a `BackupPruned` Event on the
//! cluster. An artifact that cannot be deleted keeps its record (records
//! and artifacts go together); the failure is logged, published as a
//! `RetentionFailed` Event on the cluster, and retried with backoff.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::{Event, EventType, Recorder};
use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_backup::continuous::archive::continuous_location;
use dkv_backup::continuous::retention::{
    ChainAge, ChainRetention, chain_ages, delete_chain, expired,
};
use dkv_backup::{BackupRecord, Outcome, PruneReason, RetentionPolicy, StoreConfig};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::JOB_ANNOTATION;

/// How often each cluster's backups are looked at besides the events that
/// trigger a pass.
pub const PERIOD: Duration = Duration::from_secs(3600);

/// Label of the record a cluster's deletion takes (see `cluster::cleanup`).
const FINAL_BACKUP_LABEL: &str = "dkv.io/final-backup";

/// One backup retention removes.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruning {
    /// The `DistributedKVBackup` record.
    pub record: String,
    /// The same, as the related object of the Events about it.
    pub record_ref: ObjectReference,
    /// Its artifact, when it has one.
    pub uri: Option<String>,
    /// The Secret holding the credentials of the artifact's store.
    pub credentials_secret: Option<String>,
    /// The scheduled Job the record follows, if any.
    pub job: Option<String>,
    pub reason: PruneReason,
}

/// How `record` counts for retention; `None` for records of other clusters
/// and final backups.
fn retention_record(cluster: &str, record: &DistributedKVBackup) -> Option<BackupRecord<String>> {
    if record.spec.cluster != cluster || record.labels().contains_key(FINAL_BACKUP_LABEL) {
        return None;
    }
    let status = record.status.clone().unwrap_or_default();
    let outcome = match status.phase {
        Some(BackupPhase::Completed) if status.artifact.is_some() => Outcome::Succeeded,
        // A completed record without an artifact cannot be restored from.
        Some(BackupPhase::Completed | BackupPhase::Failed) => Outcome::Failed,
        Some(BackupPhase::Pending | BackupPhase::Running) | None => Outcome::InProgress,
    };
    // When it finished; an unfinished or undated record is in flight as far
    // as retention knows (never pruned).
    let taken_at = status
        .completion_time
        .or(status.start_time)
        .or_else(|| record.metadata.creation_timestamp.clone());
    let (outcome, taken_at) = match taken_at {
        Some(t) => (outcome, t.0),
        None => (Outcome::InProgress, jiff::Timestamp::UNIX_EPOCH),
    };
    Some(BackupRecord {
        key: record.name_any(),
        taken_at,
        outcome,
    })
}

/// The backups of `cluster` (among `records`, all in its namespace) that its
/// retention removes at `now`, oldest first.
pub fn plan(
    cluster: &DistributedKV,
    records: &[DistributedKVBackup],
    now: jiff::Timestamp,
) -> Vec<Pruning> {
    let backup = cluster.spec.backup.as_ref();
    let policy = crate::parts::retention::retention_of(backup);
    if policy == RetentionPolicy::default() {
        return Vec::new();
    }
    let name = cluster.name_any();
    let catalogue: Vec<BackupRecord<String>> = records
        .iter()
        .filter_map(|r| retention_record(&name, r))
        .collect();
    dkv_backup::select_for_pruning(&catalogue, &policy, now)
        .into_iter()
        .filter_map(|prune| {
            let record = records.iter().find(|r| r.name_any() == prune.key)?;
            // The store the artifact was written to, with the Secret the
            // backup ran with.
            let credentials_secret = match &record.spec.destination {
                Some(destination) => destination.credentials_secret.clone(),
                None => backup.and_then(|b| b.destination.credentials_secret.clone()),
            };
            Some(Pruning {
                record: prune.key,
                record_ref: record.object_ref(&()),
                uri: record
                    .status
                    .as_ref()
                    .and_then(|s| s.artifact.as_ref())
                    .map(|a| a.uri.clone()),
                credentials_secret,
                job: record.annotations().get(JOB_ANNOTATION).cloned(),
                reason: prune.reason,
            })
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Some backups could not be pruned; each entry names the record and
    /// the reason (already free of credentials).
    #[error("pruning backups of {cluster}: {}", failures.join("; "))]
    Prune {
        cluster: String,
        failures: Vec<String>,
    },
}

struct RetentionContext {
    client: Client,
    recorder: Recorder,
    /// Consecutive failed passes per cluster, for backoff.
    failures: Mutex<HashMap<ObjectRef<DistributedKV>, u32>>,
}

impl RetentionContext {
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<DistributedKV>, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Runs retention for every cluster until `shutdown` resolves.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    recorder: Recorder,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (clusters, backups) = match &namespace {
        Some(ns) => (
            Api::<DistributedKV>::namespaced(client.clone(), ns),
            Api::<DistributedKVBackup>::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (reader, writer) = reflector::store::<DistributedKV>();
    // Spec changes only: the cluster's status changes all the time.
    let cluster_stream = watcher(clusters, watcher::Config::default())
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let ctx = Arc::new(RetentionContext {
        client,
        recorder,
        failures: Mutex::default(),
    });
    Controller::for_stream(cluster_stream, reader)
        // A finished (or deleted) backup is a reason to look again; one in
        // flight is not.
        .watches(backups, watcher::Config::default(), |backup| {
            let finished = matches!(
                backup.status.as_ref().and_then(|s| s.phase),
                Some(BackupPhase::Completed | BackupPhase::Failed)
            );
            let ns = backup.namespace()?;
            finished.then(|| ObjectRef::new(&backup.spec.cluster).within(&ns))
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Retention reads a cluster's metadata and spec: its status (rewritten on
/// every change the cluster controller sees) and managedFields are not kept
/// in this controller's copy of the clusters.
fn trim(cluster: &mut DistributedKV) {
    crate::cache::trim(cluster);
    cluster.status = None;
}

fn error_policy(
    cluster: Arc<DistributedKV>,
    err: &RetentionError,
    ctx: Arc<RetentionContext>,
) -> Action {
    let failures = {
        let mut failures = ctx.failures();
        let count = failures
            .entry(ObjectRef::from_obj(cluster.as_ref()))
            .or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let delay = crate::backoff::backoff_delay(failures, rand::random::<f64>());
    warn!(cluster = %cluster.name_any(), error = %err, retry_in = ?delay, "backup retention failed");
    Action::requeue(delay)
}

/// The limits of `policy` as a user wrote them, e.g. `maxBackups 5, maxAge 168h`.
fn describe(policy: &RetentionPolicy) -> String {
    let mut limits = Vec::new();
    if let Some(n) = policy.max_backups {
        limits.push(format!("maxBackups {n}"));
    }
    if let Some(age) = policy.max_age {
        let hours = age.as_hours();
        limits.push(if hours % 24 == 0 {
            format!("maxAge {}d", hours / 24)
        } else {
            format!("maxAge {hours}h")
        });
    }
    limits.join(", ")
}

async fn reconcile(
    cluster: Arc<DistributedKV>,
    ctx: Arc<RetentionContext>,
) -> Result<Action, RetentionError> {
    let name = cluster.name_any();
    let Some(ns) = cluster.namespace() else {
        return Ok(Action::await_change());
    };
    // A cluster being deleted keeps its catalogue as it is.
    if cluster.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let policy = crate::parts::retention::retention_of(cluster.spec.backup.as_ref());
    if policy == RetentionPolicy::default() {
        return Ok(Action::await_change());
    }
    let backups: Api<DistributedKVBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let records = backups
        .list(&ListParams::default())
        .await
        .map_err(|source| RetentionError::Kube {
            what: format!("listing the DistributedKVBackups in {ns}"),
            source,
        })?
        .items;
    let prunings = plan(&cluster, &records, jiff::Timestamp::now());
    let mut configs: HashMap<Option<String>, StoreConfig> = HashMap::new();
    let limits = describe(&policy);
    let mut failures = Vec::new();
    // One Event per backup, related to its record: the recorder folds
    // Events with the same reason and objects into one series, keeping the
    // first note.
    for pruning in prunings {
        match prune(&ctx.client, &ns, &pruning, &mut configs).await {
            Ok(()) => {
                info!(cluster = %name, backup = %pruning.record, uri = ?pruning.uri, reason = ?pruning.reason, "pruned backup");
                let artifact = pruning
                    .uri
                    .as_deref()
                    .map_or_else(|| " (no artifact)".to_owned(), |uri| format!(" and {uri}"));
                publish(
                    &ctx,
                    &cluster,
                    Some(&pruning),
                    EventType::Normal,
                    "BackupPruned",
                    format!(
                        "deleted backup {}{artifact}: {} (retention: {limits})",
                        pruning.record,
                        match pruning.reason {
                            PruneReason::OlderThanMaxAge => "older than the retention",
                            PruneReason::BeyondMaxBackups => "beyond the number kept",
                        }
                    ),
                )
                .await;
            }
            Err(why) => {
                warn!(cluster = %name, backup = %pruning.record, error = %why, "pruning a backup failed");
                publish(
                    &ctx,
                    &cluster,
                    Some(&pruning),
                    EventType::Warning,
                    "RetentionFailed",
                    format!("backup {} kept for now: {why} (will retry)", pruning.record),
                )
                .await;
                failures.push(format!("{}: {why}", pruning.record));
            }
        }
    }
    let keep_chains = ChainRetention {
        max_age: policy.max_age,
        max_chains: policy.max_backups,
    };
    if let Some(backup) = cluster.spec.backup.as_ref()
        && keep_chains != ChainRetention::default()
    {
        let secret = backup.destination.credentials_secret.clone();
        // The ages of encrypted chains are read with every key of the
        // cluster's key Secret; a chain none decrypts is kept.
        let keys = match backup.encryption.as_ref() {
            None => Ok(dkv_backup::Keyring::default()),
            Some(e) => crate::parts::backup_keys::read_keys(&ctx.client, &ns, &e.key_secret, None)
                .await
                .map_err(|e| e.to_string())
                .and_then(|keys| keys),
        };
        let pruned = match (
            store_config(&ctx.client, &ns, &secret, &mut configs).await,
            keys,
        ) {
            (Ok(config), Ok(keys)) => {
                prune_chains(
                    &config,
                    &backup.destination.uri,
                    &ns,
                    &name,
                    keep_chains,
                    &keys,
                )
                .await
            }
            (Err(why), _) | (_, Err(why)) => Err(why),
        };
        match pruned {
            Ok(chains) => {
                for chain in chains {
                    info!(cluster = %name, chain = %chain.chain, "pruned continuous backup chain");
                    publish(
                        &ctx,
                        &cluster,
                        None,
                        EventType::Normal,
                        "ContinuousChainPruned",
                        format!(
                            "deleted continuous backup chain {} (its base snapshot and segments): every point it restores to is older than the retention, or newer chains fill it ({limits})",
                            chain.chain
                        ),
                    )
                    .await;
                }
            }
            Err(why) => {
                warn!(cluster = %name, error = %why, "pruning continuous backup chains failed");
                failures.push(format!("continuous backup chains: {why}"));
            }
        }
    }
    if !failures.is_empty() {
        return Err(RetentionError::Prune {
            cluster: name,
            failures,
        });
    }
    ctx.failures()
        .remove(&ObjectRef::from_obj(cluster.as_ref()));
    Ok(Action::requeue(PERIOD))
}

/// Removes one backup: its artifact (and sidecar), the scheduled Job it
/// follows, then its record. Stops at the first failure, so a record is
/// never deleted while its artifact may remain. The error text carries no
/// credential.
async fn prune(
    client: &Client,
    ns: &str,
    pruning: &Pruning,
    configs: &mut HashMap<Option<String>, StoreConfig>,
) -> Result<(), String> {
    if let Some(uri) = &pruning.uri {
        let config = store_config(client, ns, &pruning.credentials_secret, configs).await?;
        dkv_backup::delete_artifact(&config, uri)
            .await
            .map_err(|e| format!("deleting {uri}: {e}"))?;
    }
    // The schedule's Job goes first: while it exists, the record of a
    // scheduled run would be recreated from it.
    if let Some(job) = &pruning.job {
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        ignore_not_found(jobs.delete(job, &DeleteParams::background()).await)
            .map_err(|e| format!("deleting Job {ns}/{job}: {e}"))?;
    }
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), ns);
    ignore_not_found(
        backups
            .delete(&pruning.record, &DeleteParams::default())
            .await,
    )
    .map_err(|e| format!("deleting DistributedKVBackup {ns}/{}: {e}", pruning.record))
}

/// The store settings from `secret` (the ambient identity without one, as
/// the backup Job had), read once per pass.
async fn store_config(
    client: &Client,
    ns: &str,
    secret: &Option<String>,
    configs: &mut HashMap<Option<String>, StoreConfig>,
) -> Result<StoreConfig, String> {
    if let Some(config) = configs.get(secret) {
        return Ok(config.clone());
    }
    let config = match secret {
        Some(secret) => {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
            let found = secrets
                .get_opt(secret)
                .await
                .map_err(|e| format!("reading Secret {ns}/{secret}: {e}"))?
                .ok_or_else(|| format!("Secret {ns}/{secret} does not exist"))?;
            crate::secret_store::store_config(&found)
        }
        None => StoreConfig::default(),
    };
    configs.insert(secret.clone(), config.clone());
    Ok(config)
}

/// Deletes the continuous backup chains of `namespace/cluster` in
/// `destination` that `keep` lets go (never the newest chain); returns the
/// chains deleted.
async fn prune_chains(
    config: &StoreConfig,
    destination: &str,
    namespace: &str,
    cluster: &str,
    keep: ChainRetention,
    keys: &dkv_backup::Keyring,
) -> Result<Vec<ChainAge>, String> {
    let location = dkv_backup::Location::parse(destination).map_err(|e| e.to_string())?;
    let store = dkv_backup::Store::open(&location, config).map_err(|e| e.to_string())?;
    let continuous = continuous_location(&location, namespace, cluster);
    let ages = chain_ages(&store, &continuous, keys)
        .await
        .map_err(|e| e.to_string())?;
    let mut deleted = Vec::new();
    for chain in expired(&ages, keep, jiff::Timestamp::now()) {
        delete_chain(&store, config, &continuous, chain)
            .await
            .map_err(|e| format!("deleting chain {}: {e}", chain.chain))?;
        deleted.push(chain.clone());
    }
    Ok(deleted)
}

fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

async fn publish(
    ctx: &RetentionContext,
    cluster: &DistributedKV,
    pruning: Option<&Pruning>,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Retention".to_owned(),
        secondary: pruning.map(|p| p.record_ref.clone()),
    };
    if let Err(err) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
        warn!(cluster = %cluster.name_any(), error = %err, "failed to publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cluster whose `spec.backup.retention` is `retention` (`null`: none).
    fn cluster(retention: serde_json::Value) -> DistributedKV {
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 1, "image": "etcd:3.5.16", "backup": {
                "destination": {"uri": "s3://bucket/prod", "credentialsSecret": "s3-creds"},
                "schedule": "0 * * * *", "retention": retention}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn one_day() -> serde_json::Value {
        json!({"maxAge": "1d"})
    }

    fn at(days_ago: i64) -> String {
        let t = now() - jiff::SignedDuration::from_hours(days_ago * 24);
        t.to_string()
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000).unwrap_or_else(|e| panic!("{e}"))
    }

    fn record(name: &str, phase: &str, days_ago: i64) -> DistributedKVBackup {
        let artifact = (phase == "Completed").then(|| {
            json!({"uri": format!("s3://bucket/prod/shop/orders/{name}.db"), "sizeBytes": 1, "sha256": "ab", "revision": 1})
        });
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"cluster": "orders"},
            "status": {"phase": phase, "startTime": at(days_ago), "completionTime": at(days_ago), "artifact": artifact}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn names(prunings: &[Pruning]) -> Vec<&str> {
        prunings.iter().map(|p| p.record.as_str()).collect()
    }

    #[test]
    fn old_backups_and_old_failures_go_and_the_newest_success_stays() {
        let records = [
            record("old-1", "Completed", 5),
            record("old-2", "Completed", 3),
            record("failed-old", "Failed", 4),
            record("failed-new", "Failed", 0),
            record("running", "Running", 9),
        ];
        let prunings = plan(&cluster(one_day()), &records, now());
        assert_eq!(names(&prunings), ["old-1", "failed-old"]);
        // old-2 is too old as well, but the newest success: kept.
        assert_eq!(
            prunings[0].uri.as_deref(),
            Some("s3://bucket/prod/shop/orders/old-1.db")
        );
        assert_eq!(prunings[0].credentials_secret.as_deref(), Some("s3-creds"));
        assert_eq!(prunings[1].uri, None, "a failed run has no artifact");

        // A newer success lets old-2 go.
        let mut with_new = records.to_vec();
        with_new.push(record("new", "Completed", 0));
        assert_eq!(
            names(&plan(&cluster(one_day()), &with_new, now())),
            ["old-1", "failed-old", "old-2"]
        );
    }

    #[test]
    fn max_backups_keeps_the_newest_of_each_outcome_and_both_limits_apply() {
        let records = [
            record("d4", "Completed", 4),
            record("d3", "Completed", 3),
            record("d2", "Completed", 2),
            record("d1", "Completed", 1),
            record("f3", "Failed", 3),
            record("f0", "Failed", 0),
            record("running", "Running", 9),
        ];
        // Failed runs are counted among themselves: two kept of two.
        assert_eq!(
            names(&plan(&cluster(json!({"maxBackups": 2})), &records, now())),
            ["d4", "d3"]
        );
        assert_eq!(
            names(&plan(&cluster(json!({"maxBackups": 1})), &records, now())),
            ["d4", "d3", "f3", "d2"]
        );
        // maxAge 60h: d4, d3 and f3 are older; maxBackups 3 alone would
        // keep d3.
        assert_eq!(
            names(&plan(
                &cluster(json!({"maxBackups": 3, "maxAge": "60h"})),
                &records,
                now()
            )),
            ["d4", "d3", "f3"]
        );
        assert_eq!(
            describe(&crate::parts::retention::retention_of(
                cluster(json!({"maxBackups": 3, "maxAge": "60h"}))
                    .spec
                    .backup
                    .as_ref()
            )),
            "maxBackups 3, maxAge 60h"
        );
        assert_eq!(
            describe(&crate::parts::retention::retention_of(
                cluster(json!({"maxAge": "7d"})).spec.backup.as_ref()
            )),
            "maxAge 7d"
        );
    }

    #[test]
    fn no_retention_other_clusters_and_final_backups_are_left_alone() {
        let records = [record("a", "Completed", 9), record("b", "Completed", 0)];
        assert!(plan(&cluster(serde_json::Value::Null), &records, now()).is_empty());

        let mut other = record("other", "Completed", 9);
        other.spec.cluster = "ledger".into();
        let mut last = record("final", "Completed", 8);
        last.metadata.labels = Some([(FINAL_BACKUP_LABEL.to_owned(), "true".to_owned())].into());
        let records = [
            other,
            last,
            record("a", "Completed", 9),
            record("b", "Completed", 0),
        ];
        assert_eq!(names(&plan(&cluster(one_day()), &records, now())), ["a"]);
    }

    #[test]
    fn each_backup_is_deleted_with_the_secret_it_ran_with_and_its_job() {
        let mut own = record("own-destination", "Completed", 9);
        own.spec.destination = Some(
            serde_json::from_value(
                json!({"uri": "s3://elsewhere/x", "credentialsSecret": "other-creds"}),
            )
            .unwrap_or_else(|e| panic!("{e}")),
        );
        let mut scheduled = record("orders-backup-29000000", "Completed", 8);
        scheduled.metadata.annotations = Some(
            [(
                JOB_ANNOTATION.to_owned(),
                "orders-backup-29000000".to_owned(),
            )]
            .into(),
        );
        let records = [own, scheduled, record("newest", "Completed", 0)];
        let prunings = plan(&cluster(one_day()), &records, now());
        assert_eq!(
            prunings
                .iter()
                .map(|p| (p.credentials_secret.as_deref(), p.job.as_deref()))
                .collect::<Vec<_>>(),
            [
                (Some("other-creds"), None),
                (Some("s3-creds"), Some("orders-backup-29000000"))
            ]
        );
    }

    #[test]
    fn undated_or_unfinished_records_are_never_pruned() {
        let mut undated = record("undated", "Completed", 0);
        undated.status = Some(Default::default());
        let records = [undated, record("pending", "Pending", 30)];
        assert!(plan(&cluster(one_day()), &records, now()).is_empty());
    }

    #[test]
    fn the_store_config_comes_from_the_secrets_keys() {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s3-creds"},
            "data": {
                "AWS_ACCESS_KEY_ID": "QUtJRA==",          // AKID
                "AWS_SECRET_ACCESS_KEY": "czNjcmV0",      // s3cret
                "AWS_ENDPOINT_URL": "aHR0cDovL21vdG8=",   // http://moto
                "AWS_ALLOW_HTTP": "dHJ1ZQ=="              // true
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let config = crate::secret_store::store_config(&secret);
        assert_eq!(config.s3.endpoint.as_deref(), Some("http://moto"));
        assert!(config.s3.allow_http);
        let aws = config
            .credentials
            .aws
            .clone()
            .unwrap_or_else(|| panic!("no aws"));
        assert_eq!(aws.access_key_id, "AKID");
        assert_eq!(aws.secret_access_key.expose(), "s3cret");
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn chains_whose_every_point_is_past_the_max_age_are_deleted_whole() {
        use dkv_backup::testing::write_chain;
        use jiff::SignedDuration;

        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file://{}/", dir.path().display());
        let destination = dkv_backup::Location::parse(&uri).unwrap();
        let store = dkv_backup::Store::open(&destination, &StoreConfig::default()).unwrap();
        let continuous = continuous_location(&destination, "shop", "orders");
        let now = jiff::Timestamp::now();
        let hours_ago = |h| now - SignedDuration::from_hours(h);
        write_chain(&store, &destination, &continuous, "a", 10, hours_ago(50)).await;
        write_chain(&store, &destination, &continuous, "b", 20, hours_ago(30)).await;
        write_chain(&store, &destination, &continuous, "c", 30, hours_ago(40)).await;
        let names = |chains: Vec<ChainAge>| chains.into_iter().map(|c| c.chain).collect::<Vec<_>>();
        let prune_older_than = |hours| {
            let retention = ChainRetention {
                max_age: Some(SignedDuration::from_hours(hours)),
                max_chains: None,
            };
            let uri = uri.clone();
            async move {
                prune_chains(
                    &StoreConfig::default(),
                    &uri,
                    "shop",
                    "orders",
                    retention,
                    &dkv_backup::Keyring::default(),
                )
                .await
                .unwrap()
            }
        };

        // 36 hours: only a's points are all older.
        assert_eq!(names(prune_older_than(36).await), ["a"]);
        // One hour: b goes; c, the newest chain (by its base), stays
        // however old its points are.
        assert_eq!(names(prune_older_than(1).await), ["b"]);
        let left = chain_ages(&store, &continuous, &dkv_backup::Keyring::default())
            .await
            .unwrap();
        assert_eq!(names(left), ["c"]);
    }
}
