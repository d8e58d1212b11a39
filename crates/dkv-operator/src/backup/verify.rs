//! Verification of a completed backup (`spec.verify`, the annotation
//! `dkv.io/verify`): the backup is restored into a scratch one-member
//! `DistributedKV` — through the same restore path a user's restore takes —
//! and, once it has formed, the cluster controller compares its key count
//! and etcd's hash of the data at the backup's revision with those the
//! source held (`cluster::verification`), writes the result into
//! `status.verification` and deletes the scratch cluster.
//!
//! Why a scratch cluster and not a bespoke Job: the question a
//! verification answers is "will a restore of this backup give me my data
//! back", and the honest answer exercises the restore users run — fetch,
//! checksum, decryption, the etcd image's own restore tool, a member that
//! starts on the result — rather than a second implementation of it.

use std::time::Duration;

use dkv_api::backup::v1alpha1::{BackupVerification, VerificationPhase};
use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::{BackupContext, BackupError, kube_error};
use crate::parts::backup_status::write_verification;
use crate::parts::naming::MAX_CLUSTER_NAME_LEN;
use dkv_api::labels::VERIFIES;

/// Set to a new value to verify a backup (again).
pub const VERIFY_ANNOTATION: &str = "dkv.io/verify";

/// A scratch cluster that has not formed by then is given up on.
const TIMEOUT: Duration = Duration::from_secs(15 * 60);
const POLL: Duration = Duration::from_secs(15);

/// The scratch cluster of `backup`: `<backup>-verify`, shortened with a
/// hash of the whole name when that is too long for a cluster name.
pub fn scratch_name(backup: &str) -> String {
    let name = format!("{backup}-verify");
    if name.len() <= MAX_CLUSTER_NAME_LEN {
        return name;
    }
    let hash = backup.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let keep = MAX_CLUSTER_NAME_LEN - "-verify-".len() - 8;
    let prefix: String = backup.chars().take(keep).collect();
    format!("{}-verify-{hash:08x}", prefix.trim_end_matches('-'))
}

/// Whether a new verification is due: `spec.verify` and none has run yet,
/// or the annotation asks for one it has not answered.
pub fn wanted(backup: &DistributedKVBackup) -> Option<Option<String>> {
    let last = backup.status.as_ref().and_then(|s| s.verification.as_ref());
    let request = backup.annotations().get(VERIFY_ANNOTATION).cloned();
    if let Some(request) = request.filter(|r| !r.is_empty())
        && last.and_then(|v| v.request.as_ref()) != Some(&request)
    {
        return Some(Some(request));
    }
    (backup.spec.verify == Some(true) && last.is_none()).then_some(None)
}

/// The scratch cluster for `backup`: the source cluster's spec (version,
/// TLS, authentication, resources, storage) at one member, restored from
/// the backup, without backups or recovery of its own, its volumes deleted
/// with it; owned by the backup. Without the source cluster, the etcd
/// image of the backup's version.
pub fn scratch_cluster(
    backup: &DistributedKVBackup,
    source: Option<&DistributedKV>,
) -> Result<DistributedKV, String> {
    let name = scratch_name(&backup.name_any());
    let mut spec = match source {
        Some(source) => serde_json::to_value(&source.spec).map_err(|e| e.to_string())?,
        None => {
            let version = backup
                .status
                .as_ref()
                .and_then(|s| s.artifact.as_ref())
                .and_then(|a| a.etcd_version.clone())
                .ok_or("the source cluster is gone and the backup records no etcd version")?;
            json!({"image": format!("registry.k8s.io/etcd:{version}-0")})
        }
    };
    if let Some(fields) = spec.as_object_mut() {
        for field in ["backup", "bootstrap", "recovery"] {
            fields.remove(field);
        }
        fields.insert("size".to_owned(), json!(1));
        fields.insert(
            "bootstrap".to_owned(),
            json!({"restore": {"backupName": backup.name_any()}}),
        );
        if let Some(Value::Object(storage)) = fields.get_mut("storage") {
            storage.insert("reclaimPolicy".to_owned(), json!("Delete"));
        }
    }
    // The source's backup key, to decrypt an encrypted backup.
    if let Some(reference) = source
        .and_then(|s| s.spec.backup.as_ref())
        .and_then(|b| b.encryption.as_ref())
        && let Some(restore) = spec.pointer_mut("/bootstrap/restore")
    {
        restore["encryption"] = json!({"keySecret": {"name": reference.key_secret.name}});
    }
    let owner = backup
        .controller_owner_ref(&())
        .ok_or("the backup has no uid yet")?;
    let object = json!({
        "apiVersion": "dkv.io/v1beta1",
        "kind": "DistributedKV",
        "metadata": {
            "name": name,
            "namespace": backup.namespace(),
            "labels": {VERIFIES: backup.name_any()},
            "ownerReferences": [owner],
        },
        "spec": spec,
    });
    serde_json::from_value(object).map_err(|e| e.to_string())
}

