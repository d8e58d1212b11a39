//! Records for scheduled runs: every Job a cluster's backup CronJob starts
//! gets a `DistributedKVBackup` named after it, owned by the cluster (so the
//! catalogue goes with the cluster), whose status then follows the Job.

use std::future::Future;

use dkv_api::{DistributedKV, DistributedKVBackup};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::JOB_ANNOTATION;

/// Watches backup Jobs and records each one a CronJob started.
pub async fn run(jobs: Api<Job>, client: Client, shutdown: impl Future<Output = ()>) {
    let config = watcher::Config::default().labels(&format!(
        "{}=backup,{}=dkv-operator",
        dkv_api::labels::COMPONENT_KEY,
        "app.kubernetes.io/managed-by"
    ));
    let events = watcher(jobs, config)
        .default_backoff()
        .applied_objects()
        .for_each(|job| {
            let client = client.clone();
            async move {
                if let Ok(job) = job
                    && let Err(err) = record(&client, &job).await
                {
                    warn!(job = %job.name_any(), error = %err, "recording a scheduled backup failed");
                }
            }
        });
    tokio::select! {
        () = events => {}
        () = shutdown => {}
    }
}

/// Creates the record of `job` if it was started by a CronJob and has none.
async fn record(client: &Client, job: &Job) -> Result<(), kube::Error> {
    let scheduled = job
        .owner_references()
        .iter()
        .any(|o| o.kind == "CronJob" && o.controller == Some(true));
    let (Some(ns), Some(cluster)) = (
        job.namespace(),
        job.labels().get(dkv_api::labels::CLUSTER_KEY),
    ) else {
        return Ok(());
    };
    // A Job being deleted (retention prunes a record with its Job) must not
    // bring its record back.
    if !scheduled || job.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let name = job.name_any();
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), &ns);
    if backups.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let clusters: Api<DistributedKV> = Api::namespaced(client.clone(), &ns);
    let Some(owner) = clusters.get_opt(cluster).await? else {
        return Ok(());
    };
    let owner_ref = owner.controller_owner_ref(&());
    let record: DistributedKVBackup = match serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {
            "name": name, "namespace": ns,
            "labels": job.labels(),
            "annotations": {JOB_ANNOTATION: name},
            "ownerReferences": owner_ref.map(|o| vec![o]).unwrap_or_default(),
        },
        "spec": {
            "cluster": cluster,
            "verify": owner.spec.backup.as_ref().and_then(|b| b.verify),
        },
    })) {
        Ok(record) => record,
        Err(err) => {
            warn!(job = %name, error = %err, "building a backup record");
            return Ok(());
        }
    };
    match backups.create(&PostParams::default(), &record).await {
        Ok(_) => {
            info!(job = %name, %cluster, "recorded a scheduled backup");
            Ok(())
        }
        // Another pass (or a restarted operator) recorded it first.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err),
    }
}
