//! What happens when a `DistributedKV` is deleted, before its finalizer is
//! released: the final backup (when asked for) and the volumes' fate.
//!
//! Children other than volumes need no work here: they carry owner
//! references and the garbage collector removes them.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1alpha1::ReclaimPolicy;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use tracing::info;

use super::context::Context;
use super::error::{Error, Result};
use super::status::publish;
use super::{naming, watches};

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
        final_backup(dkv, ctx).await;
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
            .filter(|p| {
                p.namespace().as_deref() == Some(namespace.as_str())
                    && p.labels().get(dkv_api::labels::CLUSTER_KEY) == Some(&name)
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
    ctx.metrics
        .forget(&kube::runtime::reflector::ObjectRef::from_obj(dkv));
    Ok(Action::await_change())
}

/// The hook for `backup.finalBackupOnDelete`. The backup agent does not
/// exist yet in this version, so deletion proceeds without one — and says so
/// loudly rather than pretending a backup was taken.
async fn final_backup(dkv: &DistributedKV, ctx: &Context) {
    publish(
        dkv,
        Event {
            type_: EventType::Warning,
            reason: "FinalBackupUnavailable".to_owned(),
            note: Some("backup.finalBackupOnDelete is set, but this operator version cannot take backups yet; no final backup was taken".to_owned()),
            action: "Cleanup".to_owned(),
            secondary: None,
        },
        ctx,
    )
    .await;
}
