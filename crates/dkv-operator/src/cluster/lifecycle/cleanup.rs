//! What happens when a `DistributedKV` is deleted, before its finalizer is
//! released: the final backup (when asked for) and the volumes' fate.
//!
//! Children other than volumes need no work here: they carry owner
//! references and the garbage collector removes them.

use crate::events::{Event, EventType};
use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::distributedkv::v1beta1::ReclaimPolicy;
use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::Action;
use tracing::info;

use crate::cluster::context::{Context, publish};
use crate::cluster::error::{Error, Result};
use crate::cluster::watches;
use crate::parts::naming;

pub async fn cleanup(dkv: &DistributedKV, ctx: &Context) -> Result<Action> {
    let name = dkv.name_any();
    let namespace = dkv.namespace().ok_or(Error::MissingNamespace)?;

    if dkv
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.final_backup_on_delete)
        .unwrap_or(false)
    {
        final_backup(dkv, &namespace, ctx).await?;
    }

    let reclaim = dkv
        .spec
        .storage
        .as_ref()
        .map(|s| s.reclaim_policy)
        .unwrap_or_default();
    if reclaim == ReclaimPolicy::Delete {
        // Volumes go last: while the StatefulSet exists it would recreate a
        // deleted claim for a pod it restarts, leaving an orphan volume. So:
        // StatefulSet first, then wait for its pods, then the claims.
        // (Returning an error keeps the finalizer; kube-runtime's helper
        // releases it on any success.)
        let sts_name = naming::statefulset(&name);
        if watches::get(&ctx.stores.statefulsets, &namespace, &sts_name).is_some() {
            let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &namespace);
            match sets.delete(&sts_name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(Error::Cleanup {
                        name: name.clone(),
                        source,
                    });
                }
            }
            return Err(Error::CleanupWaiting {
                what: format!("StatefulSet {sts_name} to be deleted before the volumes"),
            });
        }
        let pods_left = ctx
            .stores
            .pods
            .state()
            .iter()
            // Member pods only: backup Job pods carry the cluster label too,
            // and a finished one stays (its Job's history) without holding
            // any volume.
            .filter(|p| {
                p.namespace().as_deref() == Some(namespace.as_str())
                    && p.labels().get(dkv_api::labels::CLUSTER_KEY) == Some(&name)
                    && naming::ordinal_of(&name, &p.name_any()).is_some()
            })
            .count();
        if pods_left > 0 {
            return Err(Error::CleanupWaiting {
                what: format!("{pods_left} member pods to stop before the volumes are deleted"),
            });
        }
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
        let selector = format!("{}={name}", dkv_api::labels::CLUSTER_KEY);
        pvcs.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&selector),
        )
        .await
        .map_err(|source| Error::Cleanup {
            name: name.clone(),
            source,
        })?;
        info!(%name, %namespace, "deleted member volumes (reclaimPolicy: Delete)");
        publish(
            dkv,
            Event {
                type_: EventType::Normal,
                reason: "VolumesDeleted".to_owned(),
                note: Some(
                    "member PersistentVolumeClaims deleted (storage.reclaimPolicy: Delete)"
                        .to_owned(),
                ),
                action: "Cleanup".to_owned(),
                secondary: None,
            },
            ctx,
        )
        .await;
    }
    // Recording stops last: the chain keeps every change up to the moment
    // the members were stopped (what it holds is stored as it stops).
    ctx.agents.stop(&namespace, &name);
    ctx.followers.stop(&namespace, &name);
    ctx.metrics
        .forget(&kube::runtime::reflector::ObjectRef::from_obj(dkv));
    Ok(Action::await_change())
}

/// Annotation on a `DistributedKV` being deleted that waives its final
/// backup (after one failed).
pub const SKIP_FINAL_BACKUP: &str = "dkv.io/skip-final-backup";

/// `backup.finalBackupOnDelete`: one last backup, taken through a
/// `DistributedKVBackup` record (the backup controller runs and verifies it)
/// before anything is torn down. The record is not owned by the cluster, so
/// it stays in the catalogue after the cluster is gone. Deletion waits while
/// it runs and is blocked if it fails, until the user waives it with
/// [`SKIP_FINAL_BACKUP`].
async fn final_backup(dkv: &DistributedKV, namespace: &str, ctx: &Context) -> Result<()> {
    let cluster = dkv.name_any();
    if dkv.annotations().get(SKIP_FINAL_BACKUP).map(String::as_str) == Some("true") {
        info!(%cluster, "final backup waived by annotation");
        return Ok(());
    }
    let uid = dkv.uid().unwrap_or_default();
    let name = format!("{cluster}-final-{}", uid.split('-').next().unwrap_or("0"));
    // Stopped members cannot be backed up. (Only the StatefulSet says they
    // are: spec.hibernation alone may still be waiting to stop them.)
    let stopped = watches::get(
        &ctx.stores.statefulsets,
        namespace,
        &naming::statefulset(&cluster),
    )
    .is_some_and(|sts| crate::cluster::lifecycle::hibernation::at_zero(&sts));
    if stopped && dkv.spec.hibernation {
        return Err(Error::FinalBackupWhileHibernated {
            cluster: format!("{namespace}/{cluster}"),
            annotation: SKIP_FINAL_BACKUP,
        });
    }
    let backups: Api<DistributedKVBackup> = Api::namespaced(ctx.client.clone(), namespace);
    let existing = backups
        .get_opt(&name)
        .await
        .map_err(|source| Error::Cleanup {
            name: cluster.clone(),
            source,
        })?;
    let Some(existing) = existing else {
        let record: DistributedKVBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {dkv_api::labels::CLUSTER_KEY: cluster, "dkv.io/final-backup": "true"}},
            "spec": {"cluster": cluster},
        }))
        .map_err(|e| Error::CleanupWaiting {
            what: format!("building the final backup record: {e}"),
        })?;
        backups
            .create(&PostParams::default(), &record)
            .await
            .map_err(|source| Error::Cleanup {
                name: cluster.clone(),
                source,
            })?;
        info!(%cluster, backup = %name, "taking the final backup before deletion");
        return Err(Error::CleanupWaiting {
            what: format!("the final backup {name}"),
        });
    };
    match existing.status.as_ref().and_then(|s| s.phase) {
        Some(BackupPhase::Completed) => Ok(()),
        Some(BackupPhase::Failed) => Err(Error::FinalBackupFailed {
            backup: name,
            message: existing
                .status
                .and_then(|s| s.message)
                .unwrap_or_else(|| "no reason given".to_owned()),
            annotation: SKIP_FINAL_BACKUP,
        }),
        _ => Err(Error::CleanupWaiting {
            what: format!("the final backup {name}"),
        }),
    }
}