/// Starts, times out or leaves alone the verification of a completed
/// backup.
pub(super) async fn drive(
    backup: &DistributedKVBackup,
    ctx: &BackupContext,
) -> Result<Action, BackupError> {
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let now = jiff::Timestamp::now();
    let current = backup
        .status
        .as_ref()
        .and_then(|s| s.verification.clone())
        .unwrap_or_default();
    let clusters: Api<DistributedKV> = Api::namespaced(ctx.client.clone(), &ns);
    if current.phase == Some(VerificationPhase::Running) {
        let started = current.start_time.as_ref().map_or(now, |t| t.0);
        let waited = now.duration_since(started).unsigned_abs();
        if waited < TIMEOUT {
            return Ok(Action::requeue(POLL));
        }
        let scratch = current.cluster.clone().unwrap_or_default();
        let outcome = BackupVerification {
            phase: Some(VerificationPhase::Failed),
            completion_time: Some(Time(now)),
            message: Some(format!(
                "the scratch cluster {scratch} did not restore and form within {} minutes; see its status and Events",
                TIMEOUT.as_secs() / 60
            )),
            ..current
        };
        write_verification(&ctx.client, backup, outcome).await?;
        delete_quietly(&clusters, &scratch).await;
        return Ok(Action::await_change());
    }
    let Some(request) = wanted(backup) else {
        return Ok(Action::await_change());
    };
    let source = clusters
        .get_opt(&backup.spec.cluster)
        .await
        .map_err(kube_error(format!(
            "reading DistributedKV {ns}/{}",
            backup.spec.cluster
        )))?;
    let scratch = match scratch_cluster(backup, source.as_ref()) {
        Ok(scratch) => scratch,
        Err(why) => {
            let outcome = BackupVerification {
                phase: Some(VerificationPhase::Failed),
                request,
                start_time: Some(Time(now)),
                completion_time: Some(Time(now)),
                message: Some(why),
                cluster: None,
            };
            write_verification(&ctx.client, backup, outcome).await?;
            return Ok(Action::await_change());
        }
    };
    let scratch_name = scratch.name_any();
    // One left from an earlier verification goes first.
    if clusters
        .get_opt(&scratch_name)
        .await
        .map_err(kube_error(format!(
            "reading DistributedKV {ns}/{scratch_name}"
        )))?
        .is_some()
    {
        delete_quietly(&clusters, &scratch_name).await;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    clusters
        .create(&PostParams::default(), &scratch)
        .await
        .map_err(kube_error(format!(
            "creating DistributedKV {ns}/{scratch_name}"
        )))?;
    info!(backup = %name, scratch = %scratch_name, "verifying the backup in a scratch cluster");
    let running = BackupVerification {
        phase: Some(VerificationPhase::Running),
        cluster: Some(scratch_name.clone()),
        request,
        start_time: Some(Time(now)),
        completion_time: None,
        message: Some(format!("restoring into the scratch cluster {scratch_name}")),
    };
    write_verification(&ctx.client, backup, running).await?;
    Ok(Action::requeue(POLL))
}

async fn delete_quietly(clusters: &Api<DistributedKV>, name: &str) {
    if name.is_empty() {
        return;
    }
    if let Err(err) = clusters.delete(name, &DeleteParams::default()).await
        && !matches!(&err, kube::Error::Api(s) if s.code == 404)
    {
        warn!(cluster = %name, error = %err, "could not delete a scratch cluster");
    }
}

#[cfg(test)]
mod tests {
    use dkv_api::backup::v1alpha1::{
        BackupArtifact, BackupPhase, DistributedKVBackupSpec, DistributedKVBackupStatus,
    };

    use super::*;

    fn backup(name: &str, verify: Option<bool>) -> DistributedKVBackup {
        let mut b = DistributedKVBackup::new(
            name,
            DistributedKVBackupSpec {
                cluster: "orders".to_owned(),
                destination: None,
                verify,
            },
        );
        b.metadata.namespace = Some("shop".to_owned());
        b.metadata.uid = Some("u-1".to_owned());
        b.status = Some(DistributedKVBackupStatus {
            phase: Some(BackupPhase::Completed),
            artifact: Some(BackupArtifact {
                uri: "s3://b/x.db.zst".to_owned(),
                etcd_version: Some("3.5.16".to_owned()),
                ..BackupArtifact::default()
            }),
            ..DistributedKVBackupStatus::default()
        });
        b
    }

    #[test]
    fn scratch_names_fit_a_cluster_name_and_stay_distinct() {
        assert_eq!(scratch_name("nightly"), "nightly-verify");
        let long = "a".repeat(60);
        let other = format!("{}b", "a".repeat(59));
        assert!(scratch_name(&long).len() <= MAX_CLUSTER_NAME_LEN);
        assert_ne!(scratch_name(&long), scratch_name(&other));
    }

    #[test]
    fn a_verification_is_wanted_once_by_spec_and_per_new_annotation_value() {
        assert_eq!(wanted(&backup("b", None)), None);
        let mut b = backup("b", Some(true));
        assert_eq!(wanted(&b), Some(None));
        if let Some(status) = b.status.as_mut() {
            status.verification = Some(BackupVerification {
                phase: Some(VerificationPhase::Verified),
                ..BackupVerification::default()
            });
        }
        assert_eq!(wanted(&b), None);
        b.annotations_mut()
            .insert(VERIFY_ANNOTATION.to_owned(), "again".to_owned());
        assert_eq!(wanted(&b), Some(Some("again".to_owned())));
        if let Some(v) = b.status.as_mut().and_then(|s| s.verification.as_mut()) {
            v.request = Some("again".to_owned());
        }
        assert_eq!(wanted(&b), None);
    }

    #[test]
    fn the_scratch_cluster_is_one_member_restored_from_the_backup_and_owned_by_it() {
        let source: DistributedKV = serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
                     "storage": {"storageClassName": "fast", "size": "1Gi"},
                     "backup": {"destination": {"uri": "s3://b/"}, "schedule": "@daily",
                                "encryption": {"keySecret": {"name": "k"}}},
                     "recovery": {"policy": "RestoreFromBackup"}}
        }))
        .unwrap();
        let scratch = scratch_cluster(&backup("nightly", Some(true)), Some(&source)).unwrap();
        let spec = serde_json::to_value(&scratch.spec).unwrap();
        assert_eq!(scratch.name_any(), "nightly-verify");
        assert_eq!(spec["size"], json!(1));
        assert_eq!(
            spec["bootstrap"],
            json!({"restore": {"backupName": "nightly", "encryption": {"keySecret": {"name": "k"}}}})
        );
        assert!(spec.get("backup").is_none() && spec.get("recovery").is_none());
        assert_eq!(spec["storage"]["reclaimPolicy"], json!("Delete"));
        assert_eq!(scratch.labels()[VERIFIES], "nightly");
        assert_eq!(scratch.owner_references()[0].name, "nightly");

        let orphan = scratch_cluster(&backup("nightly", Some(true)), None).unwrap();
        assert_eq!(orphan.spec.image, "registry.k8s.io/etcd:3.5.16-0");
    }
}
